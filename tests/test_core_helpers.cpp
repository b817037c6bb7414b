// test_core_helpers.cpp: small utilities of the ground floor: the CPU model name read from
// /proc/cpuinfo's text (src/core/cpu_info.h) and the owners of device and host staging memory
// (Buffer, HostBuffer: one OwnedFloats template in src/core/device.h).
// Run: dpb_tests --gtest_filter='CpuInfo.*:OwnedFloats.*'
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <utility>

#include "kernels/cpu/cpu_device.h"
#include "kernels/machine_info.h"
#include "src/core/cpu_info.h"
#include "src/core/forwarding_device.h"

namespace dpb {
namespace {

TEST(CpuInfo, ModelNameOfTheFirstProcessorWithoutBlanks) {
  std::istringstream x86("processor\t: 0\nvendor_id\t: AuthenticAMD\n"
                         "model name\t: AMD EPYC 7B13 64-Core Processor  \r\n"
                         "processor\t: 1\nmodel name\t: other\n");
  EXPECT_EQ(cpu_model_name(x86), "AMD EPYC 7B13 64-Core Processor");
  std::istringstream arm("processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\n");
  EXPECT_EQ(cpu_model_name(arm), "unknown");
  std::istringstream empty_value("model name\t:   \n");
  EXPECT_EQ(cpu_model_name(empty_value), "unknown");
  EXPECT_EQ(machine_info()["cpu"], cpu_model_name());  // `dpbench info` reads the same
}

// Counts what a CPU device gives back.
class CountingDevice final : public ForwardingDevice {
 public:
  CountingDevice() : ForwardingDevice(make_cpu_device(0, 1)) {}
  void release(float* p) override { ++released, in_->release(p); }
  void free_host(float* p) override { ++freed_host, in_->free_host(p); }
  int released = 0, freed_host = 0;
};

TEST(OwnedFloats, BufferAndHostBufferGiveBackOnceThroughMovesAndReset) {
  CountingDevice dev;
  {
    Buffer a(dev, 10, MemCategory::Temporaries, "a");
    float* p = a.get();
    Buffer b(std::move(a));
    EXPECT_EQ(a.get(), nullptr);
    EXPECT_EQ(a.size(), 0u);
    EXPECT_EQ(b.get(), p);
    EXPECT_EQ(b.size(), 10u);
    Buffer c(dev, 5, MemCategory::Temporaries, "c");
    c = std::move(b);  // c's own buffer is given back first
    EXPECT_EQ(dev.released, 1);
    EXPECT_EQ(c.get(), p);
    c.reset();
    EXPECT_EQ(dev.released, 2);
    Buffer adopted(static_cast<MemoryOwner&>(dev), dev.alloc(3, MemCategory::Temporaries, "adopted"), 3);
    EXPECT_EQ(adopted.size(), 3u);
  }
  EXPECT_EQ(dev.released, 3);
  {
    HostBuffer h(dev, 8, "h");
    HostBuffer g;
    g = std::move(h);
    EXPECT_EQ(h.get(), nullptr);
    EXPECT_EQ(g.size(), 8u);
    EXPECT_EQ(dev.freed_host, 0);
  }
  EXPECT_EQ(dev.freed_host, 1);
  EXPECT_EQ(dev.released, 3);
}

}  // namespace
}  // namespace dpb
