// rank_threads.h: test helper: run fn(rank) on k threads, one per rank, as the backends do.
#pragma once
#include <exception>
#include <functional>
#include <thread>
#include <vector>

namespace dpb {

// Runs fn(rank) on k threads; rethrows the first exception after all threads have ended.
inline void on_ranks(int k, const std::function<void(int)>& fn) {
  std::vector<std::exception_ptr> errs(k);
  std::vector<std::thread> threads;
  for (int r = 0; r < k; ++r)
    threads.emplace_back([&, r] {
      try { fn(r); } catch (...) { errs[r] = std::current_exception(); }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errs)
    if (e) std::rethrow_exception(e);
}

}  // namespace dpb
