// synthetic.cpp: the notebook's batch of ones as a Dataset (see synthetic.h).
#include "src/data/synthetic.h"

#include "src/core/check.h"

namespace dpb {

Split synthetic_split(int n, int rows, int cols) {
  DPB_CHECK(n >= 1, "synthetic data: the example count must be >= 1, got " << n);
  DPB_CHECK(rows >= 1 && cols >= 1, "synthetic data: features " << rows << " x " << cols
                                                                << " must be >= 1 each");
  Split s;
  s.n = n;
  s.rows = rows;
  s.cols = cols;
  s.repeated = true;
  s.images.assign(size_t(rows) * size_t(cols), uint8_t(255));  // 1.0 once loaded
  s.labels.assign(size_t(n), uint8_t(kSyntheticLabel));
  return s;
}

Dataset synthetic_dataset(int features, int train_limit, int test_limit) {
  DPB_CHECK(train_limit >= 0, "synthetic data: train_limit " << train_limit << " is negative");
  DPB_CHECK(test_limit >= 0, "synthetic data: test_limit " << test_limit << " is negative");
  const bool image = features == 28 * 28;
  const int rows = image ? 28 : 1, cols = image ? 28 : features;
  Dataset d;
  d.dir = "synthetic";
  d.train = synthetic_split(train_limit > 0 ? train_limit : kSyntheticTrain, rows, cols);
  d.test = synthetic_split(test_limit > 0 ? test_limit : kSyntheticTest, rows, cols);
  return d;
}

}  // namespace dpb
