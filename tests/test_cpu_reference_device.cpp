// test_cpu_reference_device.cpp: checks of the CPU backend (kernels/cpu) as a device: allocations
// zero-filled and aligned, exact communication ops (reduce, copy), its name and kind, errors, and
// devices on several threads or side by side agreeing with one device alone. The ops' math
// (naive loops, finite differences) is checked in test_cpu_reference.cpp.
// Run: ./build/dpb_tests --gtest_filter='CpuReference*' (about a second).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "src/core/check.h"
#include "src/core/device.h"
#include "kernels/cpu/cpu_device.h"
#include "tests/cpu_reference_test_util.h"

namespace dpb {
namespace {

using namespace cpu_reference_test;

// ---- memory, communication, errors, threads ----

TEST(CpuReference, AllocIsZeroFilledAndAligned) {
  Ctx t(1);
  for (size_t n : {size_t(0), size_t(1), size_t(17), size_t(100000)}) {
    Buffer b(*t.dev, n, MemCategory::Temporaries, "test");
    ASSERT_NE(b.get(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.get()) % 64, 0u);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(b.get()[i], 0.0f) << i;  // the op table relies on it
  }
  try {
    t.dev->alloc(size_t(1) << 60, MemCategory::Temporaries, "huge_activations");
    FAIL() << "expected an allocation error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("huge_activations"), std::string::npos) << e.what();
  }
}

TEST(CpuReference, CommReduceAndCopy) {
  Ctx t(2);
  for (size_t n : {size_t(0), size_t(1), size_t(1000003)}) {
    Vec a(n), b(n);
    for (size_t i = 0; i < n; ++i) a[i] = float(i % 1000), b[i] = 0.5f * float(i % 7);
    Buffer da = t.up(a), db = t.up(b);
    t.dev->comm_reduce(da.get(), db.get(), n);
    Vec r = t.down(da);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(r[i], a[i] + b[i]) << i;
    t.dev->comm_copy(db.get(), da.get(), n);
    r = t.down(db);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(r[i], a[i] + b[i]) << i;
  }
}

TEST(CpuReference, NameKindAndErrors) {
  Ctx t(2);
  EXPECT_EQ(t.dev->kind(), BackendKind::Cpu);
  EXPECT_EQ(t.dev->name().rfind("cpu:0 (2 threads, oneDNN ", 0), 0u) << t.dev->name();
  const ConvShape bad{1, 1, 2, 2, 1, 5, 5, 0, 1};  // kernel larger than the image
  Buffer b = t.buf(64);
  try {
    t.dev->conv2d_forward(bad, b.get(), b.get(), b.get(), b.get());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("conv"), std::string::npos) << e.what();
  }
}

// Large ops take the OpenMP paths; devices on two threads (plus a comm loop beside one of them)
// must agree with one device alone.
TEST(CpuReference, ThreadedAndConcurrentDevicesAgree) {
  const ConvShape s{8, 4, 24, 24, 8, 3, 3, 1, 1};
  const BnShape bs{8, 8, 24 * 24};
  const Vec x = rand_vec(s.x_size(), 24), w = rand_vec(s.w_size(), 25), b = rand_vec(s.k, 26);
  auto run = [&](int threads, Vec& out) {
    Ctx t(threads);
    Device& d = *t.dev;
    Buffer bx = t.up(x), bw = t.up(w), bb = t.up(b), y = t.buf(s.y_size()), y2 = t.buf(s.y_size());
    BnBufs bn(t, bs, Vec(bs.size()), Vec(bs.c, 1.0f), Vec(bs.c, 0.0f));
    for (int it = 0; it < 3; ++it) {
      d.conv2d_forward(s, bx.get(), bw.get(), bb.get(), bn.x.get());
      bn.train(d, bs);
      d.relu_forward(bn.y.get(), y2.get(), s.y_size());
      d.conv2d_backward(s, bx.get(), bw.get(), y2.get(), bx.get(), bw.get(), bb.get());
    }
    out = t.down(bw);
  };
  Vec ref, r1, r2, big(1 << 20, 1.0f), acc(1 << 20, 0.0f);
  run(1, ref);
  auto comm_dev = make_cpu_device(1, 2);
  std::thread th1([&] { run(2, r1); }), th2([&] { run(1, r2); });
  std::thread comm([&] {
    for (int i = 0; i < 20; ++i) comm_dev->comm_reduce(acc.data(), big.data(), big.size());
  });
  th1.join(), th2.join(), comm.join();
  expect_near_all(r1, ref, 1e-3f, 1e-3f, "2-thread device");
  expect_near_all(r2, ref, 1e-5f, 1e-5f, "concurrent 1-thread device");
  EXPECT_EQ(acc[12345], 20.0f);
}

}  // namespace
}  // namespace dpb
