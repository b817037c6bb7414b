// test_projection.cpp: the projection model (src/train/projection.h) on hand-made profiles whose
// timelines can be worked out on paper; the profile's JSON round trip and its errors; a measured
// profile has every parameter ready inside backward; the profiled step is the trainer's, through
// the optimizer and loss tables (Adam's update shows in optimizer_s).
// Run: ./dpb_tests --gtest_filter='Projection*'
#include <gtest/gtest.h>

#include "src/core/check.h"
#include "src/model/model.h"
#include "src/train/projection.h"

namespace dpb {
namespace {

// LeNet's real layout with made-up times: forward 1 s, backward 2 s, optimizer 0.5 s, data 0.1 s
// at 100 images; gradients become ready from the last parameter back, evenly over backward.
StepProfile fake_lenet() {
  StepProfile p;
  p.model = "lenet";
  p.backend = "cpu";
  p.threads = 1;
  p.batch = 100;
  p.data_s = 0.1;
  p.forward_s = 1.0;
  p.backward_s = 2.0;
  p.optimizer_s = 0.5;
  const auto layout = model_param_layout("lenet", ModelOptions{});
  const int n = int(layout.size());
  for (int i = 0; i < n; ++i)
    p.params.push_back({layout[i].name, layout[i].size, 2.0 * double(n - i) / n});
  return p;
}

size_t total_floats(const StepProfile& p) {
  size_t t = 0;
  for (const auto& q : p.params) t += q.floats;
  return t;
}

TEST(Projection, FusedWithoutOverlapExposesTheWholeAllReduce) {
  const StepProfile prof = fake_lenet();
  ProjectConfig cfg;
  cfg.devices = 2;
  cfg.batch = 200;  // 100 images per device: the profile's batch, no scaling
  cfg.train_examples = 1000;  // 5 full steps
  cfg.sync.mode = SyncMode::Fused;
  cfg.link = LinkSpec{0.008, 1000};  // 1 MB/s, 1 ms
  const double n = double(total_floats(prof)) * 4;
  const double c = 2 * (1e-3 + n / 2 / 1e6);
  const Projection p = project(prof, cfg);
  EXPECT_EQ(p.steps, 5);
  EXPECT_EQ(p.units, 1);
  EXPECT_NEAR(p.comm_s, 5 * c, 1e-9);
  EXPECT_NEAR(p.exposed_comm_s, 5 * c, 1e-9);
  EXPECT_NEAR(p.epoch_s, 5 * (0.1 + 1 + 2 + 0.5 + c), 1e-9);
  EXPECT_NEAR(p.compute_s, 5 * 3.5, 1e-9);
}

TEST(Projection, OverlapStartsEachUnitWhenItsLastGradientIsReady) {
  StepProfile prof = fake_lenet();
  ProjectConfig cfg;
  cfg.devices = 2;
  cfg.batch = 200;
  cfg.train_examples = 200;
  cfg.sync.mode = SyncMode::PerParam;
  cfg.sync.overlap = true;
  cfg.link = LinkSpec{0, 100000};  // latency only: every unit costs 2 x 0.1 s
  // Worked by hand: units in reverse order, unit u ready at 2(u+1)/n, each 0.2 s.
  const int n = int(prof.params.size());
  double end = 0;
  for (int u = 0; u < n; ++u) end = std::max(end, 2.0 * (u + 1) / n) + 0.2;
  const Projection p = project(prof, cfg);
  EXPECT_EQ(p.units, n);
  EXPECT_NEAR(p.comm_s, 0.2 * n, 1e-9);
  EXPECT_NEAR(p.exposed_comm_s, end - 2.0, 1e-9);
  cfg.sync.overlap = false;  // the same units after backward: all exposed
  EXPECT_NEAR(project(prof, cfg).exposed_comm_s, 0.2 * n, 1e-9);
}

TEST(Projection, ComputeScalesWithTheShardAndSharedCores) {
  const StepProfile prof = fake_lenet();
  ProjectConfig cfg;
  cfg.devices = 4;
  cfg.batch = 200;  // 50 images per device: half the profile's compute
  cfg.train_examples = 200;
  cfg.link = LinkSpec{0, 0};
  Projection p = project(prof, cfg);
  EXPECT_NEAR(p.epoch_s, 0.05 + 0.5 + 1.0 + 0.5, 1e-9);
  cfg.cores = 2;  // 4 ranks x 1 thread on 2 cores: compute takes twice as long
  p = project(prof, cfg);
  EXPECT_DOUBLE_EQ(p.compute_stretch, 2.0);
  EXPECT_NEAR(p.epoch_s, 2 * (0.05 + 0.5 + 1.0 + 0.5), 1e-9);
  StepProfile side = prof;  // measured with 4 ranks side by side: the sharing is in the times
  side.ranks = 4;
  EXPECT_DOUBLE_EQ(project(side, cfg).compute_stretch, 1.0);
  side.ranks = 2;  // 2 ranks of 1 thread fit 2 cores; 4 need twice the time
  EXPECT_DOUBLE_EQ(project(side, cfg).compute_stretch, 2.0);
  cfg.train_examples = 230;  // a last step of 30 images: 8 per device
  p = project(prof, cfg);
  EXPECT_EQ(p.steps, 2);
  EXPECT_NEAR(p.epoch_s, 2 * (2.05 + (0.1 + 1 + 2) * 0.08 + 0.5), 1e-9);
}

TEST(Projection, ProfileJsonRoundTripAndErrors) {
  const StepProfile prof = fake_lenet();
  const StepProfile back = profile_from_json(profile_to_json(prof), "test");
  EXPECT_EQ(back.model, "lenet");
  EXPECT_EQ(back.params.size(), prof.params.size());
  EXPECT_DOUBLE_EQ(back.params[3].ready_s, prof.params[3].ready_s);
  auto j = profile_to_json(prof);
  j["params"][2]["floats"] = 7;
  try {
    profile_from_json(j, "p.json");
    FAIL() << "a wrong parameter size was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("p.json: parameter 2"), std::string::npos) << e.what();
  }
  j = profile_to_json(prof);
  j.erase("forward_s");
  EXPECT_THROW(profile_from_json(j, "p.json"), Error);
  j = profile_to_json(prof);
  j["format"] = "something-else";
  EXPECT_THROW(profile_from_json(j, "p.json"), Error);
}

TEST(Projection, ProfileJsonRecordsOptimizerAndLoss) {
  StepProfile prof = fake_lenet();
  EXPECT_EQ(profile_from_json(profile_to_json(prof), "p.json").optimizer, "sgd");
  prof.optimizer = "adam";
  prof.loss = "mse";
  auto j = profile_to_json(prof);
  EXPECT_EQ(j["optimizer"], "adam");
  EXPECT_EQ(j["loss"], "mse");
  const StepProfile back = profile_from_json(j, "p.json");
  EXPECT_EQ(back.optimizer, "adam");
  EXPECT_EQ(back.loss, "mse");
  const auto out = projection_to_json(back, ProjectConfig{}, project(back, ProjectConfig{}));
  EXPECT_EQ(out["optimizer"], "adam");
  EXPECT_EQ(out["loss"], "mse");
  j.erase("optimizer");  // an older profile: measured with SGD and cross-entropy
  j.erase("loss");
  EXPECT_EQ(profile_from_json(j, "p.json").optimizer, "sgd");
  EXPECT_EQ(profile_from_json(j, "p.json").loss, "xent");
  j["optimizer"] = "lion";
  try {
    profile_from_json(j, "p.json");
    FAIL() << "an unknown optimizer was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("p.json: unknown optimizer 'lion'"), std::string::npos)
        << e.what();
  }
  j["optimizer"] = "adam";
  j["loss"] = "hinge";
  EXPECT_THROW(profile_from_json(j, "p.json"), Error);
}

// The profiled optimizer step is the table's: Adam (read w, g, m, v; write w, m, v; a square
// root and a division per parameter) takes clearly longer than SGD (read w, g; write w) on a
// model whose update is not lost in the timer's noise (~0.8 M parameters). Medians of 5 steps,
// three tries (the machine may be shared).
TEST(Projection, MeasuredProfileTimesTheTablesOptimizer) {
  ModelOptions mo;
  mo.mlp_layers = 4;
  mo.mlp_hidden = 512;
  mo.mlp_input = 64;
  double sgd = 0, adam = 0;
  for (int attempt = 0; attempt < 3; ++attempt) {
    const StepProfile s = measure_profile("mlp", mo, "sgd", "xent", "cpu", 1, 4, 5);
    const StepProfile a = measure_profile("mlp", mo, "adam", "mse", "cpu", 1, 4, 5);
    EXPECT_EQ(s.optimizer, "sgd");
    EXPECT_EQ(a.optimizer, "adam");
    EXPECT_EQ(a.loss, "mse");
    ASSERT_EQ(a.params.size(), model_param_layout("mlp", mo).size());
    sgd = s.optimizer_s;
    adam = a.optimizer_s;
    if (adam > 1.5 * sgd) break;
  }
  EXPECT_GT(adam, 1.5 * sgd) << "Adam's update (" << adam << " s) is not slower than SGD's ("
                             << sgd << " s): the profile did not run the optimizer table's entry";
  EXPECT_THROW(measure_profile("mlp", mo, "lion", "xent", "cpu", 1, 4, 1), Error);
  EXPECT_THROW(measure_profile("mlp", mo, "sgd", "hinge", "cpu", 1, 4, 1), Error);
}

TEST(Projection, MeasuredProfileHasEveryGradientInsideBackward) {
  const StepProfile p = measure_profile("lenet", ModelOptions{}, "sgd", "xent", "cpu", 1, 8, 1,
                                        /*ranks=*/2);
  EXPECT_EQ(p.ranks, 2);
  ASSERT_EQ(p.params.size(), model_param_layout("lenet", ModelOptions{}).size());
  for (const auto& q : p.params) {
    EXPECT_GE(q.ready_s, 0.0) << q.name;
    EXPECT_LE(q.ready_s, p.backward_s) << q.name;
  }
  EXPECT_GT(p.forward_s, 0.0);
  EXPECT_GE(p.params.front().ready_s, p.params.back().ready_s);  // backward runs in reverse
}

}  // namespace
}  // namespace dpb
