// rank_threads.cpp: k persistent rank threads with first-error-wins failure handling (see
// rank_threads.h). Tested by tests/test_rank_threads.cpp.
#include "src/core/rank_threads.h"

#include <pthread.h>
#include <sched.h>

#include "src/core/check.h"
#include "src/core/cpu_info.h"

namespace dpb {

RankThreads::RankThreads(int k, OnError on_error) : k_(k), on_error_(std::move(on_error)) {
  DPB_CHECK(k >= 1, "RankThreads: need at least one rank, got " << k);
  const std::vector<int> allowed = allowed_cpus();  // the creating thread's mask
  const bool pin = pin_ranks(pin_mode_from_env(), k, allowed);
  cpu_ = std::make_unique<std::atomic<int>[]>(size_t(k));
  for (int r = 0; r < k; ++r) {
    cpu_[r].store(-1);
    slices_.push_back(rank_cpu_slice(allowed, k, r, pin));
    const std::vector<int>& s = slices_.back();
    placement_.push_back(s.empty() ? ""
                         : s.size() == 1 ? std::to_string(s[0])
                                         : std::to_string(s.front()) + "-" + std::to_string(s.back()));
  }
  for (int r = 0; r < k; ++r) {
    threads_.emplace_back([this, r] { loop(r); });
    if (slices_[r].empty()) continue;
    // Best effort: a refused mask (a cgroup's cpuset changed under us) leaves the thread free.
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int c : slices_[r]) CPU_SET(c, &set);
    if (pthread_setaffinity_np(threads_.back().native_handle(), sizeof set, &set) != 0)
      placement_[r].clear();
  }
}

RankThreads::~RankThreads() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

// The cause is recorded before anything is aborted: the errors the abort provokes on the other
// ranks come later and are dropped.
void RankThreads::fail(int rank, std::exception_ptr err, const std::string& what) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!error_) error_ = err;
  }
  if (on_error_) {
    try {
      on_error_(rank, "rank " + std::to_string(rank) + " failed: " + what);
    } catch (...) {  // aborting is best effort; the cause is already recorded
    }
  }
  abort_barrier();
}

void RankThreads::loop(int rank) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* fn;
    {
      std::unique_lock<std::mutex> lk(mu_);
      work_cv_.wait(lk, [&] { return stop_ || gen_ != seen; });
      if (stop_) return;
      seen = gen_;
      fn = fn_;
    }
    cpu_[rank].store(sched_getcpu(), std::memory_order_relaxed);
    try {
      (*fn)(rank);
    } catch (const std::exception& e) {
      fail(rank, std::current_exception(), e.what());
    } catch (...) {
      fail(rank, std::current_exception(), "unknown exception");
    }
    std::lock_guard<std::mutex> lk(mu_);
    if (--remaining_ == 0) done_cv_.notify_all();
  }
}

void RankThreads::run(const std::function<void(int)>& fn) {
  std::unique_lock<std::mutex> lk(mu_);
  DPB_CHECK(!error_, "RankThreads: a previous run failed; the rank threads are unusable");
  fn_ = &fn;
  remaining_ = k_;
  ++gen_;
  work_cv_.notify_all();
  done_cv_.wait(lk, [&] { return remaining_ == 0; });
  fn_ = nullptr;
  if (error_) std::rethrow_exception(error_);
}

void RankThreads::align(int rank) {
  std::unique_lock<std::mutex> lk(bar_mu_);
  if (!bar_aborted_ && ++bar_count_ == k_) {
    bar_count_ = 0;
    ++bar_gen_;
    bar_cv_.notify_all();
  } else if (!bar_aborted_) {
    const uint64_t g = bar_gen_;
    bar_cv_.wait(lk, [&] { return bar_gen_ != g || bar_aborted_; });
  }
  if (bar_aborted_) throw Error("rank " + std::to_string(rank) + " stopped: another rank failed");
}

std::vector<int> RankThreads::cpus() const {
  std::vector<int> c;
  for (int r = 0; r < k_; ++r) c.push_back(cpu_[r].load(std::memory_order_relaxed));
  return c;
}

void RankThreads::abort_barrier() {
  std::lock_guard<std::mutex> lk(bar_mu_);
  bar_aborted_ = true;
  bar_cv_.notify_all();
}

void on_ranks(int k, const std::function<void(int)>& fn, RankThreads::OnError on_error) {
  RankThreads(k, std::move(on_error)).run(fn);
}

}  // namespace dpb
