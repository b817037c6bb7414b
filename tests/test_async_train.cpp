// test_async_train.cpp: the trainer on the asynchronous test device (kernels/async) gives the CPU
// backend's parameters: LeNet for k = 1..4 in every gradient-sync mode, overlap on and off, and
// ResNet-18 for k = 2 on a few steps. Any missing ordering call in the training step (data
// loading, broadcast, GradSync, optimizer, end-of-epoch reads) makes the async run differ.
// Replay a failure with DPB_ASYNC_SEED=<seed> ./dpb_tests --gtest_filter='AsyncTrain*'.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "kernels/async/async_device.h"
#include "src/data/dataset.h"
#include "src/train/trainer.h"
#include "tests/train_test_util.h"

using namespace dpb;

namespace {

#define ASYNC_TRACE() \
  SCOPED_TRACE("replay with DPB_ASYNC_SEED=" + std::to_string(async_options_from_env().seed))

bool have_data() { return std::filesystem::exists(resolve_data_dir("")); }

const Dataset& data() {
  static Dataset d = load_fashion_mnist(resolve_data_dir(""), 190, 32);
  return d;
}

// 4 steps over the 190 examples of data(), the last one partial.
TrainConfig config(const std::string& backend, const std::string& model, int k,
                   const std::string& ar, SyncMode mode, bool overlap) {
  return dpb_test::small_train_config(backend, k, ar, mode, overlap, model);
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, double(std::fabs(a[i] - b[i])));
  return std::isnan(d) ? INFINITY : d;
}

void expect_same(const TrainConfig& c, const Dataset& d) {
  TrainConfig cpu = c;
  cpu.backend = "cpu";
  const TrainResult want = train(cpu, d);
  const TrainResult got = train(c, d);
  ASSERT_EQ(got.final_params.size(), want.final_params.size());
  ASSERT_EQ(got.epochs.size(), 1u);
  const std::string what = c.model + " k=" + std::to_string(c.devices) + " " + c.allreduce + " " +
                           to_string(c.sync.mode) + (c.sync.overlap ? " overlap" : "");
  bool finite = true;
  for (float v : got.final_params) finite = finite && std::isfinite(v);
  EXPECT_TRUE(finite) << what << ": NaN/inf parameters (a read not ordered after its write)";
  EXPECT_LE(max_abs_diff(got.final_params, want.final_params), 1e-5) << what;
  EXPECT_TRUE(got.epochs[0].replicas_in_sync) << what;
  EXPECT_NEAR(got.epochs[0].train_loss, want.epochs[0].train_loss, 1e-5) << what;
  EXPECT_NEAR(got.epochs[0].train_acc, want.epochs[0].train_acc, 1e-9) << what;
  EXPECT_NEAR(got.epochs[0].test_acc, want.epochs[0].test_acc, 1e-9) << what;
}

}  // namespace

TEST(AsyncTrain, LeNetMatchesCpuBackend) {
  if (!have_data()) GTEST_SKIP() << "Fashion-MNIST not installed at " << resolve_data_dir("");
  ASYNC_TRACE();
  struct Case { int k; const char* ar; SyncMode mode; bool overlap; };
  const Case cases[] = {
      {1, "ring", SyncMode::Fused, false},     {2, "naive", SyncMode::PerParam, false},
      {2, "ring", SyncMode::Bucketed, true},   {3, "ring", SyncMode::PerParam, true},
      {3, "naive", SyncMode::Fused, true},     {4, "ring", SyncMode::Fused, false},
      {4, "naive", SyncMode::Bucketed, true},
  };
  for (const Case& c : cases)
    expect_same(config("async", "lenet", c.k, c.ar, c.mode, c.overlap), data());
}

TEST(AsyncTrain, ResNet18TwoRanksFewSteps) {
  if (!have_data()) GTEST_SKIP() << "Fashion-MNIST not installed at " << resolve_data_dir("");
  ASYNC_TRACE();
  static Dataset d = load_fashion_mnist(resolve_data_dir(""), 8, 4);
  TrainConfig c = config("async", "resnet18", 2, "ring", SyncMode::Bucketed, true);
  c.batch = 4;  // 2 steps of 2 examples per rank
  c.sync.bucket_mb = 5;
  expect_same(c, d);
}
