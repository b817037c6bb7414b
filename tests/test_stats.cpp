// test_stats.cpp: median_ci95 on inputs whose order statistics are known, and its coverage.
#include <gtest/gtest.h>

#include <random>

#include "src/core/check.h"
#include "src/core/stats.h"

namespace dpb {
namespace {

TEST(Stats, MedianCi95) {
  EXPECT_THROW(median_ci95({}), Error);
  MedianCi m = median_ci95({3, 1, 2});
  EXPECT_EQ(m.median, 2);
  EXPECT_EQ(m.lo, 1);
  EXPECT_EQ(m.hi, 3);
  m = median_ci95({4, 1, 3, 2});
  EXPECT_EQ(m.median, 2.5);
  std::vector<double> xs;
  for (int i = 100; i >= 1; --i) xs.push_back(i);  // 1..100, reversed: sorting is ours to do
  m = median_ci95(xs);
  EXPECT_EQ(m.median, 50.5);
  EXPECT_EQ(m.lo, 40);  // floor(50 - 9.8) = 40
  EXPECT_EQ(m.hi, 61);  // ceil(1 + 50 + 9.8) = 61 (the textbook interval for n = 100 is [40, 61])
}

TEST(Stats, MedianCi95CoversTheTrueMedian) {
  std::mt19937_64 rng(1);
  std::exponential_distribution<double> skewed(1.0);  // true median ln 2
  int covered = 0;
  const int trials = 2000;
  for (int t = 0; t < trials; ++t) {
    std::vector<double> xs(40);
    for (double& x : xs) x = skewed(rng);
    const MedianCi m = median_ci95(xs);
    covered += m.lo <= std::log(2.0) && std::log(2.0) <= m.hi;
  }
  EXPECT_GE(covered, int(0.93 * trials));  // nominal 95%, conservative by construction
  EXPECT_LE(covered, int(0.995 * trials));
}

}  // namespace
}  // namespace dpb
