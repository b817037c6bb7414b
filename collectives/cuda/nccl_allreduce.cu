// nccl_allreduce.cu: the "nccl" all-reduce: ncclAllReduce (float, sum, in place) on each rank's
// CUDA comm stream. One communicator per rank, all made once by one thread with
// ncclCommInitRankConfig in a group over the group's GPUs (single process, one thread per rank,
// as ncclCommInitAll does), or, with one process per rank (mpirun/srun), from an id that rank 0
// makes and MPI broadcasts (init_one_process). Its GPU-free decisions are in nccl_allreduce.h. Built with -DDPB_CUDA=ON; make_allreduce("nccl")
// wraps it with tracing and abort; tested by tests/test_cuda_collectives.cpp.
//
// Reduce-scatter and all-gather (collectives/shard.h: in place on the whole buffer, rank r's shard
// chunk r): the same object with its own communicators, issuing ncclReduceScatter (sendbuff =
// buf, recvbuff = buf + r * n/k) or ncclAllGather (sendbuff = buf + r * n/k, recvbuff = buf), NCCL's
// in-place forms, when k divides n. Otherwise the shards differ in size, which those calls cannot
// express: one ncclReduce (to root p) or ncclBroadcast (from root p) per shard p, in place, in one
// NCCL group (what PyTorch does for uneven shards), on the same communicator and stream.
//
// Ranks sharing a GPU: NCCL before 2.30 refuses two ranks of one communicator on one GPU; from
// 2.30, NCCL_MULTI_RANK_GPU_ENABLE=1 allows it (up to 2 ranks per GPU, experimental). Otherwise
// the constructor throws a dpb::Error saying so. When allowed, NCCL calls of the ranks on one GPU
// are serialized by a lock (NCCL documents concurrent calls from several threads on one device
// as unsafe), and NCCL_MAX_CTAS, when unset, is capped so that both ranks' kernels fit on the
// GPU at once (each rank's kernel waits for the other's: they must be co-resident).
//
// Failure: the communicators are non-blocking (ncclConfig_t::blocking = 0) and every call on
// one goes through NcclCallGate (nccl_allreduce.h): no thread waits inside NCCL, a call NCCL
// reports in progress is polled under its rank's lock, and abort() (run by the failing rank's
// thread through CommGroup / RankThreads' on_error, before the rank threads are joined) aborts
// every rank's communicator (ncclCommAbort) between two such calls. So a peer waiting for a
// rank that failed before its first ncclAllReduce (NCCL >= 2.22 connects on first use), or
// whose kernel waits for it, returns with an error instead of hanging the join. The CUDA
// devices' host waits poll ncclCommGetAsyncError through nccl_async_error, the probe this file
// gives each device (CudaDevice::set_async_error_probe), which takes the same lock (never
// waiting for it) and knows only live communicators.
//
// Ordering: run() enqueues on the comm stream and returns; the caller orders the buffer's
// producers before it (comm_wait_compute) and its consumers after it (compute_wait_comm or
// comm_synchronize), as for naive and ring. NCCL's completion on each stream implies every rank
// has contributed, so no extra barrier is needed.
//
// Bytes sent: NCCL moves the data itself, so each call adds to the group's count
// (CommGroup::count_sent) the nominal count, the ring's (comm_volume.h, nccl-tests' convention:
// 2(k-1)/k of the buffer for the all-reduce, (k-1)/k for the others), not a count measured
// inside NCCL (whose tree, NVLS or grouped reduces of uneven shards send other amounts).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nccl.h>

#include "collectives/allreduce.h"
#include "collectives/comm_volume.h"
#include "collectives/cuda/nccl_allreduce.h"
#include "collectives/shard.h"
#include "src/core/launcher.h"
#include "src/core/optional_deps.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_backend.h"

namespace dpb {
namespace {

const std::string version_str(int v) { return nccl_version_str(v); }

// Free device memory on gpu (cudaMemGetInfo; the caller restores its current device).
size_t gpu_free_bytes(int gpu) {
  CUDA_CHECK(cudaSetDevice(gpu));
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return free_b;
}

// How many ranks of one communicator NCCL `version` lets share a GPU with this environment.
int ranks_per_gpu_allowed(int version) {
  const char* env = std::getenv("NCCL_MULTI_RANK_GPU_ENABLE");
  const bool enabled = env && std::string(env) == "1";
  return version >= kNcclSharedGpuMinVersion && enabled ? kNcclMaxRanksPerGpu : 1;
}

// The live communicators and the lock their calls take (NcclCallGate), for nccl_async_error:
// a device's host wait may poll its rank's communicator while another thread aborts it.
struct LiveComms {
  std::mutex mu;
  std::map<ncclComm_t, std::mutex*> lock_of;
};
LiveComms& live_comms() {
  static LiveComms l;
  return l;
}

// Polled by the CUDA devices' host waits: only a live communicator, and only when no call of its
// rank runs (never waiting for one: the next poll asks again).
std::string nccl_async_error(ncclComm_t comm) {
  if (!comm) return "";
  LiveComms& l = live_comms();
  std::unique_lock<std::mutex> reg(l.mu);
  auto it = l.lock_of.find(comm);
  if (it == l.lock_of.end()) return "";  // aborted or destroyed
  std::unique_lock<std::mutex> calls(*it->second, std::try_to_lock);
  if (!calls.owns_lock()) return "";
  reg.unlock();  // the rank's lock keeps comm alive (abort and destroy unregister under it)
  ncclResult_t async = ncclSuccess;
  if (ncclCommGetAsyncError(comm, &async) != ncclSuccess || async == ncclSuccess ||
      async == ncclInProgress)
    return "";
  return std::string("NCCL reported ") + ncclGetErrorString(async) + ": " + ncclGetLastError(comm);
}

// Waits until comm's pending operation (init, a call NCCL reported in progress) is done; throws
// on an error. For the constructing thread only (no peer can abort yet).
void wait_ready(ncclComm_t comm, const std::string& what) {
  for (;;) {
    ncclResult_t state = ncclSuccess;
    NCCL_CHECK(ncclCommGetAsyncError(comm, &state), what);
    if (state == ncclSuccess) return;
    NCCL_CHECK(state, what << ": " << ncclGetLastError(comm));
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
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

// The nccl all-reduce; see the header comment.
class NcclAllReduce final : public AllReduce {
 public:
  NcclAllReduce(CommGroup& group, Collective op)
      : group_(group), op_(op) {
    if (group.launcher() != Launcher::Threads) {
      gate_ = std::make_unique<NcclCallGate>(std::vector<int>(size_t(group.size()), 0));
      init_one_process();
      register_comms();
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
      const std::string why = nccl_shared_gpu_refusal(
          {k, k, int(ranks_on.size()), false}, version, std::getenv("NCCL_MULTI_RANK_GPU_ENABLE"));
      DPB_CHECK(why.empty(), "--allreduce nccl: " << why);
      for (auto& [gpu, count] : ranks_on)
        if (count > 1) cap_ctas_for_shared_gpu(gpu, count);
      warn_lazy_loading();
    }
    std::vector<int> lock_of(k);  // one lock per GPU: ranks sharing a GPU call NCCL in turn
    for (int r = 0; r < k; ++r)
      lock_of[r] = int(std::distance(ranks_on.begin(), ranks_on.find(gpus[r])));
    gate_ = std::make_unique<NcclCallGate>(lock_of);
    init_threads(gpus, version);
    register_comms();
  }

  ~NcclAllReduce() override {
    // After a failure a peer may never have joined the last call: abort rather than wait (the
    // trainer and the benchmarks abort the group, which normally ran abort() already).
    const bool abort = gate_->aborted() || group_.aborted();
    for (int r = 0; r < int(comms_.size()); ++r) {
      if (!comms_[r]) continue;
      unregister(r);
      if (cudaSetDevice(devs_[r]->gpu()) != cudaSuccess) (void)cudaGetLastError();
      const ncclResult_t res = abort ? ncclCommAbort(comms_[r]) : finalize_and_destroy(comms_[r]);
      if (res != ncclSuccess && res != ncclInProgress)
        std::fprintf(stderr, "dpbench: warning: freeing the NCCL communicator of rank %d: %s\n", r,
                     ncclGetErrorString(res));
      comms_[r] = nullptr;
    }
    uncharge_nccl_memory();
  }

  std::string name() const override { return "nccl"; }

  void run(int rank, float* buf, size_t n) override {
    DPB_CHECK(!group_.aborted(), "rank " << rank << ": nccl " << collective_name(op_) << " aborted");
    if (n == 0) return;
    CudaDevice& dev = *devs_[rank];
    CUDA_CHECK(cudaSetDevice(dev.gpu()));
    const std::string what = std::string("nccl ") + collective_name(op_) + " of " +
                             std::to_string(n) + " floats on cuda:" + std::to_string(dev.gpu());
    auto state = [&](const char* when) {  // true: done; false: in progress; throws on errors
      ncclResult_t st = ncclSuccess;
      NCCL_CHECK(ncclCommGetAsyncError(comms_[rank], &st), "rank " << rank << ", " << what);
      if (st == ncclInProgress) return false;
      NCCL_CHECK(st, "rank " << rank << ", " << what << when << ": "
                             << ncclGetLastError(comms_[rank]));
      return true;
    };
    gate_->call(
        rank,
        [&] {
          state(", an error from an earlier call");
          const ncclResult_t res = enqueue(rank, buf, n, dev.comm_stream());
          if (res == ncclInProgress) return false;  // e.g. connecting to the peers (first use)
          NCCL_CHECK(res, "rank " << rank << ", " << what << ": " << ncclGetLastError(comms_[rank]));
          return true;
        },
        [&] { return state(""); }, what);
    group_.count_sent(rank, library_sent_bytes(op_, n, group_.size(), rank));
  }

  // Runs on the failing rank's thread before the rank threads are joined: later and current
  // run() calls throw, and every rank's communicator is aborted (ncclCommAbort stops kernels
  // that wait for the failed rank and NCCL's own waits), each between two calls of its rank.
  void abort(int rank, const std::string& why) override {
    gate_->abort("rank " + std::to_string(rank) + ": " + why, [&](int r) {
      if (!comms_[r]) return;
      unregister(r);
      int current = -1;
      const bool have_current = cudaGetDevice(&current) == cudaSuccess;
      if (cudaSetDevice(devs_[r]->gpu()) != cudaSuccess) (void)cudaGetLastError();
      const ncclResult_t res = ncclCommAbort(comms_[r]);
      comms_[r] = nullptr;
      if (have_current && cudaSetDevice(current) != cudaSuccess) (void)cudaGetLastError();
      if (res != ncclSuccess && res != ncclInProgress)
        std::fprintf(stderr, "dpbench: warning: aborting the NCCL communicator of rank %d: %s\n", r,
                     ncclGetErrorString(res));
    });
  }

 private:
  // Issues this object's collective on rank's communicator (counts in elements, not bytes); see
  // the header comment for the in-place forms and uneven shards.
  ncclResult_t enqueue(int rank, float* buf, size_t n, cudaStream_t stream) {
    ncclComm_t comm = comms_[rank];
    const int k = group_.size();
    if (op_ == Collective::AllReduce)
      return ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, comm, stream);
    if (n % size_t(k) == 0) {
      const size_t c = n / size_t(k);
      float* mine = buf + size_t(rank) * c;
      return op_ == Collective::ReduceScatter
                 ? ncclReduceScatter(buf, mine, c, ncclFloat, ncclSum, comm, stream)
                 : ncclAllGather(mine, buf, c, ncclFloat, comm, stream);
    }
    ncclResult_t res = ncclGroupStart();
    for (int p = 0; p < k && (res == ncclSuccess || res == ncclInProgress); ++p) {
      const size_t len = chunk_size(n, k, p);
      if (len == 0) continue;
      float* shard = buf + chunk_begin(n, k, p);
      res = op_ == Collective::ReduceScatter
                ? ncclReduce(shard, shard, len, ncclFloat, ncclSum, p, comm, stream)
                : ncclBroadcast(shard, shard, len, ncclFloat, p, comm, stream);
    }
    const ncclResult_t end = ncclGroupEnd();  // always closes the group
    return res == ncclSuccess || res == ncclInProgress ? end : res;
  }

  // Non-blocking communicators (see the header comment); NCCL 2.14 introduced them.
#if NCCL_VERSION_CODE < NCCL_VERSION(2, 14, 0)
#error "dpbench needs NCCL 2.14 or newer (non-blocking communicators); set NCCL_ROOT to one"
#endif
  static ncclConfig_t config() {
    ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
    c.blocking = 0;
    return c;
  }

  // One thread makes every rank's communicator, as ncclCommInitAll does, but with the config.
  void init_threads(const std::vector<int>& gpus, int version) {
    const int k = int(gpus.size());
    int current = 0;
    CUDA_CHECK(cudaGetDevice(&current));
    ncclUniqueId id{};
    NCCL_CHECK(ncclGetUniqueId(&id), "ncclGetUniqueId");
    comms_.assign(k, nullptr);
    std::map<int, size_t> free_before;  // gpu -> free bytes before the communicators
    for (int g : gpus) free_before[g] = gpu_free_bytes(g);
    try {
      ncclConfig_t cfg = config();
      NCCL_CHECK(ncclGroupStart(), "creating " << k << " communicators");
      ncclResult_t res = ncclSuccess;
      for (int r = 0; r < k && (res == ncclSuccess || res == ncclInProgress); ++r) {
        const cudaError_t e = cudaSetDevice(gpus[r]);
        res = e == cudaSuccess ? ncclCommInitRankConfig(&comms_[r], k, id, r, &cfg)
                               : ncclUnhandledCudaError;
      }
      const ncclResult_t end = ncclGroupEnd();
      if (res == ncclSuccess || res == ncclInProgress) res = end;
      if (res != ncclInProgress)
        NCCL_CHECK(res, "ncclCommInitRankConfig over " << k << " ranks, NCCL " << version_str(version));
      for (int r = 0; r < k; ++r)
        wait_ready(comms_[r], "rank " + std::to_string(r) + ": NCCL communicator start-up on cuda:" +
                                  std::to_string(gpus[r]) + ", NCCL " + version_str(version));
      std::map<int, int> ranks_on;
      for (int g : gpus) ++ranks_on[g];
      for (int r = 0; r < k; ++r) {  // ranks sharing a GPU share its figure evenly
        const size_t used = free_before[gpus[r]] - std::min(free_before[gpus[r]], gpu_free_bytes(gpus[r]));
        charge_nccl_memory(r, used / size_t(ranks_on[gpus[r]]));
      }
    } catch (...) {
      uncharge_nccl_memory();
      for (ncclComm_t& c : comms_)
        if (c) (void)ncclCommAbort(c);
      comms_.clear();
      (void)cudaSetDevice(current);
      throw;
    }
    if (cudaSetDevice(current) != cudaSuccess) (void)cudaGetLastError();
  }

  // One rank per process (mpirun/srun): nccl-tests' bootstrap. Rank 0 makes the unique id, the
  // group's transport broadcasts it (MPI_Bcast), every process joins with ncclCommInitRankConfig
  // on the GPU its local rank picked (the device was made on it). GPUs shared by processes are
  // NCCL's to refuse when nccl_refuse_ranks could not tell (nccl_allreduce.h).
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
    ncclUniqueId id{};
    if (me == 0) NCCL_CHECK(ncclGetUniqueId(&id), "rank 0: ncclGetUniqueId");
    group_.broadcast_host(me, &id, sizeof id, 0);
    const size_t free_before = gpu_free_bytes(dev->gpu());  // also makes it current
    comms_.assign(k, nullptr);
    ncclConfig_t cfg = config();
    const std::string what =
        "rank " + std::to_string(me) + " of " + std::to_string(k) + " processes on cuda:" +
        std::to_string(dev->gpu());
    const ncclResult_t res = ncclCommInitRankConfig(&comms_[me], k, id, me, &cfg);
    try {
      if (res != ncclInProgress) NCCL_CHECK(res, what);
      wait_ready(comms_[me], what);
      // Other processes on this GPU may allocate meanwhile: the figure is this GPU's change.
      charge_nccl_memory(me, free_before - std::min(free_before, gpu_free_bytes(dev->gpu())));
    } catch (...) {
      uncharge_nccl_memory();
      if (comms_[me]) (void)ncclCommAbort(comms_[me]);
      comms_[me] = nullptr;
      throw;
    }
  }

  // Ranks sharing a GPU: a kernel that CUDA loads lazily (the default from CUDA 12.2) on first
  // launch may wait for the device to drain, which includes the other rank's NCCL kernel that
  // waits for this rank: a deadlock no lock of ours causes or can prevent. Eager loading must be
  // chosen before CUDA starts, so here it can only be advised.
  static void warn_lazy_loading() {
    const char* mode = std::getenv("CUDA_MODULE_LOADING");
    if (mode && std::string(mode) == "EAGER") return;
    std::fprintf(stderr, "dpbench: warning: ranks share a GPU under NCCL with CUDA_MODULE_LOADING=%s: "
                         "a lazily loaded kernel can wait for the other rank's NCCL kernel "
                         "forever; set CUDA_MODULE_LOADING=EAGER\n", mode ? mode : "unset (LAZY)");
  }

  // NCCL's own device memory, measured with cudaMemGetInfo around communicator start-up, charged
  // to rank r's ledger as comm (so --device-mem and the peak see it; past the capacity it is an
  // OutOfMemory like any other). What NCCL allocates when it connects on first use
  // (NCCL_RUNTIME_CONNECT=1, the default from 2.22) comes later and is not in it: set
  // NCCL_RUNTIME_CONNECT=0 to make start-up allocate everything.
  void charge_nccl_memory(int r, size_t bytes) {
    if (bytes == 0) return;
    devs_[r]->memory().add(&comms_[r], bytes, MemCategory::Comm, "NCCL communicator");
    charged_.push_back(r);
  }
  void uncharge_nccl_memory() noexcept {
    for (int r : charged_) devs_[r]->memory().release(&comms_[r]);
    charged_.clear();
  }

  // Each device's host waits then ask NCCL for its communicator's asynchronous error. The probes
  // are set after l.mu is released: a running probe holds its device's probe lock and takes l.mu.
  void register_comms() {
    LiveComms& l = live_comms();
    {
      std::lock_guard<std::mutex> lk(l.mu);
      for (int r = 0; r < int(comms_.size()); ++r)
        if (comms_[r]) l.lock_of[comms_[r]] = &gate_->lock(r);
    }
    for (int r = 0; r < int(comms_.size()); ++r)
      if (ncclComm_t c = comms_[r])
        devs_[r]->set_async_error_probe([c] { return nccl_async_error(c); });
  }
  // Before comms_[r] is freed: its device stops polling it, nccl_async_error forgets it.
  void unregister(int r) {
    devs_[r]->set_async_error_probe(nullptr);
    LiveComms& l = live_comms();
    std::lock_guard<std::mutex> lk(l.mu);
    l.lock_of.erase(comms_[r]);
  }

  // Normal end: flush (ncclCommFinalize, polled), then free. An error on the way: abort.
  static ncclResult_t finalize_and_destroy(ncclComm_t c) noexcept {
    ncclResult_t res = ncclCommFinalize(c);
    while (res == ncclInProgress || res == ncclSuccess) {
      ncclResult_t st = ncclSuccess;
      if (ncclCommGetAsyncError(c, &st) != ncclSuccess) break;
      if (st == ncclSuccess) return ncclCommDestroy(c);
      if (st != ncclInProgress) {
        res = st;
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    (void)ncclCommAbort(c);
    return res;
  }

  CommGroup& group_;
  Collective op_;
  std::unique_ptr<NcclCallGate> gate_;  // made first: abort() may run as soon as ranks do
  std::vector<CudaDevice*> devs_;
  std::vector<ncclComm_t> comms_;  // comms_[r]: read and reset only under gate_->lock(r)
  std::vector<int> charged_;       // ranks whose ledger holds their communicator's memory
};

}  // namespace

std::string nccl_refuse_ranks(int k, int node_ranks) {
  const int ngpu = cuda_device_count();
  int version = 0;
  if (ngpu == 0 || ncclGetVersion(&version) != ncclSuccess) return "";  // the backend says why
  // Processes that each see their own GPUs (CUDA_VISIBLE_DEVICES per process, as Slurm's
  // --gpus-per-task sets it) may well use distinct ones: NCCL checks then.
  const bool processes = detect_launch_env().processes;
  const bool own_view = processes && std::getenv("CUDA_VISIBLE_DEVICES");
  return nccl_shared_gpu_refusal({k, node_ranks, ngpu, own_view}, version,
                                 std::getenv("NCCL_MULTI_RANK_GPU_ENABLE"));
}

int nccl_max_ranks_per_gpu() {
  int version = 0;
  return ncclGetVersion(&version) == ncclSuccess ? ranks_per_gpu_allowed(version) : 1;
}

std::unique_ptr<AllReduce> make_nccl_collective(CommGroup& group, Collective c) {
  return std::make_unique<NcclAllReduce>(group, c);
}

std::unique_ptr<AllReduce> make_nccl_allreduce(CommGroup& group) {
  return make_nccl_collective(group, Collective::AllReduce);
}

std::string nccl_version() {
  int v = 0;
  return ncclGetVersion(&v) == ncclSuccess ? version_str(v) : "unknown";
}

}  // namespace dpb
