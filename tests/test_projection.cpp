// test_projection.cpp: the projection model (src/train/projection.h) on hand-made profiles whose
// timelines can be worked out on paper; the profile's JSON round trip and its errors; a measured
// profile has every parameter ready inside backward; the profiled step is the trainer's, through
// the optimizer and loss tables (Adam's update shows in optimizer_s); the sharded modes' timelines
// (--shard) against their arithmetic: compute plus every collective without overlap, ZeRO-1 as
// the replicated step plus its gathers, ZeRO-2's buckets and ZeRO-3's prefetch worked by hand.
// Run: ./dpb_tests --gtest_filter='Projection*'
#include <gtest/gtest.h>

#include "src/core/check.h"
#include "src/model/model.h"
#include "src/train/projection.h"
#include "src/train/shard.h"

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

// Issue 25: a profile's numbers are bounded, not cast: forward_s 1e308 gave epoch_s null, ready_s
// -5 was taken, batch 64.5 became 64. Each error names the file and the field.
TEST(Projection, ProfileNumbersAreBounded) {
  const nlohmann::json good = profile_to_json(fake_lenet());
  auto error_of = [](const nlohmann::json& j) -> std::string {
    try {
      profile_from_json(j, "p.json");
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(error_of(good), "");
  struct Case { const char* field; nlohmann::json value; const char* named; };
  const Case cases[] = {
      {"forward_s", 1e308, "\"forward_s\""},   {"backward_s", -1.0, "\"backward_s\""},
      {"data_s", 2e6, "\"data_s\""},          {"optimizer_s", "1", "\"optimizer_s\""},
      {"batch", 64.5, "\"batch\""},           {"batch", 0, "\"batch\""},
      {"batch", 1e308, "\"batch\""},          {"threads", 1000000, "\"threads\""},
      {"threads", -1, "\"threads\""},         {"ranks", 4294967297ull, "\"ranks\""},
      {"steps", -3, "\"steps\""},
  };
  for (const Case& c : cases) {
    nlohmann::json j = good;
    j[c.field] = c.value;
    const std::string e = error_of(j);
    EXPECT_EQ(e.rfind("p.json: profile field " + std::string(c.named), 0), 0u)
        << c.field << " = " << c.value.dump() << " -> " << e;
  }
  for (const char* key : {"ready_s", "fwd_at_s", "bwd_at_s"})
    for (const nlohmann::json& bad : {nlohmann::json(-5.0), nlohmann::json(1e308)}) {
      nlohmann::json j = good;
      j["params"][1][key] = bad;
      const std::string e = error_of(j);
      EXPECT_NE(e.find("p.json: profile field \"params\"[1]." + std::string(key)), std::string::npos)
          << key << " = " << bad.dump() << " -> " << e;
    }
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
// fake_lenet with the per-layer compute the sharded modes need: forward asks for layer l (conv1,
// conv2, fc1, fc2) at 0.25 l s, backward for it at 0.5 (3 - l) s; each layer's gradients are
// ready at the end of its backward (fake_lenet's ready times: 0.5 s per layer).
StepProfile fake_lenet_layers() {
  StepProfile p = fake_lenet();
  for (size_t i = 0; i < p.params.size(); ++i) {
    const int layer = int(i) / 2;  // weight and bias of each of the 4 layers
    p.params[i].fwd_at_s = 0.25 * layer;
    p.params[i].bwd_at_s = 0.5 * (3 - layer);
  }
  return p;
}

// A per-layer LeNet on 2 devices at the profile's batch, on a latency-only link: every
// reduce-scatter and all-gather of ring costs (k-1) L = L, whatever its size.
ProjectConfig sharded_cfg(ShardMode mode, bool overlap, double latency_s) {
  ProjectConfig cfg;
  cfg.devices = 2;
  cfg.batch = 200;
  cfg.train_examples = 200;  // one step
  cfg.sync.mode = SyncMode::PerParam;  // one unit per layer in the sharded modes
  cfg.sync.overlap = overlap;
  cfg.link = LinkSpec{0, latency_s * 1e6};
  cfg.shard = mode;
  return cfg;
}

// The update runs on rank 0's shard: its share of the parameters.
double shard_share(const ProjectConfig& cfg) {
  const ShardLayout L = make_shard_layout(model_param_layout("lenet", ModelOptions{}), cfg.sync,
                                          cfg.devices, 0);
  return double(L.shard_floats) / double(L.total);
}

// Overlap off: every collective inline, so the step is the compute (the update on the shard) plus
// the sum of the mode's collectives' link costs, and the calls are ShardedStep::traffic's.
TEST(Projection, ShardedWithoutOverlapAddsEveryCollective) {
  const StepProfile prof = fake_lenet_layers();
  const auto layout = model_param_layout("lenet", ModelOptions{});
  for (ShardMode mode : {ShardMode::Optimizer, ShardMode::Gradients, ShardMode::Parameters}) {
    ProjectConfig cfg = sharded_cfg(mode, false, 0);
    cfg.link = LinkSpec{0.008, 1000};  // 1 MB/s, 1 ms: sizes count
    const int k = cfg.devices;
    const ShardLayout L = make_shard_layout(layout, cfg.sync, k, 0);
    const ShardTraffic tr = ShardedStep::traffic(mode, L);
    // ring: reduce-scatter and all-gather (k-1) (L + n/(kG)) each; the all-reduce twice that.
    auto half = [&](size_t floats) { return (k - 1) * (1e-3 + double(floats) * 4 / k / 1e6); };
    double comm = 0;
    long calls = tr.reducescatter_calls + tr.allgather_calls;
    for (const Unit& u : L.units) {
      if (mode == ShardMode::Optimizer) comm += half(u.count);  // the all-gather after the update
      else comm += 2 * half(u.count);  // reduce-scatter + all-gather (forward's, or after update)
    }
    if (mode == ShardMode::Optimizer) {  // GradSync's all-reduce, per parameter
      for (const ParamTiming& q : prof.params) comm += 2 * half(q.floats);
      calls += long(prof.params.size());
    }
    if (mode == ShardMode::Parameters)  // backward gathers all but forward's last two units
      for (size_t j = 0; j + 2 < L.forward_order.size(); ++j)
        comm += half(L.units[L.forward_order[j]].count);
    const Projection p = project(prof, cfg);
    SCOPED_TRACE(to_string(mode));
    EXPECT_EQ(p.shard_units, 4);
    EXPECT_EQ(p.calls, calls);
    EXPECT_NEAR(p.comm_s, comm, 1e-9);
    EXPECT_NEAR(p.exposed_comm_s, comm, 1e-9);
    EXPECT_NEAR(p.step_s, 0.1 + 1 + 2 + 0.5 * shard_share(cfg) + comm, 1e-9);
    EXPECT_NEAR(p.compute_s, p.step_s - 0.1 - comm, 1e-9);
  }
}

// ZeRO-1 is the replicated step with the update on the shard and the all-gathers after it.
TEST(Projection, ZeroOneIsTheReplicatedStepPlusTheGathers) {
  const StepProfile prof = fake_lenet_layers();
  for (bool overlap : {false, true}) {
    ProjectConfig cfg = sharded_cfg(ShardMode::None, overlap, 0.1);
    const Projection none = project(prof, cfg);
    cfg.shard = ShardMode::Optimizer;
    const Projection zero1 = project(prof, cfg);
    EXPECT_NEAR(zero1.step_s, none.step_s - 0.5 + 0.5 * shard_share(cfg) + 4 * 0.1, 1e-9);
    EXPECT_NEAR(zero1.exposed_comm_s, none.exposed_comm_s + 4 * 0.1, 1e-9);
  }
}

// Overlap on, worked by hand on the timeline (forward: 4 layers of 0.25 s; backward: 4 of 0.5 s,
// each layer's gradients ready at its end; data 0.1 s).
TEST(Projection, ZeroTwoBackwardWaitsForItsGradientBuckets) {
  const StepProfile prof = fake_lenet_layers();
  const ProjectConfig cfg = sharded_cfg(ShardMode::Gradients, true, 0.8);
  // Backward from 1.1 s; reduce-scatters (0.8 s each, one queue) 1.6-2.4, 2.4-3.2, 3.2-4.0,
  // 4.0-4.8; the third layer waits for the first's bucket (2.1 -> 2.4), the fourth for the
  // second's (2.9 -> 3.2); backward's end waits for the last (3.7 -> 4.8); then the update and
  // four all-gathers, exposed (3.2 s).
  const Projection p = project(prof, cfg);
  EXPECT_NEAR(p.comm_s, 8 * 0.8, 1e-9);
  EXPECT_NEAR(p.exposed_comm_s, 0.3 + 0.3 + 1.1 + 3.2, 1e-9);
  EXPECT_NEAR(p.step_s, 4.8 + 0.5 * shard_share(cfg) + 3.2, 1e-9);
}

TEST(Projection, ZeroThreePrefetchesOneUnitAhead) {
  const StepProfile prof = fake_lenet_layers();
  const ProjectConfig cfg = sharded_cfg(ShardMode::Parameters, true, 0.4);
  // Forward from 0.1 s: gather 0 0.1-0.5 (waited), gather 1 0.5-0.9 submitted as layer 0 starts,
  // layer 0 0.5-0.75, waits 0.15 for each of gathers 1-3 (0.9-1.3, 1.3-1.7): forward ends 1.95.
  // Backward: fc2 1.95-2.45, its reduce-scatter 2.45-2.85; fc1 (resident) 2.45-2.95 with conv2's
  // gather submitted at its start (queued: 2.85-3.25), fc1's reduce-scatter 3.25-3.65; conv2
  // waits for its gather (2.95 -> 3.25), submits conv1's (3.65-4.05), runs to 3.75, its
  // reduce-scatter 4.05-4.45; conv1 waits (3.75 -> 4.05), runs to 4.55, reduce-scatter 4.55-4.95,
  // waited. 10 collectives.
  const Projection p = project(prof, cfg);
  EXPECT_EQ(p.calls, 10);
  EXPECT_NEAR(p.comm_s, 10 * 0.4, 1e-9);
  EXPECT_NEAR(p.exposed_comm_s, 0.4 + 3 * 0.15 + 0.3 + 0.3 + 0.4, 1e-9);
  EXPECT_NEAR(p.step_s, 4.95 + 0.5 * shard_share(cfg), 1e-9);
  // A fast link hides every gather but the first.
  EXPECT_NEAR(project(prof, sharded_cfg(ShardMode::Parameters, true, 0.01)).exposed_comm_s,
              0.01 + 0.01, 1e-9);  // forward's first gather, backward's last reduce-scatter
}

// An older profile (no fwd_at_s / bwd_at_s): backward's units from its gradient-ready times,
// forward split like backward; still compute + the collectives without overlap.
TEST(Projection, ShardedFromAnOlderProfile) {
  const StepProfile prof = fake_lenet();
  const ProjectConfig cfg = sharded_cfg(ShardMode::Parameters, false, 0.1);
  const Projection p = project(prof, cfg);
  EXPECT_NEAR(p.step_s, 0.1 + 1 + 2 + 0.5 * shard_share(cfg) + 10 * 0.1, 1e-9);
  EXPECT_NEAR(project(fake_lenet_layers(), sharded_cfg(ShardMode::Parameters, true, 0.4)).step_s,
              project(prof, sharded_cfg(ShardMode::Parameters, true, 0.4)).step_s, 1e-9);
  auto j = profile_to_json(fake_lenet_layers());
  EXPECT_DOUBLE_EQ(profile_from_json(j, "p.json").params[2].fwd_at_s, 0.25);
  j["params"][2]["bwd_at_s"] = -1;
  EXPECT_THROW(profile_from_json(j, "p.json"), Error);
}

TEST(Projection, ShardedNeedsTheCollectivesCostModels) {
  ProjectConfig cfg = sharded_cfg(ShardMode::Gradients, true, 0.1);
  cfg.allreduce = "auto";  // no reduce-scatter of that name
  try {
    project(fake_lenet_layers(), cfg);
    FAIL() << "--shard gradients with --allreduce auto was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--shard gradients: runs reduce-scatter"),
              std::string::npos) << e.what();
  }
  cfg.allreduce = "mpi";  // a library's collective: no link cost
  EXPECT_THROW(project(fake_lenet_layers(), cfg), Error);
}

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
  // When forward and backward first asked for each layer: in order, inside the phase.
  for (size_t i = 0; i < p.params.size(); ++i) {
    const auto& q = p.params[i];
    EXPECT_GE(q.fwd_at_s, 0.0) << q.name;  // forward uses every parameter
    EXPECT_LE(q.fwd_at_s, p.forward_s) << q.name;
    EXPECT_LE(q.bwd_at_s, p.backward_s) << q.name;
    if (i % 2 == 0) EXPECT_GE(q.bwd_at_s, 0.0) << q.name;  // every weight (biases need not be)
  }
  EXPECT_LE(p.params[0].fwd_at_s, p.params[6].fwd_at_s);  // conv1 before fc2
  EXPECT_GE(p.params[0].bwd_at_s, p.params[6].bwd_at_s);  // and after it in backward
}

}  // namespace
}  // namespace dpb
