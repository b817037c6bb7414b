// test_conv_algo_cache.cpp: the cuDNN algorithm cache's policy (kernels/cuda/conv_algo_cache.h),
// which has no CUDA in it, on the CPU:
//   - lock order: no cache lock is held while a rank searches, so a peer that
//     must reach a collective for the search to end (a search waits for its GPU, whose NCCL
//     kernel waits for that peer) gets there; a lock held across the search would deadlock.
//     The collective is a real ring all-reduce on the asynchronous device.
//   - keying: an algorithm found for one batch size is reused for another only as
//     "not exact", and a search for the exact shape then stores and returns its own entry.
//   ./dpb_tests --gtest_filter='ConvAlgoCache*'
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <vector>

#include "collectives/allreduce.h"
#include "kernels/async/async_device.h"
#include "kernels/cuda/conv_algo_cache.h"
#include "src/core/check.h"
#include "tests/rank_threads.h"

namespace dpb {
namespace {

ConvAlgoKey key(int gpu, int n, int dir = 0, bool tf32 = false) {
  return {gpu, tf32, dir, {n, 3, 32, 32, 16, 3, 3, 1, 1}};
}

// A one-shot flag a thread can wait on with a deadline (the test fails instead of hanging).
struct Flag {
  std::mutex mu;
  std::condition_variable cv;
  bool set = false;
  void raise() {
    std::lock_guard<std::mutex> lk(mu);
    set = true;
    cv.notify_all();
  }
  bool wait_for(std::chrono::milliseconds d) {
    std::unique_lock<std::mutex> lk(mu);
    return cv.wait_for(lk, d, [&] { return set; });
  }
};

// Rank 0's search cannot end until rank 1 has entered the collective (as a cudnnFind that waits
// for its GPU, where an NCCL kernel waits for rank 1); rank 1 first chooses its own algorithm.
// Before the fix, rank 1 waited for the lock rank 0 held across its search: rank 0's wait below
// timed out. Run for two ranks on two GPUs and for two ranks sharing one GPU (same shape).
void search_while_peer_enters_collective(int gpu_of_rank1) {
  ConvAlgoCache cache;
  const int k = 2;
  std::vector<std::unique_ptr<Device>> devs;
  std::vector<Device*> raw;
  for (int r = 0; r < k; ++r) {
    devs.push_back(make_async_device(r, async_options_from_env()));
    raw.push_back(devs.back().get());
  }
  CommGroup group(k, raw);
  auto ar = make_allreduce("ring", group);
  Flag rank1_in_collective, rank0_searching;
  std::atomic<int> locks_during_search{-1};
  std::atomic<bool> peer_arrived{false};
  std::vector<ConvAlgo> chosen(k);
  on_ranks(k, [&](int r) {
    const int gpu = r == 0 ? 0 : gpu_of_rank1;
    auto use = [](const ConvAlgo&) { return true; };
    if (r == 0) {
      auto find = [&] {
        locks_during_search = ConvAlgoCache::locks_held_here();
        rank0_searching.raise();
        peer_arrived = rank1_in_collective.wait_for(std::chrono::seconds(10));
        return ConvAlgo{1, 0};
      };
      chosen[0] = choose_conv_algo(cache, key(gpu, 64), false, find, use).algo;
    } else {
      if (!rank0_searching.wait_for(std::chrono::seconds(10)))
        throw Error("rank 0 never started its search");
      // Same GPU: rank 0's search has inserted nothing yet, so rank 1 searches too; the first
      // insert wins and both use it.
      auto find = [] { return ConvAlgo{2, 0}; };
      chosen[1] = choose_conv_algo(cache, key(gpu, 64), false, find, use).algo;
      rank1_in_collective.raise();
    }
    Buffer buf(*raw[r], 1000, MemCategory::Temporaries, "grads");
    std::vector<float> host(1000, float(r + 1));
    raw[r]->upload(buf.get(), host.data(), host.size());
    raw[r]->comm_wait_compute();  // the buffer's producers before the collective ...
    ar->run(r, buf.get(), 1000);
    raw[r]->compute_wait_comm();  // ... and its consumers after it
    raw[r]->download(host.data(), buf.get(), host.size());
    EXPECT_EQ(host[999], 3.0f);
  }, [&](int r, const std::string& why) { ar->abort(r, why); });
  EXPECT_EQ(locks_during_search.load(), 0) << "a cache lock was held during the search";
  EXPECT_TRUE(peer_arrived.load()) << "rank 1 could not reach the collective during rank 0's "
                                      "search: it waited for a lock the search held";
  if (gpu_of_rank1 == 0) {
    EXPECT_EQ(chosen[0].algo, chosen[1].algo) << "ranks of one GPU must share one algorithm";
    EXPECT_EQ(chosen[0].algo, 2);  // rank 1's search ended first
  } else {
    EXPECT_EQ(chosen[0].algo, 1);
    EXPECT_EQ(chosen[1].algo, 2);
  }
}

TEST(ConvAlgoCache, NoLockHeldWhileSearchingPeerOnAnotherGpuReachesCollective) {
  search_while_peer_enters_collective(1);
}

TEST(ConvAlgoCache, NoLockHeldWhileSearchingPeerOnSameGpuReachesCollective) {
  search_while_peer_enters_collective(0);
}

TEST(ConvAlgoCache, GpusDirectionsAndMathAreSeparateEntries) {
  ConvAlgoCache cache;
  cache.insert(key(0, 64), {5, 0});
  EXPECT_EQ(cache.lookup(key(0, 64)).match, ConvAlgoCache::Match::Exact);
  EXPECT_EQ(cache.lookup(key(1, 64)).match, ConvAlgoCache::Match::None);
  EXPECT_EQ(cache.lookup(key(0, 64, 1)).match, ConvAlgoCache::Match::None);
  EXPECT_EQ(cache.lookup(key(0, 64, 0, true)).match, ConvAlgoCache::Match::None);
  ConvAlgoKey other = key(0, 64);
  other.shape[2] = 16;  // another height
  EXPECT_EQ(cache.lookup(other).match, ConvAlgoCache::Match::None);
  EXPECT_EQ(cache.insert(key(0, 64), {7, 0}).algo, 5) << "the first insert wins";
}

// Item 10: the last, partial batch reuses the full batch's algorithm without a search (no search
// inside a timed epoch), marked not exact; when cuDNN refuses to run it, the caller searches for
// the exact shape, which gets its own entry; later epochs find that entry directly.
TEST(ConvAlgoCache, OtherBatchSizeIsReusedAsNotExactThenSearchedExactly) {
  ConvAlgoCache cache;
  int searches = 0;
  auto use = [](const ConvAlgo&) { return true; };
  auto find_fft = [&] { ++searches; return ConvAlgo{4, 0}; };   // found at batch 64
  auto find_gemm = [&] { ++searches; return ConvAlgo{1, 0}; };  // found at batch 17
  ConvAlgoChoice c = choose_conv_algo(cache, key(0, 64), false, find_fft, use);
  EXPECT_TRUE(c.exact);
  EXPECT_EQ(searches, 1);

  c = choose_conv_algo(cache, key(0, 17), false, find_gemm, use);
  EXPECT_FALSE(c.exact) << "batch 17 reuses batch 64's algorithm: it must not count as exact";
  EXPECT_EQ(c.algo.algo, 4);
  EXPECT_EQ(searches, 1);
  EXPECT_EQ(cache.lookup(key(0, 17)).match, ConvAlgoCache::Match::OtherBatch);

  // cuDNN refused algorithm 4 at batch 17: search for the exact shape.
  c = choose_conv_algo(cache, key(0, 17), true, find_gemm, use);
  EXPECT_TRUE(c.exact);
  EXPECT_EQ(c.algo.algo, 1);
  EXPECT_EQ(searches, 2);
  EXPECT_EQ(cache.lookup(key(0, 17)).match, ConvAlgoCache::Match::Exact);
  EXPECT_EQ(cache.lookup(key(0, 17)).algo.algo, 1);
  EXPECT_EQ(cache.lookup(key(0, 64)).algo.algo, 4) << "batch 64 keeps its own algorithm";

  c = choose_conv_algo(cache, key(0, 17), false, find_gemm, use);  // the next epoch
  EXPECT_TRUE(c.exact);
  EXPECT_EQ(c.algo.algo, 1);
  EXPECT_EQ(searches, 2);
}

// A reused algorithm whose workspace query fails for this batch (use() false) is not taken: the
// shape is searched instead.
TEST(ConvAlgoCache, ReuseRefusedByWorkspaceQuerySearches) {
  ConvAlgoCache cache;
  cache.insert(key(0, 64), {6, 0});
  int searches = 0;
  auto use = [](const ConvAlgo& a) { return a.algo != 6; };
  auto find = [&] { ++searches; return ConvAlgo{0, 0}; };
  const ConvAlgoChoice c = choose_conv_algo(cache, key(0, 3), false, find, use);
  EXPECT_TRUE(c.exact);
  EXPECT_EQ(c.algo.algo, 0);
  EXPECT_EQ(searches, 1);
}

}  // namespace
}  // namespace dpb
