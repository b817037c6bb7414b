// nccl_allreduce.h: the decisions of the "nccl" all-reduce (nccl_allreduce.cu) that need no GPU,
// header-only so that the CPU build tests them (tests/test_nccl_policy.cpp):
//   nccl_shared_gpu_refusal: may NCCL run these ranks, given the ranks on this node and its GPUs?
//   NcclCallGate: every call on a rank's communicator under that rank's lock, polled while NCCL
//     says "in progress", and an abort that any thread may run while peers are inside such a call.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "src/core/check.h"

namespace dpb {

inline constexpr int kNcclSharedGpuMinVersion = 23000;  // NCCL 2.30.0, as ncclGetVersion codes it
inline constexpr int kNcclMaxRanksPerGpu = 2;            // NCCL 2.30's limit (experimental)

// "2.28.9" from an ncclGetVersion code (up to 2.8: X*1000 + Y*100 + Z; from 2.9: X*10000 + Y*100 + Z).
inline std::string nccl_version_str(int v) {
  const int major = v >= 10000 ? v / 10000 : v / 1000;
  const int minor = v >= 10000 ? v / 100 % 100 : v / 100 % 10;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(v % 100);
}

// Where the ranks of an nccl all-reduce live, as this process sees it.
struct NcclRankLayout {
  int ranks = 1;       // in the whole group (every node)
  int node_ranks = 1;  // on this node: threads, all of them; processes, this node's processes
                       // (MPI_Comm_split_type); 0: not known here (NCCL checks at start-up)
  int node_gpus = 1;   // GPUs this process sees
  // Processes whose CUDA_VISIBLE_DEVICES is set (Slurm's --gpus-per-task sets one per process):
  // each may see other GPUs than its peers, so fewer visible GPUs than node ranks is no proof of
  // sharing; NCCL's own check at ncclCommInitRank ("Duplicate GPU detected") decides then.
  bool own_gpu_view = false;
};

// "" when NCCL accepts the layout, else why not (names the counts, the NCCL version and the
// setting). Ranks share a GPU when a node has more ranks than GPUs (rank r on GPU r mod GPUs):
// NCCL before 2.30 refuses that; from 2.30 NCCL_MULTI_RANK_GPU_ENABLE=1 (multi_rank_env) allows
// up to 2 per GPU. The comparison is per node: 8 processes on two 4-GPU nodes share nothing.
inline std::string nccl_shared_gpu_refusal(const NcclRankLayout& l, int version,
                                           const char* multi_rank_env) {
  if (l.node_ranks <= 0 || l.node_gpus <= 0 || l.node_ranks <= l.node_gpus || l.own_gpu_view)
    return "";
  const int most = (l.node_ranks + l.node_gpus - 1) / l.node_gpus;  // on the busiest GPU
  const bool enabled = multi_rank_env && std::string(multi_rank_env) == "1";
  if (version >= kNcclSharedGpuMinVersion && enabled && most <= kNcclMaxRanksPerGpu) return "";
  const std::string where =
      l.node_ranks == l.ranks ? std::to_string(l.ranks) + " ranks"
                              : std::to_string(l.node_ranks) + " of the " +
                                    std::to_string(l.ranks) + " ranks on this node";
  return where + " on " + std::to_string(l.node_gpus) + " GPU(s), up to " + std::to_string(most) +
         " on one GPU: NCCL refuses ranks sharing a GPU before 2.30 (\"Duplicate GPU "
         "detected\"); from 2.30 it allows at most " + std::to_string(kNcclMaxRanksPerGpu) +
         " per GPU with NCCL_MULTI_RANK_GPU_ENABLE=1. This NCCL is " + nccl_version_str(version) +
         ", NCCL_MULTI_RANK_GPU_ENABLE is " + (multi_rank_env ? multi_rank_env : "unset") +
         ". Use --allreduce naive or ring, or fewer ranks per node";
}

// Calls on the ranks' communicators, abortable from any thread (NCCL's fault-tolerance model):
// the communicators are non-blocking (ncclConfig_t::blocking = 0), so no thread ever waits
// inside NCCL; a call that returns "in progress" is polled from here, one short call at a time,
// each under its rank's lock. abort() takes each rank's lock in turn and runs kill(rank)
// (ncclCommAbort) between two such calls, never during one, so a peer blocked waiting for a
// failed rank (NCCL >= 2.22 connects on first use) returns with an error instead of hanging the
// join of the rank threads. Ranks that share a GPU share a lock: NCCL calls on one device must
// not run concurrently from several threads.
class NcclCallGate {
 public:
  // lock_of[r]: the lock rank r uses (ranks with equal values share it).
  explicit NcclCallGate(const std::vector<int>& lock_of) : lock_of_(lock_of) {
    int n = 0;
    for (int l : lock_of) n = std::max(n, l + 1);
    for (int i = 0; i < n; ++i) locks_.push_back(std::make_unique<std::mutex>());
  }
  int size() const { return int(lock_of_.size()); }
  std::mutex& lock(int rank) { return *locks_.at(size_t(lock_of_.at(size_t(rank)))); }
  bool aborted() const {
    std::lock_guard<std::mutex> lk(state_mu_);
    return aborted_;
  }

  // start() issues the call and returns true when it is complete, false when NCCL reports it in
  // progress; poll() asks again (ncclCommGetAsyncError), same convention. Both throw on errors
  // and run under rank's lock. Throws dpb::Error naming `what` once the gate is aborted.
  void call(int rank, const std::function<bool()>& start, const std::function<bool()>& poll,
            const std::string& what) {
    auto step = [&](const std::function<bool()>& f) {
      std::lock_guard<std::mutex> lk(lock(rank));
      throw_if_aborted(rank, what);  // under the lock: kill(rank) may have run already
      return f();
    };
    if (step(start)) return;
    const auto t0 = std::chrono::steady_clock::now();
    while (!step(poll)) {  // the lock is free between polls: abort() or a peer may take it
      if (std::chrono::steady_clock::now() - t0 < std::chrono::microseconds(50))
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  // Marks the gate aborted (later and current call()s throw), then kill(r) for every rank under
  // its lock. Runs once: a second abort() returns false at once (the first one is doing it).
  bool abort(const std::string& why, const std::function<void(int)>& kill) {
    {
      std::lock_guard<std::mutex> lk(state_mu_);
      if (aborted_) return false;
      aborted_ = true;
      why_ = why;
    }
    for (int r = 0; r < size(); ++r) {
      std::lock_guard<std::mutex> lk(lock(r));
      try {
        kill(r);
      } catch (const std::exception& e) {  // best effort: every rank still gets its kill
        std::fprintf(stderr, "dpbench: warning: aborting the NCCL communicator of rank %d: %s\n", r,
                     e.what());
      }
    }
    return true;
  }

 private:
  void throw_if_aborted(int rank, const std::string& what) const {
    std::lock_guard<std::mutex> lk(state_mu_);
    if (aborted_) throw Error("rank " + std::to_string(rank) + ": " + what + " aborted: " + why_);
  }

  std::vector<int> lock_of_;
  std::vector<std::unique_ptr<std::mutex>> locks_;
  mutable std::mutex state_mu_;
  bool aborted_ = false;
  std::string why_;
};

}  // namespace dpb
