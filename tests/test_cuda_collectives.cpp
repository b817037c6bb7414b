// test_cuda_collectives.cpp: every all-reduce algorithm of the table (collectives/registry.h)
// that runs on CUDA (naive, ring, NCCL, ...), on CUDA devices for k = 1..4 ranks
// (rank r on GPU r mod count, so ranks share GPUs when there are fewer than k), on inputs whose
// sums are exact in float: rank r holds (r + 1) * (i % 7 + 1), every rank must end with
// k (k + 1) / 2 * (i % 7 + 1) in every element. NCCL with ranks sharing a GPU is skipped, with
// NCCL's reason, unless this NCCL allows it (>= 2.30 and NCCL_MULTI_RANK_GPU_ENABLE=1).
// Compiled only with CUDA; without a GPU every test skips. Run: ctest --test-dir build-cuda -R CudaColl
#ifdef DPB_HAVE_CUDA
#include <gtest/gtest.h>

#include <algorithm>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collectives/allreduce.h"
#include "collectives/registry.h"
#include "kernels/cuda/cuda_device.h"
#include "src/core/check.h"
#include "src/core/rank_threads.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cpu/cpu_device.h"

namespace dpb {
namespace {

#define REQUIRE_GPU()                                                                  \
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU: " << cuda_unavailable_reason()

struct Ranks {  // k CUDA devices, rank r on GPU r mod count
  std::vector<std::unique_ptr<Device>> devs;
  std::vector<Device*> raw;
  explicit Ranks(int k) {
    int ngpu = cuda_device_count();
    for (int r = 0; r < k; ++r) {
      devs.push_back(make_cuda_device(r, r % ngpu, false));
      raw.push_back(devs.back().get());
    }
  }
};

// Runs fn(rank) on k threads (the shared harness, src/core/rank_threads.h); the first rank's
// exception is recorded as a test failure, not rethrown.
template <class Fn>
void on_ranks(int k, Fn fn) {
  try {
    dpb::on_ranks(k, std::function<void(int)>(fn));
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();
  }
}

// One collective call of n floats on every rank, then checks every element on every rank.
void check_allreduce(AllReduce& ar, CommGroup& group, size_t n) {
  const int k = group.size();
  std::vector<Buffer> bufs(k);
  for (int r = 0; r < k; ++r) {
    Device& dev = group.device(r);
    bufs[r] = Buffer(dev, n, MemCategory::Temporaries, "allreduce test buffer");
    std::vector<float> host(n);
    for (size_t i = 0; i < n; ++i) host[i] = float(r + 1) * float(i % 7 + 1);
    dev.upload(bufs[r].get(), host.data(), n);
  }
  on_ranks(k, [&](int r) {
    Device& dev = group.device(r);
    dev.comm_wait_compute();  // the upload, on the compute stream, comes first
    ar.run(r, bufs[r].get(), n);
    dev.comm_synchronize();
  });
  const float scale = float(k * (k + 1) / 2);
  for (int r = 0; r < k; ++r) {
    std::vector<float> host(n);
    group.device(r).download(host.data(), bufs[r].get(), n);
    size_t wrong = 0, first = n;
    for (size_t i = 0; i < n; ++i)
      if (host[i] != scale * float(i % 7 + 1)) {
        if (first == n) first = i;
        ++wrong;
      }
    EXPECT_EQ(wrong, 0u) << ar.name() << " k=" << k << " n=" << n << " rank " << r << " on "
                         << group.device(r).name() << ": first wrong [" << first << "] = "
                         << (first < n ? host[first] : 0.f) << ", want "
                         << scale * float(first % 7 + 1);
  }
}

const std::vector<size_t> kSizes = {0, 1, 3, 4, 1000, 1027, (size_t(1) << 20) + 7, 5};

void run_algorithm(const std::string& algo) {
  std::string skipped;
  const int ngpu = cuda_device_count();
  for (int k = 1; k <= 4; ++k) {
    if (const std::string why = allreduce_refusal(find_allreduce(algo), k, BackendKind::Cuda);
        !why.empty()) {
      if (algo == "nccl") skipped += "\n  k=" + std::to_string(k) + ": " + why;
      continue;
    }
    SCOPED_TRACE(std::string(algo) + " k=" + std::to_string(k) + " on " + std::to_string(ngpu) +
                 " GPU(s)");
    Ranks ranks(k);
    CommGroup group(k, ranks.raw);
    std::unique_ptr<AllReduce> ar;
    try {
      ar = make_allreduce(algo, group);
    } catch (const Error& e) {
      std::string m = e.what();
      // The only accepted refusal: NCCL with ranks sharing a GPU, naming the way to allow it.
      if (algo == "nccl" && k > ngpu &&
          m.find("NCCL_MULTI_RANK_GPU_ENABLE") != std::string::npos) {
        skipped += "\n  k=" + std::to_string(k) + ": " + m;
        continue;
      }
      ADD_FAILURE() << "make_allreduce(" << algo << ") with k=" << k << ": " << m;
      continue;
    }
    EXPECT_EQ(ar->name(), algo);
    for (size_t n : kSizes) check_allreduce(*ar, group, n);  // repeated calls on one object
  }
  if (!skipped.empty()) GTEST_SKIP() << "ranks sharing a GPU, refused by NCCL:" << skipped;
}

// The algorithms of the table that run on CUDA devices.
std::vector<std::string> cuda_algorithms() {
  std::vector<std::string> names;
  for (const AllReduceEntry& e : allreduce_algorithms())
    if (allreduce_refusal(e, 1, BackendKind::Cuda).empty() ||
        allreduce_refusal(e, 2, BackendKind::Cuda).empty() ||
        allreduce_refusal(e, 4, BackendKind::Cuda).empty())
      names.push_back(e.name);
  return names;
}

class CudaCollectivesExact : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaCollectivesExact, ExactSums) {
  REQUIRE_GPU();
  run_algorithm(GetParam());
}

INSTANTIATE_TEST_SUITE_P(EveryAlgorithm, CudaCollectivesExact, ::testing::ValuesIn(cuda_algorithms()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

// NCCL needs CUDA devices; a CPU rank is refused by name, not crashed on.
TEST(CudaCollectives, NcclRefusesCpuDevices) {
  auto cpu = make_cpu_device(0, 1);
  CommGroup group(1, {cpu.get()});
  EXPECT_THROW(make_nccl_allreduce(group), Error);
}

// The all-reduce result consumed on the compute stream right after compute_wait_comm(), with no
// host synchronization in between (what the trainer does).
// Two ranks even on one GPU (they share it), so that the collective really crosses ranks; NCCL
// only with a GPU per rank (NCCL 2.28 refuses two ranks on one GPU).
TEST(CudaCollectives, ResultOrderedBeforeComputeAfterComputeWaitComm) {
  REQUIRE_GPU();
  const int k = 2, ngpu = cuda_device_count();
  Ranks ranks(k);
  CommGroup group(k, ranks.raw);
  for (const std::string& algo : cuda_algorithms()) {
    if (algo == "nccl" && ngpu < k) continue;
    auto ar = make_allreduce(algo, group);
    const size_t n = size_t(1) << 22;
    std::vector<Buffer> bufs(k), outs(k);
    for (int r = 0; r < k; ++r) {
      bufs[r] = Buffer(group.device(r), n, MemCategory::Temporaries, "grad");
      outs[r] = Buffer(group.device(r), n, MemCategory::Temporaries, "param");
    }
    on_ranks(k, [&](int r) {
      Device& dev = group.device(r);
      dev.fill(bufs[r].get(), 1.f, n);  // compute stream
      dev.comm_wait_compute();
      ar->run(r, bufs[r].get(), n);
      dev.compute_wait_comm();
      dev.axpy(-1.f, bufs[r].get(), outs[r].get(), n);  // out = -k everywhere
    });
    for (int r = 0; r < k; ++r) {
      std::vector<float> host(n);
      group.device(r).download(host.data(), outs[r].get(), n);
      size_t wrong = 0;
      for (float v : host) wrong += v != -float(k);
      EXPECT_EQ(wrong, 0u) << algo << " rank " << r << ": out[0] " << host[0];
    }
  }
}

}  // namespace
}  // namespace dpb
#endif  // DPB_HAVE_CUDA
