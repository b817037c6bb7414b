// rank_threads.h: the one harness that runs k ranks on k host threads, used by the trainer
// (src/train/trainer.cpp), the microbenchmarks (bench/) and the tests (tests/rank_threads.h).
//
//   RankThreads pool(k, [&](int r, const std::string& why) { group.abort(r, why); });
//   pool.run([&](int r) { ... rank r's work; pool.align(r) is a barrier among the ranks ... });
//
// The k threads are started once and reused by every run(). Failure: the first exception thrown
// by any rank is recorded (it is the cause; the others usually follow from the abort), then
// on_error(rank, what) runs on the failing thread, so that it can abort whatever the other ranks
// may block in (CommGroup, AllReduce, ...), and the pool's own barrier is aborted; run() returns
// when every rank has ended and rethrows that first exception. The pool is then unusable.
//
// Placement (issue 25 item 6): when the k ranks fit the CPUs this process may use and no other
// process has a runnable task, rank r's thread is bound to its own slice of them (cpu_info.h's
// rank_cpu_slice and pin_ranks; DPB_PIN=0: never, 1: always).
// Unbound, the scheduler often woke both ranks of a 2-rank all-reduce on one core for a whole
// invocation (the waiter polling on its peer's core): 97 us or 600 us for the same call.
// Each rank records the CPU it started its last run() on (cpus()).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace dpb {

class RankThreads {
 public:
  using OnError = std::function<void(int rank, const std::string& why)>;
  explicit RankThreads(int k, OnError on_error = {});
  ~RankThreads();
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;
  int size() const { return k_; }
  // Runs fn(rank) on every rank thread concurrently; returns when all are done and rethrows the
  // first exception. Not reentrant.
  void run(const std::function<void(int)>& fn);
  // Barrier among the rank threads (call from inside fn on every rank); throws dpb::Error once a
  // rank has failed. Blocks at once (no polling).
  void align(int rank);
  // Per rank: the CPU (sched_getcpu) its thread was on when the last run() began (-1 before any).
  std::vector<int> cpus() const;
  // Per rank: its CPU slice ("" when not bound), e.g. "0" or "0-3".
  const std::vector<std::string>& placement() const { return placement_; }

 private:
  void loop(int rank);
  void fail(int rank, std::exception_ptr err, const std::string& what);
  void abort_barrier();

  const int k_;
  OnError on_error_;
  std::mutex bar_mu_;  // align(): a barrier of our own, abortable
  std::condition_variable bar_cv_;
  int bar_count_ = 0;
  uint64_t bar_gen_ = 0;
  bool bar_aborted_ = false;
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  uint64_t gen_ = 0;
  int remaining_ = 0;
  bool stop_ = false;
  const std::function<void(int)>* fn_ = nullptr;
  std::exception_ptr error_;
  std::vector<std::vector<int>> slices_;      // per rank: CPUs it is bound to (empty: none)
  std::vector<std::string> placement_;
  std::unique_ptr<std::atomic<int>[]> cpu_;   // per rank: sched_getcpu at its last run()
  std::vector<std::thread> threads_;  // last: started after everything above exists
};

// Runs fn(rank) on k fresh threads (one run of a RankThreads); rethrows the first exception.
void on_ranks(int k, const std::function<void(int)>& fn, RankThreads::OnError on_error = {});

}  // namespace dpb
