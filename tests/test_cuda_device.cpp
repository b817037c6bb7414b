// test_cuda_device.cpp: what the op table (test_op_table.cpp, every op against the CPU reference)
// does not cover on the CUDA backend: comm ops between devices (two ranks sharing GPU 0, and GPUs
// 0 and 1 when there are two), compute/comm stream ordering, error messages, GPU discovery.
// Compiled only with CUDA; without a GPU every test skips with the CUDA error.
// Run: ctest --test-dir build-cuda -R CudaDevice
#ifdef DPB_HAVE_CUDA
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cuda/cuda_device.h"
#include "src/core/check.h"
#include "src/core/device.h"
#include "kernels/conformance/op_cases.h"
#include "kernels/cuda/cuda_backend.h"

namespace dpb {
namespace {

using Vec = std::vector<float>;

#define REQUIRE_GPU()                                                                  \
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU: " << cuda_unavailable_reason()

Vec rand_vec(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  Vec v(n);
  for (auto& x : v) x = u(g);
  return v;
}

// Exact equality (the op-table harness's comparison, zero tolerance).
::testing::AssertionResult exact(const char* what, const Vec& got, const Vec& want) {
  const CaseResult r = compare_outputs({{what, got, {}}}, {{what, want, {}}});
  if (r.ok) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << r.report();
}

// dst += src for aligned and misaligned offsets, between devices a and b (b's memory as src).
void reduce_cases(Device& a, Device& b) {
  for (size_t n : {size_t(1), size_t(5), size_t(1027), size_t(1) << 20}) {
    for (auto [od, os] : {std::array<size_t, 2>{0, 0}, {1, 1}, {1, 2}, {3, 0}}) {
      SCOPED_TRACE("n " + std::to_string(n) + " offsets " + std::to_string(od) + "," +
                   std::to_string(os));
      Vec d = rand_vec(n + 4, 81), s = rand_vec(n + 4, 82), want = d;
      for (size_t i = 0; i < n; ++i) want[od + i] = d[od + i] + s[os + i];
      Buffer bd(a, n + 4, MemCategory::Temporaries, "dst"), bs(b, n + 4, MemCategory::Temporaries, "src"), bc(a, n + 4, MemCategory::Temporaries, "copy");
      a.upload(bd.get(), d.data(), d.size());
      b.upload(bs.get(), s.data(), s.size());
      b.comm_wait_compute();  // b's upload is ordered on its compute stream
      b.comm_record();
      a.comm_wait_compute();
      a.comm_wait_peer(b);
      a.comm_reduce(bd.get() + od, bs.get() + os, n);
      a.comm_copy(bc.get(), bs.get(), n + 4);
      a.comm_synchronize();
      Vec got(n + 4), copied(n + 4);
      a.download(got.data(), bd.get(), got.size());
      a.download(copied.data(), bc.get(), copied.size());
      EXPECT_TRUE(exact("comm_reduce", got, want));
      EXPECT_TRUE(exact("comm_copy", copied, s));
    }
  }
}

TEST(CudaDevice, CommReduceAndCopy) {
  REQUIRE_GPU();
  auto a = make_cuda_device(0, 0, false), b = make_cuda_device(1, 0, false);  // sharing GPU 0
  reduce_cases(*a, *b);
  if (cuda_device_count() >= 2) {
    auto c = make_cuda_device(1, 1, false);
    reduce_cases(*a, *c);
    reduce_cases(*c, *a);
  }
}

// Work on the compute stream, handed to the comm stream and back, on buffers big enough that a
// missing wait would show.
TEST(CudaDevice, StreamOrdering) {
  REQUIRE_GPU();
  auto d = make_cuda_device(0, 0, false);
  const size_t n = size_t(1) << 24;
  Buffer x(*d, n, MemCategory::Temporaries, "x"), y(*d, n, MemCategory::Temporaries, "y");
  for (int rep = 0; rep < 3; ++rep) {
    d->fill(x.get(), 1.f + rep, n);
    d->fill(y.get(), 0.f, n);
    d->comm_wait_compute();
    d->comm_reduce(y.get(), x.get(), n);  // y = 1 + rep
    d->comm_reduce(y.get(), x.get(), n);  // y = 2 (1 + rep)
    d->compute_wait_comm();
    d->axpy(1.f, x.get(), y.get(), n);  // y = 3 (1 + rep)
    Vec got(n);
    d->download(got.data(), y.get(), n);
    const float want = 3.f * (1 + rep);
    size_t bad = std::count_if(got.begin(), got.end(), [&](float v) { return v != want; });
    EXPECT_EQ(bad, 0u) << "rep " << rep << ": got[0] " << got[0] << " got[n-1] " << got[n - 1];
  }
}

TEST(CudaDevice, ErrorsNameTheProblem) {
  REQUIRE_GPU();
  auto d = make_cuda_device(0, 0, false);
  EXPECT_NE(d->name().find("cuda:0"), std::string::npos) << d->name();
  try {
    d->alloc(size_t(1) << 40, MemCategory::Temporaries, "giant activations");  // 4 TiB
    ADD_FAILURE() << "alloc of 4 TiB did not throw";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("giant activations"), std::string::npos) << m;
    EXPECT_NE(m.find("MB"), std::string::npos) << m;
    EXPECT_NE(m.find("free"), std::string::npos) << m;
  }
  Buffer ok(*d, 16, MemCategory::Temporaries, "after a failed alloc");  // the device still works
  EXPECT_THROW(make_cuda_device(0, cuda_device_count() + 3, false), Error);
  const ConvShape bad{1, 1, 2, 2, 1, 5, 5, 0, 1};  // kernel larger than the input
  EXPECT_THROW(d->conv2d_forward(bad, ok.get(), ok.get(), ok.get(), ok.get()), Error);
}

TEST(CudaDevice, SkipsCleanlyOrCountsGpus) {
  EXPECT_TRUE(cuda_built());
  int n = cuda_device_count();  // must not throw, with or without a driver
  EXPECT_GE(n, 0);
  if (n == 0) EXPECT_FALSE(cuda_unavailable_reason().empty());
  std::printf("CUDA: %d GPU(s); %s\n", n, cuda_info().dump().c_str());
  REQUIRE_GPU();
  for (int g = 0; g < n; ++g) std::printf("  %s\n", make_cuda_device(g, g, false)->name().c_str());
}

// A library's asynchronous error (NCCL's, through the probe collectives/cuda registers) ends a
// host wait with its message; an empty probe removes it and the same wait then succeeds.
TEST(CudaDevice, AsyncErrorProbeEndsHostWaits) {
  REQUIRE_GPU();
  auto dev = make_cuda_device(0, 0, false);
  auto& cuda = dynamic_cast<CudaDevice&>(*dev);
  int calls = 0;
  cuda.set_async_error_probe([&calls] { return ++calls, std::string("injected async error"); });
  // Keeps the comm stream busy for 200 ms, so that comm_synchronize polls.
  const cudaHostFn_t sleep_200ms = [](void*) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  };
  CUDA_CHECK(cudaLaunchHostFunc(cuda.comm_stream(), sleep_200ms, nullptr));
  try {
    dev->comm_synchronize();
    ADD_FAILURE() << "comm_synchronize ignored the probe's error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("comm_synchronize: injected async error"),
              std::string::npos) << e.what();
  }
  EXPECT_GE(calls, 1);
  cuda.set_async_error_probe({});
  dev->comm_synchronize();  // the host function's 200 ms end; no probe, no error
}

}  // namespace
}  // namespace dpb
#endif  // DPB_HAVE_CUDA
