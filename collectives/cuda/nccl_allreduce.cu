// nccl_allreduce.cu: the "nccl" all-reduce: ncclAllReduce (float, sum, in place) on each rank's
// CUDA comm stream. One communicator per rank, all made once by ncclCommInitAll over the group's
// GPUs (single process, one thread per rank), or, with one process per rank (mpirun/srun), by
// ncclCommInitRank from an id that rank 0 makes and MPI broadcasts (init_one_process). Built with -DDPB_CUDA=ON; make_allreduce("nccl")
// wraps it with tracing and abort; tested by tests/test_cuda_collectives.cpp.
//
// Ranks sharing a GPU: NCCL before 2.30 refuses two ranks of one communicator on one GPU; from
// 2.30, NCCL_MULTI_RANK_GPU_ENABLE=1 allows it (up to 2 ranks per GPU, experimental). Otherwise
// the constructor throws a dpb::Error saying so. When allowed, NCCL calls of the ranks on one GPU
// are serialized by a lock (NCCL documents concurrent calls from several threads on one device
// as unsafe), and NCCL_MAX_CTAS, when unset, is capped so that both ranks' kernels fit on the
// GPU at once (each rank's kernel waits for the other's: they must be co-resident).
//
// Failure: the communicators are registered with their CudaDevice, whose host waits poll
// ncclCommGetAsyncError and throw on an error; CommGroup::abort makes those waits throw too. The
// communicators are then aborted (ncclCommAbort, which also stops kernels still waiting for a
// failed rank) when this object is destroyed, on one thread, after the ranks have stopped: never
// concurrently with a rank's own NCCL call.
//
// Ordering: run() enqueues on the comm stream and returns; the caller orders the buffer's
// producers before it (comm_wait_compute) and its consumers after it (compute_wait_comm or
// comm_synchronize), as for naive and ring. NCCL's completion on each stream implies every rank
// has contributed, so no extra barrier is needed.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nccl.h>

#include "collectives/allreduce.h"
#include "kernels/cuda/cuda_device.h"

namespace dpb {
namespace {

constexpr int kSharedGpuMinVersion = 23000;  // NCCL 2.30.0, as ncclGetVersion codes it
constexpr int kMaxRanksPerGpu = 2;            // NCCL 2.30's limit (experimental feature)

std::string version_str(int v) {
  // Codes up to 2.8 are X*1000 + Y*100 + Z; from 2.9 X*10000 + Y*100 + Z.
  int major = v >= 10000 ? v / 10000 : v / 1000, minor = v >= 10000 ? v / 100 % 100 : v / 100 % 10;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(v % 100);
}

// How many ranks of one communicator NCCL `version` lets share a GPU with this environment.
int ranks_per_gpu_allowed(int version) {
  const char* env = std::getenv("NCCL_MULTI_RANK_GPU_ENABLE");
  const bool enabled = env && std::string(env) == "1";
  return version >= kSharedGpuMinVersion && enabled ? kMaxRanksPerGpu : 1;
}

// "" when NCCL accepts k ranks with up to `most` on one of `gpus` GPUs, else why not.
std::string shared_gpu_refusal(int k, int gpus, int most, int version) {
  const char* env = std::getenv("NCCL_MULTI_RANK_GPU_ENABLE");
  if (most <= ranks_per_gpu_allowed(version)) return "";
  return std::to_string(k) + " ranks on " + std::to_string(gpus) + " GPU(s), up to " +
         std::to_string(most) + " on one GPU: NCCL refuses ranks sharing a GPU before 2.30 "
         "(\"Duplicate GPU detected\"); from 2.30 it allows at most " +
         std::to_string(kMaxRanksPerGpu) + " per GPU with NCCL_MULTI_RANK_GPU_ENABLE=1. This NCCL "
         "is " + version_str(version) + ", NCCL_MULTI_RANK_GPU_ENABLE is " +
         (env ? env : "unset") + ". Use --allreduce naive or ring, or fewer ranks";
}

// Shared GPUs: at most sm_count / (2 * ranks on the GPU) CTAs per NCCL kernel, so that every
// rank's kernel and some compute fit beside each other. Set before the communicators are made,
// on the constructing thread (before rank threads run). An explicit NCCL_MAX_CTAS is kept.
void cap_ctas_for_shared_gpu(int gpu, int ranks_on_gpu) {
  if (std::getenv("NCCL_MAX_CTAS")) return;
  int sms = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, gpu));
  const int ctas = std::max(1, std::min(32, sms / (2 * ranks_on_gpu)));
  setenv("NCCL_MAX_CTAS", std::to_string(ctas).c_str(), 0);
  std::fprintf(stderr, "dpbench: %d ranks share cuda:%d: NCCL_MAX_CTAS=%d (of %d SMs)\n",
               ranks_on_gpu, gpu, ctas, sms);
}

class NcclAllReduce final : public AllReduce {
 public:
  explicit NcclAllReduce(CommGroup& group) : group_(group) {
    if (group.launcher() != "threads") {
      init_one_process();
      return;
    }
    const int k = group.size();
    std::vector<int> gpus(k);
    std::map<int, int> ranks_on;  // gpu -> number of ranks on it
    for (int r = 0; r < k; ++r) {
      auto* dev = dynamic_cast<CudaDevice*>(&group.device(r));
      DPB_CHECK(dev, "--allreduce nccl: rank " << r << " is on " << group.device(r).name()
                                               << ", not a CUDA device");
      devs_.push_back(dev);
      gpus[r] = dev->gpu();
      ++ranks_on[gpus[r]];
    }
    int version = 0;
    NCCL_CHECK(ncclGetVersion(&version), "all ranks");
    int most = 0;
    for (auto& [gpu, count] : ranks_on) most = std::max(most, count);
    if (most > 1) {
      const std::string why = shared_gpu_refusal(k, int(ranks_on.size()), most, version);
      DPB_CHECK(why.empty(), "--allreduce nccl: " << why);
      for (auto& [gpu, count] : ranks_on)
        if (count > 1) cap_ctas_for_shared_gpu(gpu, count);
    }
    for (int r = 0; r < k; ++r) {  // one lock per GPU, shared by the ranks on it
      auto& mu = gpu_mu_[gpus[r]];
      if (!mu) mu = std::make_shared<std::mutex>();
      rank_mu_.push_back(ranks_on[gpus[r]] > 1 ? mu : nullptr);
    }
    int current = 0;
    CUDA_CHECK(cudaGetDevice(&current));
    comms_.assign(k, nullptr);
    ncclResult_t res = ncclCommInitAll(comms_.data(), k, gpus.data());
    cudaError_t back = cudaSetDevice(current);  // ncclCommInitAll may move this thread's device
    if (res != ncclSuccess) {
      comms_.clear();  // nothing to destroy: ncclCommInitAll cleans up after itself
      NCCL_CHECK(res, "ncclCommInitAll over " << k << " ranks, NCCL " << version_str(version));
    }
    if (back != cudaSuccess) (void)cudaGetLastError();
    for (int r = 0; r < k; ++r) devs_[r]->set_nccl_comm(comms_[r]);
  }

  ~NcclAllReduce() override {
    // After a failure a peer may never have joined the last call: abort rather than wait (the
    // trainer and the benchmarks abort the group; this object's own abort may not have run).
    const bool abort = aborted_.load() || group_.aborted();
    for (size_t r = 0; r < comms_.size(); ++r) {
      if (!comms_[r]) continue;
      devs_[r]->set_nccl_comm(nullptr);
      if (cudaSetDevice(devs_[r]->gpu()) != cudaSuccess) (void)cudaGetLastError();
      ncclResult_t res = abort ? ncclCommAbort(comms_[r]) : ncclCommDestroy(comms_[r]);
      if (res != ncclSuccess)
        std::fprintf(stderr, "dpbench: warning: freeing the NCCL communicator of rank %zu: %s\n", r,
                     ncclGetErrorString(res));
    }
  }

  std::string name() const override { return "nccl"; }

  // One rank per process (mpirun/srun): nccl-tests' bootstrap. Rank 0 makes the unique id, the
  // group's transport broadcasts it (MPI_Bcast), every process joins with ncclCommInitRank on
  // the GPU its local rank picked (the device was made on it). GPUs shared by processes are
  // NCCL's to refuse.
  void init_one_process() {
    const int k = group_.size();
    int me = -1;
    for (int r = 0; r < k && me < 0; ++r)
      if (group_.is_local(r)) me = r;
    DPB_CHECK(me >= 0, "--allreduce nccl: no rank of the group lives in this process");
    auto* dev = dynamic_cast<CudaDevice*>(&group_.device(me));
    DPB_CHECK(dev, "--allreduce nccl: rank " << me << " is on " << group_.device(me).name()
                                             << ", not a CUDA device");
    devs_.assign(k, nullptr);
    devs_[me] = dev;
    rank_mu_.assign(k, nullptr);
    ncclUniqueId id{};
    if (me == 0) NCCL_CHECK(ncclGetUniqueId(&id), "rank 0: ncclGetUniqueId");
    group_.broadcast_host(me, &id, sizeof id, 0);
    CUDA_CHECK(cudaSetDevice(dev->gpu()));
    comms_.assign(k, nullptr);
    NCCL_CHECK(ncclCommInitRank(&comms_[me], k, id, me),
               "rank " << me << " of " << k << " processes on cuda:" << dev->gpu());
    dev->set_nccl_comm(comms_[me]);
  }

  void run(int rank, float* buf, size_t n) override {
    DPB_CHECK(!aborted_.load() && !group_.aborted(), "rank " << rank << ": nccl all-reduce aborted");
    if (n == 0) return;
    CudaDevice& dev = *devs_[rank];
    CUDA_CHECK(cudaSetDevice(dev.gpu()));
    ncclComm_t comm = comms_[rank];
    ncclResult_t async = ncclSuccess;
    NCCL_CHECK(ncclCommGetAsyncError(comm, &async), "rank " << rank);
    NCCL_CHECK(async, "rank " << rank << ", asynchronous error from an earlier call: "
                              << ncclGetLastError(comm));
    // Count in elements (floats), not bytes. Ranks sharing a GPU call NCCL one at a time.
    std::unique_lock<std::mutex> lk;
    if (rank_mu_[rank]) lk = std::unique_lock<std::mutex>(*rank_mu_[rank]);
    ncclResult_t res =
        ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, comm, dev.comm_stream());
    NCCL_CHECK(res, "rank " << rank << " on cuda:" << dev.gpu() << ", " << n << " floats: "
                            << ncclGetLastError(comm));
  }

  // Later run() calls throw, and (through CommGroup::abort) every rank's host waits. Kernels
  // already enqueued by peers that wait for this rank are stopped by ncclCommAbort when this
  // object goes away (calling it here could race a peer thread's own ncclAllReduce).
  void abort(int rank, const std::string& why) override {
    (void)rank;
    (void)why;
    aborted_.store(true);
  }

 private:
  CommGroup& group_;
  std::map<int, std::shared_ptr<std::mutex>> gpu_mu_;
  std::vector<std::shared_ptr<std::mutex>> rank_mu_;  // null: the rank has its GPU alone
  std::vector<CudaDevice*> devs_;
  std::vector<ncclComm_t> comms_;
  std::atomic<bool> aborted_{false};
};

}  // namespace

std::string nccl_refuse_ranks(int k) {
  const int ngpu = cuda_device_count();
  int version = 0;
  if (ngpu == 0 || ncclGetVersion(&version) != ncclSuccess) return "";  // the backend says why
  return shared_gpu_refusal(k, std::min(k, ngpu), (k + ngpu - 1) / ngpu, version);
}

int nccl_max_ranks_per_gpu() {
  int version = 0;
  return ncclGetVersion(&version) == ncclSuccess ? ranks_per_gpu_allowed(version) : 1;
}

std::unique_ptr<AllReduce> make_nccl_allreduce(CommGroup& group) {
  return std::make_unique<NcclAllReduce>(group);
}

std::string nccl_version() {
  int v = 0;
  return ncclGetVersion(&v) == ncclSuccess ? version_str(v) : "unknown";
}

std::string nccl_async_error(ncclComm* comm) {
  ncclResult_t async = ncclSuccess;
  if (!comm || ncclCommGetAsyncError(comm, &async) != ncclSuccess || async == ncclSuccess ||
      async == ncclInProgress)
    return "";
  return std::string("NCCL reported ") + ncclGetErrorString(async) + ": " + ncclGetLastError(comm);
}

}  // namespace dpb
