// stats.h: the small statistics dpbench reports from repeated timings.
#pragma once
#include <vector>

namespace dpb {

struct MedianCi {
  double median = 0, lo = 0, hi = 0;
};

// Median of xs and its distribution-free 95% confidence interval: the order statistics
// x(j) and x(k) (1-based, sorted) with j = floor(n/2 - 0.98 sqrt(n)), k = ceil(1 + n/2 +
// 0.98 sqrt(n)), the normal approximation to the binomial(n, 1/2) count of samples below the
// median (Conover, Practical Nonparametric Statistics). Below 6 samples [min, max] (whose exact
// coverage 1 - 2^(1-n) is then under 95%). Throws dpb::Error on an empty input.
MedianCi median_ci95(std::vector<double> xs);

}  // namespace dpb
