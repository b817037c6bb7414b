// stats.cpp: see stats.h; tested by tests/test_stats.cpp.
#include "src/core/stats.h"

#include <algorithm>
#include <cmath>

#include "src/core/check.h"

namespace dpb {

MedianCi median_ci95(std::vector<double> xs) {
  DPB_CHECK(!xs.empty(), "median_ci95: no samples");
  std::sort(xs.begin(), xs.end());
  const size_t n = xs.size();
  MedianCi m;
  m.median = n % 2 ? xs[n / 2] : 0.5 * (xs[n / 2 - 1] + xs[n / 2]);
  if (n < 6) {
    m.lo = xs.front();
    m.hi = xs.back();
    return m;
  }
  const double half = 0.98 * std::sqrt(double(n));
  const double j = std::floor(double(n) / 2 - half), k = std::ceil(1 + double(n) / 2 + half);
  m.lo = xs[size_t(std::clamp(j, 1.0, double(n))) - 1];
  m.hi = xs[size_t(std::clamp(k, 1.0, double(n))) - 1];
  return m;
}

}  // namespace dpb
