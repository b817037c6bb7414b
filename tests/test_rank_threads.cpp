// test_rank_threads.cpp: the rank harness (src/core/rank_threads.h) runs every rank on its own
// thread, reports the first error (the cause, not the aborts it provokes), calls on_error so that
// ranks blocked elsewhere (here a CommGroup barrier) wake up, and never hangs.
// Run: ./dpb_tests --gtest_filter='RankThreads*'
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>

#include "collectives/allreduce.h"
#include "kernels/backends.h"
#include "src/core/check.h"
#include "src/core/rank_threads.h"

using namespace dpb;

TEST(RankThreads, EveryRankRunsOnItsOwnThread) {
  RankThreads pool(4);
  std::mutex mu;
  std::set<std::thread::id> ids;
  std::atomic<int> sum{0};
  for (int rep = 0; rep < 3; ++rep)  // the same threads serve every run
    pool.run([&](int r) {
      pool.align(r);
      sum += r;
      std::lock_guard<std::mutex> lk(mu);
      ids.insert(std::this_thread::get_id());
    });
  EXPECT_EQ(sum.load(), 3 * (0 + 1 + 2 + 3));
  EXPECT_EQ(ids.size(), 4u);
  EXPECT_EQ(ids.count(std::this_thread::get_id()), 0u);
}

TEST(RankThreads, FirstErrorWinsAndPeersAreAborted) {
  const int k = 4;
  std::vector<std::unique_ptr<Device>> devs;
  std::vector<Device*> ptrs;
  for (int r = 0; r < k; ++r) {
    devs.push_back(make_device("cpu", r, DeviceOptions{1}));
    ptrs.push_back(devs.back().get());
  }
  CommGroup group(k, ptrs);
  std::mutex mu;
  std::vector<int> aborted_by;
  RankThreads pool(k, [&](int r, const std::string& why) {
    {
      std::lock_guard<std::mutex> lk(mu);
      aborted_by.push_back(r);
    }
    group.abort(r, why);
  });
  try {
    pool.run([&](int r) {
      if (r == 2) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the others block first
        throw Error("rank 2 broke on purpose");
      }
      if (r == 3) pool.align(r);  // blocked in the pool's barrier ...
      group.barrier(r);           // ... or in the group's
    });
    FAIL() << "run() did not rethrow";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 2 broke on purpose"), std::string::npos) << e.what();
  }
  ASSERT_FALSE(aborted_by.empty());
  EXPECT_EQ(aborted_by[0], 2);  // the cause aborted first; the others followed
  EXPECT_TRUE(group.aborted());
  EXPECT_THROW(pool.run([](int) {}), Error);  // a failed pool refuses further work
}

TEST(RankThreads, OnRanksRethrows) {
  EXPECT_THROW(on_ranks(3, [](int r) { DPB_CHECK(r != 1, "rank " << r); }), Error);
  std::atomic<int> n{0};
  on_ranks(3, [&](int) { ++n; });
  EXPECT_EQ(n.load(), 3);
}
