// test_mpi_staging.cpp: processes on the asynchronous test device take the MPI transport's host
// staging path, the one CUDA devices take (collectives/mpi/mpi_transport.h). Run under mpirun by
// tests/mpi_staging_test.sh (ctest -L mpi):
//   mpirun -np 2 dpb_tests --gtest_filter='MpiStaging.*'
// and skipped when not started by a launcher. LeNet, bucketed gradient sync with overlap, for the
// ring, naive and mpi (MPI_Allreduce) all-reduces:
//   - the parameters are those of the threads run (k = 2) and of k = 1 on the same global batch,
//     replicas in sync;
//   - staging runs on the comm stream: the communication thread makes no compute-stream call
//     (download, upload, copy, fill, synchronize) and stages through comm_download / comm_upload;
//   - host staging (Device::alloc_host; pinned on CUDA) is allocated at setup only: no alloc_host
//     once the first step has begun.
// Replay an async interleaving with DPB_ASYNC_SEED=<seed> (mpirun -x DPB_ASYNC_SEED ...).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "collectives/mpi/mpi_transport.h"
#include "kernels/async/async_device.h"
#include "src/core/forwarding_device.h"
#include "src/core/launcher.h"
#include "src/data/dataset.h"
#include "src/train/trainer.h"
#include "tests/train_test_util.h"

using namespace dpb;

namespace {

// What one process's device saw during a training run.
struct Seen {
  std::atomic<long> host_allocs{0};           // alloc_host calls
  std::atomic<long> host_allocs_in_steps{0};  // ... once the first step had begun
  std::atomic<long> comm_downloads{0}, comm_uploads{0};
  std::atomic<long> off_rank_compute{0};  // compute-stream host calls not from the rank thread
  std::atomic<bool> stepping{false};      // the first step has begun (its data is loading)
  std::thread::id rank_thread;            // written before stepping is set
  std::mutex mu;
  std::string offender;  // the first off-rank compute call
};

// Forwards to the async device and records, in Seen, the calls above.
class Observed final : public ForwardingDevice {
 public:
  Observed(std::unique_ptr<Device> in, Seen& seen) : ForwardingDevice(std::move(in)), s_(seen) {}
  float* alloc_host(size_t n, const char* what) override {
    ++s_.host_allocs;
    if (s_.stepping.load()) ++s_.host_allocs_in_steps;
    return in_->alloc_host(n, what);
  }
  void load_images(float* d, const uint8_t* h, size_t n) override {
    if (!s_.stepping.load()) {
      s_.rank_thread = std::this_thread::get_id();
      s_.stepping.store(true);
    }
    in_->load_images(d, h, n);
  }
  void download(float* h, const float* src, size_t n) override {
    compute_call("download");
    in_->download(h, src, n);
  }
  void upload(float* d, const float* h, size_t n) override {
    compute_call("upload");
    in_->upload(d, h, n);
  }
  void copy(float* d, const float* src, size_t n) override {
    compute_call("copy");
    in_->copy(d, src, n);
  }
  void fill(float* d, float v, size_t n) override {
    compute_call("fill");
    in_->fill(d, v, n);
  }
  void synchronize() override {
    compute_call("synchronize");
    in_->synchronize();
  }
  void comm_download(float* h, const float* src, size_t n) override {
    ++s_.comm_downloads;
    in_->comm_download(h, src, n);
  }
  void comm_upload(float* d, const float* h, size_t n) override {
    ++s_.comm_uploads;
    in_->comm_upload(d, h, n);
  }

 private:
  // During training only the rank thread uses the compute stream; the communication thread (the
  // MPI transport's staging) must not.
  void compute_call(const char* what) {
    if (!s_.stepping.load() || std::this_thread::get_id() == s_.rank_thread) return;
    if (s_.off_rank_compute++ == 0) {
      std::lock_guard<std::mutex> lk(s_.mu);
      s_.offender = what;
    }
  }
  Seen& s_;
};

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size() || a.empty()) return INFINITY;
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, double(std::fabs(a[i] - b[i])));
  return std::isnan(d) ? INFINITY : d;
}

TEST(MpiStaging, OverlapStagesOnCommStreamWithBuffersFromSetup) {
  const LaunchEnv env = detect_launch_env();
  if (!env.processes) GTEST_SKIP() << "not started by mpirun (tests/mpi_staging_test.sh runs it)";
  if (!mpi_built()) GTEST_SKIP() << "dpbench built without MPI";
  if (!std::filesystem::exists(resolve_data_dir(""))) GTEST_SKIP() << "no Fashion-MNIST";
  MpiSession mpi;
  SCOPED_TRACE("rank " + std::to_string(mpi.rank()) + ", replay with DPB_ASYNC_SEED=" +
               std::to_string(async_options_from_env().seed));
  const Dataset d = load_fashion_mnist(resolve_data_dir(""), 190, 32);  // 4 steps of 50
  struct Run {
    std::string ar;
    std::vector<float> params;  // rank 0
    bool in_sync = false;
  };
  std::vector<Run> runs = {{"ring"}, {"naive"}, {"mpi"}};
  for (Run& run : runs) {
    TrainConfig c = dpb_test::small_train_config("async", mpi.size(), run.ar, SyncMode::Bucketed,
                                                 /*overlap=*/true);
    c.procs = {mpi.size(), mpi.rank(), mpi.local_rank(), mpi.local_size()};
    Seen seen;
    const TrainResult got = train(c, d, {}, [&](int rank, int threads) {
      return std::make_unique<Observed>(make_async_device(rank, threads), seen);
    });
    run.params = got.final_params;
    run.in_sync = !got.epochs.empty() && got.epochs[0].replicas_in_sync;
    const std::string what = run.ar + " bucketed overlap, " + std::to_string(mpi.size()) +
                             " processes";
    EXPECT_GE(seen.host_allocs.load(), 2) << what << ": no host staging from alloc_host";
    EXPECT_EQ(seen.host_allocs_in_steps.load(), 0)
        << what << ": host staging allocated inside a training step";
    EXPECT_GT(seen.comm_downloads.load(), 0) << what << ": sends not staged on the comm stream";
    EXPECT_GT(seen.comm_uploads.load(), 0) << what << ": receives not staged on the comm stream";
    EXPECT_EQ(seen.off_rank_compute.load(), 0)
        << what << ": the communication thread used the compute stream (first: " << seen.offender
        << ")";
  }
  if (mpi.rank() != 0) return;
  TrainConfig one = dpb_test::small_train_config("cpu", 1, "ring", SyncMode::Bucketed, false);
  const std::vector<float> ref1 = train(one, d).final_params;
  for (const Run& run : runs) {
    TrainConfig threads = dpb_test::small_train_config(
        "cpu", mpi.size(), run.ar == "mpi" ? "ring" : run.ar, SyncMode::Bucketed, true);
    const std::vector<float> ref = train(threads, d).final_params;
    EXPECT_TRUE(run.in_sync) << run.ar << ": replicas out of sync";
    EXPECT_LE(max_abs_diff(run.params, ref), 1e-5) << run.ar << ": processes vs threads (k = "
                                                   << mpi.size() << ")";
    EXPECT_LE(max_abs_diff(run.params, ref1), 1e-5) << run.ar << ": processes vs k = 1";
  }
}

// Two levels (tests/mpi_staging_test.sh runs it as DPB_NODES=2 mpirun -np 4): hier's cross-node
// groups move their shards by messages; their staging too is allocated before the first step,
// and the parameters are those of k = 1.
TEST(MpiStaging, HierCrossNodeStagingFromSetup) {
  const LaunchEnv env = detect_launch_env();
  if (!env.processes) GTEST_SKIP() << "not started by mpirun (tests/mpi_staging_test.sh runs it)";
  if (!mpi_built()) GTEST_SKIP() << "dpbench built without MPI";
  if (!std::filesystem::exists(resolve_data_dir(""))) GTEST_SKIP() << "no Fashion-MNIST";
  MpiSession mpi;
  const char* nodes = std::getenv("DPB_NODES");
  if (mpi.size() != 4 || !nodes || std::string(nodes) != "2")
    GTEST_SKIP() << "needs DPB_NODES=2 mpirun -np 4 (tests/mpi_staging_test.sh)";
  SCOPED_TRACE("rank " + std::to_string(mpi.rank()));
  const Dataset d = load_fashion_mnist(resolve_data_dir(""), 190, 32);
  TrainConfig c = dpb_test::small_train_config("async", 4, "hier", SyncMode::Bucketed,
                                               /*overlap=*/true);
  c.procs = {mpi.size(), mpi.rank(), mpi.local_rank(), mpi.local_size()};
  Seen seen;
  const TrainResult got = train(c, d, {}, [&](int rank, int threads) {
    return std::make_unique<Observed>(make_async_device(rank, threads), seen);
  });
  EXPECT_NE(got.allreduce_resolved.find("hier"), std::string::npos) << got.allreduce_resolved;
  EXPECT_EQ(seen.host_allocs_in_steps.load(), 0)
      << "hier on 2 x 2 nodes: host staging allocated inside a training step";
  EXPECT_EQ(seen.off_rank_compute.load(), 0)
      << "the communication thread used the compute stream (first: " << seen.offender << ")";
  if (mpi.rank() != 0) return;  // rank 0 holds the epochs and the parameters
  ASSERT_FALSE(got.epochs.empty());
  EXPECT_TRUE(got.epochs[0].replicas_in_sync);
  unsetenv("DPB_NODES");  // the reference is one device, no nodes
  TrainConfig one = dpb_test::small_train_config("cpu", 1, "ring", SyncMode::Bucketed, false);
  EXPECT_LE(max_abs_diff(got.final_params, train(one, d).final_params), 1e-5)
      << "hier on 2 x 2 nodes vs k = 1";
}

}  // namespace
