// test_cpu_ops.cpp: CPU backend op tests (memory and communication ops; more to come).
#include <gtest/gtest.h>

#include <vector>

#include "src/core/device.h"

namespace dpb {
namespace {

TEST(CpuOps, AllocIsZeroFilledAndAligned) {
  auto dev = make_cpu_device(0, 1);
  for (size_t n : {size_t(0), size_t(1), size_t(17), size_t(100000)}) {
    Buffer b(*dev, n, "test");
    ASSERT_NE(b.get(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.get()) % 64, 0u);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(b.get()[i], 0.0f) << i;
  }
}

TEST(CpuOps, CommReduceAndCopy) {
  auto dev = make_cpu_device(0, 2);
  for (size_t n : {size_t(0), size_t(1), size_t(1000003)}) {
    std::vector<float> a(n), b(n);
    for (size_t i = 0; i < n; ++i) { a[i] = float(i % 1000); b[i] = 0.5f * float(i % 7); }
    Buffer da(*dev, n, "a"), db(*dev, n, "b");
    dev->upload(da.get(), a.data(), n);
    dev->upload(db.get(), b.data(), n);
    dev->comm_reduce(da.get(), db.get(), n);
    std::vector<float> r(n);
    dev->download(r.data(), da.get(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(r[i], a[i] + b[i]) << i;
    dev->comm_copy(db.get(), da.get(), n);
    dev->download(r.data(), db.get(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(r[i], a[i] + b[i]) << i;
  }
}

}  // namespace
}  // namespace dpb
