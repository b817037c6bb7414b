// test_meta_device.cpp: the planning backend's device (kernels/meta/meta_device.h), call by call
// against a CPU device: buffers are charged alike (sizes, categories, peak), the capacity refuses
// with the same OutOfMemory message but for the device's name, the conv workspaces of LeNet's and
// ResNet-18's shapes grow alike (kernels/cpu/conv_workspace.h), downloads give zeros and every op
// runs nothing. Training runs on meta: tests/test_meta.cpp.
// Run: dpb_tests --gtest_filter='MetaDevice*'
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_device.h"
#include "kernels/meta/meta_device.h"

namespace dpb {
namespace {

// The same sizes of every category, and the total, within 1% of the CPU's total.
void expect_same_usage(const MemoryUsage& meta, const MemoryUsage& cpu, const std::string& what) {
  const double tol = 0.01 * double(cpu.total());
  EXPECT_NEAR(double(meta.total()), double(cpu.total()), tol) << what;
  for (MemCategory c : kMemCategoryList)
    EXPECT_NEAR(double(meta[c]), double(cpu[c]), tol) << what << ": " << mem_category_name(c);
}

std::vector<float> ones(size_t n) { return std::vector<float>(n, 1.0f); }

// ---- one device, call by call ----

TEST(MetaDevice, ChargesBuffersAsTheCpuDevice) {
  CpuDevice cpu(0, 1);
  MetaDevice meta(0, 1);
  EXPECT_EQ(meta.kind(), BackendKind::Meta);
  EXPECT_NE(meta.name().find("meta:0"), std::string::npos);
  std::vector<Buffer> on_cpu, on_meta;
  for (size_t n : {size_t(0), size_t(1), size_t(15), size_t(16), size_t(17), size_t(1000),
                   size_t(1) << 20}) {
    on_cpu.emplace_back(cpu, n, MemCategory::Activations, "x");
    on_meta.emplace_back(meta, n, MemCategory::Activations, "x");
  }
  EXPECT_EQ(meta.memory().current().total(), cpu.memory().current().total());
  on_cpu[3].reset(), on_meta[3].reset();
  on_cpu.emplace_back(cpu, 5000, MemCategory::Gradients, "g");
  on_meta.emplace_back(meta, 5000, MemCategory::Gradients, "g");
  expect_same_usage(meta.memory().current(), cpu.memory().current(), "current");
  expect_same_usage(meta.memory().peak(), cpu.memory().peak(), "peak");
  EXPECT_EQ(meta.memory().peak().total(), cpu.memory().peak().total());
  // Addresses are distinct and never reused while held.
  Buffer a(meta, 100, MemCategory::Data, "a"), b(meta, 100, MemCategory::Data, "b");
  EXPECT_NE(a.get(), b.get());
  EXPECT_NE(a.get(), nullptr);
}

TEST(MetaDevice, DownloadsZerosAndRunsNothing) {
  MetaDevice meta(0, 1);
  Buffer w(meta, 64, MemCategory::Parameters, "w");
  const std::vector<float> in = ones(64);
  meta.upload(w.get(), in.data(), in.size());  // nothing happens (the memory is not readable)
  meta.fill(w.get(), 3.0f, 64);
  meta.sgd_step(w.get(), w.get(), 0.1f, 64);
  meta.comm_reduce(w.get(), w.get(), 64);
  meta.synchronize();
  std::vector<float> out = ones(64);
  meta.download(out.data(), w.get(), out.size());
  for (float v : out) ASSERT_EQ(v, 0.0f);
}

TEST(MetaDevice, CapacityRefusesAsTheCpuDevice) {
  for (size_t cap : {size_t(4096), size_t(100000)}) {
    CpuDevice cpu(0, 1);
    MetaDevice meta(0, 1);
    std::string msgs[2];
    int i = 0;
    for (Device* d : {static_cast<Device*>(&cpu), static_cast<Device*>(&meta)}) {
      d->memory().set_capacity(cap);
      std::vector<Buffer> held;
      try {
        for (int j = 0; j < 1000; ++j) held.emplace_back(*d, 300, MemCategory::Activations, "act");
      } catch (const OutOfMemory& e) {
        msgs[i] = e.what();
      }
      EXPECT_EQ(d->memory().current().total(), held.size() * 1216);  // 300 floats: 1216 bytes
      ++i;
    }
    ASSERT_FALSE(msgs[0].empty());
    // The one message, but for the device's name.
    const auto strip = [](std::string m, const std::string& dev) {
      return m.replace(m.find(dev), dev.size(), "DEV");
    };
    EXPECT_EQ(strip(msgs[1], "meta:0"), strip(msgs[0], "cpu:0"));
    EXPECT_EQ(meta.memory().peak().total(), cpu.memory().peak().total());
  }
}

// The conv workspaces of LeNet's and ResNet-18's shapes, forward then backward with and without
// dx, grow alike on both devices (the breakdown after every call).
TEST(MetaDevice, ChargesConvWorkspacesAsTheCpuDevice) {
  const std::vector<ConvShape> shapes = {
      {8, 1, 28, 28, 6, 5, 5, 2, 1},     {8, 6, 14, 14, 16, 5, 5, 0, 1},
      {4, 1, 28, 28, 64, 7, 7, 3, 2},    {4, 64, 7, 7, 64, 3, 3, 1, 1},
      {4, 64, 7, 7, 128, 1, 1, 0, 2},    {4, 128, 4, 4, 128, 3, 3, 1, 1},
      {3, 256, 2, 2, 512, 3, 3, 1, 2},   {5, 6, 14, 14, 16, 5, 5, 0, 1}};
  CpuDevice cpu(0, 2);
  MetaDevice meta(0, 2);
  for (const ConvShape& s : shapes) {
    for (Device* d : {static_cast<Device*>(&cpu), static_cast<Device*>(&meta)}) {
      Buffer x(*d, s.x_size(), MemCategory::Activations, "x"),
          w(*d, s.w_size(), MemCategory::Parameters, "w"), b(*d, s.k, MemCategory::Parameters, "b"),
          y(*d, s.y_size(), MemCategory::Activations, "y"),
          dx(*d, s.x_size(), MemCategory::Temporaries, "dx"),
          dw(*d, s.w_size(), MemCategory::Gradients, "dw"),
          db(*d, s.k, MemCategory::Gradients, "db");
      if (d == &cpu) {  // real inputs for the CPU (the meta device's cannot be written)
        cpu.upload(x.get(), ones(s.x_size()).data(), s.x_size());
        cpu.upload(w.get(), ones(s.w_size()).data(), s.w_size());
      }
      d->conv2d_forward(s, x.get(), w.get(), b.get(), y.get());
      d->conv2d_backward(s, x.get(), w.get(), y.get(), nullptr, dw.get(), db.get());
      d->conv2d_backward(s, x.get(), w.get(), y.get(), dx.get(), dw.get(), db.get());
    }
    std::ostringstream what;
    what << s;
    EXPECT_GT(cpu.memory().current()[MemCategory::Workspace], 0u) << what.str();
    EXPECT_EQ(meta.memory().current()[MemCategory::Workspace],
              cpu.memory().current()[MemCategory::Workspace])
        << what.str();
    expect_same_usage(meta.memory().peak(), cpu.memory().peak(), what.str());
  }
}

}  // namespace
}  // namespace dpb
