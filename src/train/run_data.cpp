// run_data.cpp: the data-source table and the run's Dataset (see run_data.h).
#include "src/train/run_data.h"

#include "src/core/check.h"
#include "src/core/registry.h"
#include "src/data/synthetic.h"
#include "src/model/model.h"

namespace dpb {

const std::vector<DataSourceEntry>& data_sources() {
  static const std::vector<DataSourceEntry> table = {
      {"fashion-mnist",
       "Fashion-MNIST from --data-dir (60,000 train / 10,000 test images of 28x28 pixels)", 28 * 28,
       [](const TrainConfig&, const std::string& dir, int train_limit, int test_limit) {
         return load_fashion_mnist(resolve_data_dir(dir), train_limit, test_limit);
       }},
      {"synthetic",
       "the sharding notebook's batch of ones: every feature 1.0, every label class 1; features: "
       "the model's input (--mlp-input for mlp, 28x28 otherwise); 60,000 / 10,000 examples unless "
       "--train-limit / --test-limit",
       0,
       [](const TrainConfig& cfg, const std::string&, int train_limit, int test_limit) {
         return synthetic_dataset(model_input_size(cfg.model, cfg.model_opts), train_limit,
                                  test_limit);
       }},
  };
  return table;
}

void settle_data_features(TrainConfig& cfg, bool mlp_input_given) {
  const DataSourceEntry& src = lookup_entry(data_sources(), cfg.data, "--data", "data source");
  if (src.features == 0) return;
  DPB_CHECK(!mlp_input_given || cfg.model_opts.mlp_input == src.features,
            "--mlp-input " << cfg.model_opts.mlp_input << ": --data " << src.name << " has "
                           << src.features
                           << " features per example, the MLP's input; --mlp-input sizes "
                              "--data synthetic only");
  cfg.model_opts.mlp_input = src.features;
}

Dataset load_run_data(const TrainConfig& cfg, const std::string& data_dir, int train_limit,
                      int test_limit) {
  const DataSourceEntry& src = lookup_entry(data_sources(), cfg.data, "--data", "data source");
  return src.load(cfg, data_dir, train_limit, test_limit);
}

std::string clamp_batch_to_data(TrainConfig& cfg, const Dataset& data) {
  if (data.train.n <= 0 || cfg.batch <= data.train.n) return "";
  const std::string note = "--batch " + std::to_string(cfg.batch) + " is more than the " +
                           std::to_string(data.train.n) + " training examples: global batch " +
                           std::to_string(data.train.n) + " (one step per epoch, as asked; the "
                           "CSV's global_batch says " + std::to_string(data.train.n) + ")";
  cfg.batch = data.train.n;
  return note;
}

}  // namespace dpb
