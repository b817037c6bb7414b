// test_cpu_load.cpp: the load facts every result records (src/core/cpu_info.h: /proc parsers,
// the busy verdict) and the rank threads' placement (rank_cpu_slice, RankThreads::cpus).
// Run: ./dpb_tests --gtest_filter='CpuLoad*:RankPlacement*'
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <sstream>

#include "src/core/check.h"
#include "src/core/cpu_info.h"
#include "src/core/rank_threads.h"

using namespace dpb;

TEST(CpuLoad, ParsesProcTexts) {
  std::istringstream la("3.50 2.10 1.00 5/120 4242\n");
  double l = -1;
  EXPECT_TRUE(parse_loadavg(la, l));
  EXPECT_DOUBLE_EQ(l, 3.5);
  std::istringstream stat("cpu  100 0 50 800 10 0 0 40 7 0\ncpu0 50 0 25 400 5 0 0 20 0 0\n");
  int64_t steal = -1, total = -1;
  EXPECT_TRUE(parse_stat_cpu(stat, steal, total));
  EXPECT_EQ(steal, 40);
  EXPECT_EQ(total, 1000);  // guest (7) is inside user already
  std::istringstream old_kernel("cpu  100 0 50 800\n");
  EXPECT_FALSE(parse_stat_cpu(old_kernel, steal, total));
  std::istringstream psi("some avg10=1.00 avg60=0.50 avg300=0.10 total=123456\nfull avg10=0 total=0\n");
  double us = -1;
  EXPECT_TRUE(parse_pressure_some(psi, us));
  EXPECT_DOUBLE_EQ(us, 123456);
  EXPECT_EQ(parse_task_state("42 (a) b) (c) R 1 2 3"), 'R');  // a command name with ") "
  EXPECT_EQ(parse_task_state("42 (sleep) S 1"), 'S');
  EXPECT_EQ(parse_task_state("garbage"), '?');
}

TEST(CpuLoad, BusyVerdictNamesItsReason) {
  CpuSample a, b;
  b.t = a.t + std::chrono::seconds(1);
  a.load1 = 0.5, b.load1 = 1.0;
  a.steal = 0, a.total = 1000, b.steal = 10, b.total = 2000;  // 1% steal
  a.pressure_us = 0, b.pressure_us = 250000;                 // 25% of the wall
  a.others_runnable = 0, b.others_runnable = 0;
  CpuLoad l = cpu_load_between(a, b);
  EXPECT_DOUBLE_EQ(l.steal_pct, 1.0);
  EXPECT_NEAR(l.pressure_pct, 25.0, 1e-9);
  EXPECT_GE(l.cpus, 1);
  EXPECT_FALSE(l.busy()) << l.why_busy();
  b.steal = 50;  // 5%
  EXPECT_NE(cpu_load_between(a, b).why_busy().find("steal 5%"), std::string::npos);
  b.steal = 10, b.others_runnable = 2;
  EXPECT_NE(cpu_load_between(a, b).why_busy().find("2 runnable task(s)"), std::string::npos);
  b.others_runnable = 0, a.load1 = l.cpus + 1.5;
  EXPECT_NE(cpu_load_between(a, b).why_busy().find("load "), std::string::npos);
  CpuSample unknown;  // no /proc: nothing invented
  const CpuLoad u = cpu_load_between(unknown, unknown);
  EXPECT_LT(u.steal_pct, 0);
  EXPECT_LT(u.others_runnable, 0);
  EXPECT_FALSE(u.busy());
}

TEST(CpuLoad, SamplesThisMachine) {
  const CpuSample s = sample_cpu();
  EXPECT_GE(s.load1, 0);  // Linux always has /proc/loadavg and /proc/stat
  EXPECT_GT(s.total, 0);
  EXPECT_GE(s.others_runnable, 0);
}

TEST(RankPlacement, SlicesAreDisjointAndCoverTheCpus) {
  const std::vector<int> cpus = {0, 1, 2, 3, 4};
  std::set<int> seen;
  for (int r = 0; r < 2; ++r)
    for (int c : rank_cpu_slice(cpus, 2, r)) EXPECT_TRUE(seen.insert(c).second);
  EXPECT_EQ(seen.size(), 5u);
  EXPECT_EQ(rank_cpu_slice(cpus, 2, 0), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(rank_cpu_slice(cpus, 2, 1), (std::vector<int>{3, 4}));
  // More ranks than CPUs: one CPU each, in blocks (the same placement every run).
  const std::vector<int> two = {4, 7};
  std::vector<int> placed;
  for (int r = 0; r < 4; ++r) placed.push_back(rank_cpu_slice(two, 4, r).at(0));
  EXPECT_EQ(placed, (std::vector<int>{4, 4, 7, 7}));
  placed.clear();
  for (int r = 0; r < 7; ++r) placed.push_back(rank_cpu_slice(cpus, 7, r).at(0));
  EXPECT_EQ(placed, (std::vector<int>{0, 0, 1, 2, 2, 3, 4}));
  EXPECT_TRUE(rank_cpu_slice({}, 2, 0).empty());  // no CPU known: not pinned
  EXPECT_TRUE(rank_cpu_slice(cpus, 1, 0).empty());  // one rank: the whole mask
  EXPECT_TRUE(rank_cpu_slice(cpus, 2, 0, /*pin=*/false).empty());
}

TEST(RankPlacement, PoolRecordsEachRanksCpu) {
  const std::vector<int> allowed = allowed_cpus();
  ASSERT_FALSE(allowed.empty());
  const int k = int(allowed.size()) >= 2 ? 2 : 1;
  setenv("DPB_PIN", "1", 1);  // bound whatever else runs on this machine
  RankThreads pool(k);
  unsetenv("DPB_PIN");
  EXPECT_EQ(pool.cpus(), std::vector<int>(size_t(k), -1));  // before any run
  pool.run([](int) {});
  const std::vector<int> cpus = pool.cpus();
  for (int r = 0; r < k; ++r) {
    EXPECT_GE(cpus[r], 0);
    if (k == 2) {  // bound: rank r runs inside its slice
      const std::vector<int> slice = rank_cpu_slice(allowed, k, r);
      EXPECT_NE(std::find(slice.begin(), slice.end(), cpus[r]), slice.end()) << "rank " << r;
      EXPECT_FALSE(pool.placement()[r].empty());
    }
  }
}

TEST(RankPlacement, DpbPinEnvironment) {
  setenv("DPB_PIN", "0", 1);
  EXPECT_EQ(pin_mode_from_env(), PinMode::Never);
  EXPECT_FALSE(pin_ranks(PinMode::Never, 2, {0, 1}));
  setenv("DPB_PIN", "1", 1);
  EXPECT_EQ(pin_mode_from_env(), PinMode::Always);
  EXPECT_TRUE(pin_ranks(PinMode::Always, 2, {0, 1}));
  EXPECT_TRUE(pin_ranks(PinMode::Always, 3, {0, 1}));  // more ranks than CPUs: in blocks
  EXPECT_FALSE(pin_ranks(PinMode::Always, 2, {}));
  EXPECT_FALSE(pin_ranks(PinMode::Always, 1, {0, 1}));
  setenv("DPB_PIN", "yes", 1);
  EXPECT_THROW(pin_mode_from_env(), Error);
  unsetenv("DPB_PIN");
  EXPECT_EQ(pin_mode_from_env(), PinMode::Auto);
}
