// synthetic.h: the sharding notebook's data (../shared/seeds/004): a batch of ones, so that speed
// and memory can be measured without a dataset (--data synthetic).
//
// Every feature is 1.0 (uint8 255; the device's loader scales by 1/255) and every label is class
// 1: the notebook's target is jnp.ones((batch, 10)), and with a class id per example the nearest
// deterministic choice is one fixed class. The example is stored once (Split::repeated), so a
// split of 60,000 examples of 10^7 features costs 10 MB of host memory, not 600 GB.
#pragma once
#include "src/data/dataset.h"

namespace dpb {

inline constexpr int kSyntheticLabel = 1;
// The example counts of limit 0 ("all"): Fashion-MNIST's, so a synthetic epoch has its steps.
inline constexpr int kSyntheticTrain = 60000, kSyntheticTest = 10000;

// n examples of rows x cols features (rows 28, cols 28 for the image models; rows 1, cols F for
// a flat input of F features). Throws dpb::Error naming a bad size.
Split synthetic_split(int n, int rows, int cols);
// Train and test splits of `features` features each (28x28 when that is 784, else 1 x features);
// train_limit / test_limit: the example counts, 0 for kSyntheticTrain / kSyntheticTest.
Dataset synthetic_dataset(int features, int train_limit = 0, int test_limit = 0);

}  // namespace dpb
