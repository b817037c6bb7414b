// run_data.h: the run's data from its options (--data, --data-dir, --train-limit, --test-limit,
// the model's input): one function for every front end (`dpbench train`, `fit`), over a table of
// data sources as the other extension points (src/core/registry.h):
//   fashion-mnist  the IDX files of the data directory (src/data/dataset.h): 28x28 = 784 features
//   synthetic      the sharding notebook's batch of ones (src/data/synthetic.h), sized to the
//                  model's input (--mlp-input for the MLP, 28x28 for LeNet and ResNet-18)
//
//   settle_data_features(cfg, cli.given("mlp-input"));   // after the run options are applied
//   Dataset data = load_run_data(cfg, data_dir, train_limit, test_limit);
//   std::string note = clamp_batch_to_data(cfg, data);  // --batch past the data: what runs
#pragma once
#include <string>
#include <vector>

#include "src/data/dataset.h"
#include "src/train/trainer.h"

namespace dpb {

struct DataSourceEntry {
  std::string name;  // --data value
  std::string help;  // one line for --help
  // Features per example the source fixes (the MLP's input follows it), or 0: the source takes
  // the model's input size.
  int features = 0;
  Dataset (*load)(const TrainConfig& cfg, const std::string& data_dir, int train_limit,
                  int test_limit);
};
const std::vector<DataSourceEntry>& data_sources();

// For a source with fixed features, sets cfg.model_opts.mlp_input to them; an --mlp-input given
// on the command line (mlp_input_given) with another value is an error naming both options.
void settle_data_features(TrainConfig& cfg, bool mlp_input_given);

// The run's Dataset (cfg.data names the source; throws dpb::Error naming --data otherwise).
// train_limit / test_limit: 0 for all (synthetic: Fashion-MNIST's 60,000 / 10,000).
Dataset load_run_data(const TrainConfig& cfg, const std::string& data_dir, int train_limit,
                      int test_limit);

// A global batch past the training examples runs one step of all of them per epoch either way;
// the batch is clamped to them, so that buffers are sized for what runs (--batch 16384 on 512
// examples took 3.6 GB instead of 0.34 GB) and the CSV's global_batch records it. Returns the
// note to print ("" when the batch fits). Every rank clamps alike: the data are the same.
std::string clamp_batch_to_data(TrainConfig& cfg, const Dataset& data);

}  // namespace dpb
