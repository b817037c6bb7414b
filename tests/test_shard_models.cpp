// test_shard_models.cpp: the --shard layout and its memory and traffic models (src/train/shard.h;
// issue 22 items 3 and 4).
//   Layout: make_shard_layout's units are whole layers, the k ranks' chunks cover every unit once,
//     shard sizes differ by at most one per unit, forward_order is by first parameter.
//   Memory (item 4): per device and category, the peak equals shard_model_states exactly and
//     ZeRO's formula (zero_formula) within 5%, plus the measured rest; meta and CPU backends.
//   Bytes (item 4): one step sends, per rank, exactly the schedule's bytes (ShardedStep::traffic,
//     shard_unit_calls, schedule_sent_bytes), and ZeRO-3 sends 1.5x the replicated volume.
// Training with --shard (equivalence, order, failure): tests/test_shard.cpp.
//   ./dpb_tests --gtest_filter='ShardLayout.*:ShardMemoryModel.*:ShardBytes.*'
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "collectives/comm_volume.h"
#include "kernels/backends.h"
#include "src/core/check.h"
#include "src/data/dataset.h"
#include "src/data/synthetic.h"
#include "src/model/model.h"
#include "src/train/optimizer.h"
#include "src/train/shard.h"
#include "src/train/step.h"
#include "src/train/trainer.h"
#include "tests/rank_threads.h"
#include "tests/shard_test_util.h"
#include "tests/train_test_util.h"

namespace dpb {
namespace {

// ---- layout ----

void check_layout(const std::string& model, const ModelOptions& o, const GradSyncConfig& cfg, int k) {
  const std::vector<ParamInfo> params = model_param_layout(model, o);
  const std::vector<int> layer = param_layers(params);
  const int np = int(params.size());
  const std::string what = model + " " + to_string(cfg.mode) + " bucket " +
                           std::to_string(cfg.bucket_mb) + " MB, k=" + std::to_string(k);
  std::vector<ShardLayout> L;
  for (int r = 0; r < k; ++r) L.push_back(make_shard_layout(params, cfg, k, r));
  const ShardLayout& l0 = L[0];
  const int U = int(l0.units.size());
  ASSERT_GE(U, 1) << what;
  size_t total = 0, largest = 0;
  for (const ParamInfo& p : params) total += p.size;
  // Units: whole layers, consecutive, covering every parameter once; their offsets and counts.
  std::vector<int> seen(size_t(np), 0);
  for (int u = 0; u < U; ++u) {
    const Unit& unit = l0.units[u];
    ASSERT_LE(unit.first_param, unit.last_param) << what;
    EXPECT_TRUE(unit.first_param == 0 || layer[unit.first_param - 1] != layer[unit.first_param])
        << what << ": unit " << u << " starts inside a layer at parameter " << unit.first_param;
    EXPECT_TRUE(unit.last_param == np - 1 || layer[unit.last_param + 1] != layer[unit.last_param])
        << what << ": unit " << u << " ends inside a layer at parameter " << unit.last_param;
    EXPECT_EQ(unit.offset, params[unit.first_param].offset) << what;
    size_t count = 0;
    for (int p = unit.first_param; p <= unit.last_param; ++p) {
      ++seen[p];
      count += params[p].size;
      EXPECT_EQ(l0.unit_of_param[p], u) << what;
      EXPECT_EQ(l0.param_offset[p], params[p].offset) << what;
    }
    EXPECT_EQ(unit.count, count) << what << ": unit " << u;
    largest = std::max(largest, count);
  }
  for (int p = 0; p < np; ++p) EXPECT_EQ(seen[p], 1) << what << ": parameter " << p;
  EXPECT_EQ(l0.total, total) << what;
  EXPECT_EQ(l0.largest_unit, largest) << what;
  // forward_order: a permutation of the units, by first parameter.
  ASSERT_EQ(int(l0.forward_order.size()), U) << what;
  for (int j = 0; j < U; ++j) {
    EXPECT_EQ(std::count(l0.forward_order.begin(), l0.forward_order.end(), j), 1) << what;
    if (j > 0)
      EXPECT_LT(l0.units[l0.forward_order[j - 1]].first_param, l0.units[l0.forward_order[j]].first_param)
          << what;
  }
  // Chunks: the k ranks' chunks of a unit tile it in rank order; sizes within one; the compact
  // shard is the chunks one after the other.
  for (int r = 0; r < k; ++r) {
    const ShardLayout& l = L[r];
    EXPECT_EQ(l.k, k);
    EXPECT_EQ(l.rank, r);
    ASSERT_EQ(int(l.units.size()), U) << what << " rank " << r;
    size_t compact = 0;
    for (int u = 0; u < U; ++u) {
      EXPECT_EQ(l.units[u].offset, l0.units[u].offset) << what << " rank " << r;
      EXPECT_EQ(l.units[u].count, l0.units[u].count) << what << " rank " << r;
      EXPECT_EQ(l.compact[u], compact) << what << " rank " << r << " unit " << u;
      compact += l.own_size[u];
    }
    EXPECT_EQ(l.shard_floats, compact) << what << " rank " << r;
  }
  for (int u = 0; u < U; ++u) {
    size_t at = l0.units[u].offset, lo = SIZE_MAX, hi = 0;
    for (int r = 0; r < k; ++r) {
      EXPECT_EQ(L[r].own_begin[u], at) << what << ": unit " << u << " rank " << r;
      at += L[r].own_size[u];
      lo = std::min(lo, L[r].own_size[u]);
      hi = std::max(hi, L[r].own_size[u]);
    }
    EXPECT_EQ(at, l0.units[u].offset + l0.units[u].count) << what << ": unit " << u;
    EXPECT_LE(hi - lo, 1u) << what << ": unit " << u;
  }
}

TEST(ShardLayout, WholeLayersChunksCoverEveryUnitOnce) {
  struct M {
    const char* name;
    ModelOptions o;
  };
  const M models[] = {{"mlp", ModelOptions{3, 37, 29}}, {"lenet", ModelOptions{}},
                      {"resnet18", ModelOptions{}}};
  for (const M& m : models)
    for (SyncMode s : {SyncMode::PerParam, SyncMode::Fused, SyncMode::Bucketed})
      for (double mb : {0.005, 0.5})
        for (int k = 1; k <= 5; ++k) {
          GradSyncConfig cfg;
          cfg.mode = s;
          cfg.bucket_mb = mb;
          check_layout(m.name, m.o, cfg, k);
        }
  // The counts the tests below rely on: per-param has a unit per layer, fused one, and the
  // MLP's layers are uneven over 3 and 4 ranks.
  const auto mlp = model_param_layout("mlp", ModelOptions{3, 37, 29});
  GradSyncConfig per;
  per.mode = SyncMode::PerParam;
  const ShardLayout l = make_shard_layout(mlp, per, 4, 3);
  ASSERT_EQ(l.units.size(), 4u);
  EXPECT_EQ(l.total, 1110u + 1406u + 1406u + 380u);
  GradSyncConfig fused;
  fused.mode = SyncMode::Fused;
  EXPECT_EQ(make_shard_layout(mlp, fused, 3, 0).units.size(), 1u);
  EXPECT_THROW(make_shard_layout(mlp, per, 2, 2), Error);
}

// ---- memory: ZeRO's arithmetic (item 4) ----

TEST(ShardMemoryModel, FormulaIsZerosArithmetic) {
  const size_t P = 1000003;  // not divisible by k: shards rounded up
  for (int k : {1, 2, 4}) {
    const size_t K = size_t(k), up = (P + K - 1) / K;
    const ShardMemory none = zero_formula(ShardMode::None, P, k, 2),
                      z1 = zero_formula(ShardMode::Optimizer, P, k, 2),
                      z2 = zero_formula(ShardMode::Gradients, P, k, 2),
                      z3 = zero_formula(ShardMode::Parameters, P, k, 2);
    EXPECT_EQ(none.total(), 16 * P);
    EXPECT_EQ(z1.total(), 8 * P + (8 * P + K - 1) / K);
    EXPECT_EQ(z2.total(), 4 * P + (4 * P + K - 1) / K + (8 * P + K - 1) / K);
    EXPECT_EQ(z3.total(), (4 * P + K - 1) / K * 2 + (8 * P + K - 1) / K);
    EXPECT_LE(z3.total(), 16 * up);
    EXPECT_EQ(z2.parameters, 4 * P);
    EXPECT_EQ(z3.optimizer_state, (8 * P + K - 1) / K);
    EXPECT_EQ(zero_formula(ShardMode::Parameters, P, k, 0).optimizer_state, 0u);  // SGD
  }
  EXPECT_EQ(zero_formula(ShardMode::Optimizer, 8, 1, 2).total(), zero_formula(ShardMode::None, 8, 1, 2).total());
}

// 256 hidden layers of 32 on 32 inputs, per-param (a unit per layer: 1,056 floats): the two
// slots and two buckets are about 3% of P/4, so each category is within 5% of ZeRO's formula.
TrainConfig memory_config(const std::string& backend, int k, ShardMode m, const char* opt) {
  TrainConfig c = dpb_test::small_train_config(backend, k, "ring", SyncMode::PerParam, false, "mlp");
  c.model_opts = ModelOptions{256, 32, 32};
  c.optimizer = opt;
  c.lr = 1e-3;
  c.batch = 8;
  c.shard = m;
  c.data = "synthetic";
  return c;
}

// The CPU and meta devices round each buffer up to 64 bytes (kernels/cpu/cpu_device.cpp,
// kernels/meta/meta_device.cpp), and the ledger charges what they allocate.
constexpr size_t kDeviceGranule = 64;

void check_memory(const TrainConfig& c, const Dataset& data) {
  const TrainResult res = train(c, data);
  const int k = c.devices, s = find_optimizer(c.optimizer).state_floats;
  const std::vector<ParamInfo> params = model_param_layout(c.model, c.model_opts);
  size_t P = 0;
  for (const ParamInfo& p : params) P += p.size;
  const ShardMemory z = zero_formula(c.shard, P, k, s);
  ASSERT_EQ(int(res.peak_mem.size()), k);
  ASSERT_EQ(int(res.epochs.back().rank_peaks.size()), k);
  for (int r = 0; r < k; ++r) {
    const std::string what = describe(c) + " rank " + std::to_string(r);
    const MemoryUsage& got = res.peak_mem[size_t(r)];
    const ShardLayout layout = make_shard_layout(params, c.sync, k, r);
    const ShardMemory want = shard_model_states(c.shard, layout, s, kDeviceGranule);
    // The textbook bytes (granule 1) are the same buffers within a granule each.
    const ShardMemory exact = shard_model_states(c.shard, layout, s);
    EXPECT_LE(want.total() - exact.total(), 7 * kDeviceGranule) << what;
    EXPECT_EQ(got[MemCategory::Parameters], want.parameters) << what;
    EXPECT_EQ(got[MemCategory::Gradients], want.gradients) << what;
    EXPECT_EQ(got[MemCategory::OptimizerState], want.optimizer_state) << what;
    const MemoryUsage& epoch = res.epochs.back().rank_peaks[size_t(r)];
    EXPECT_EQ(epoch[MemCategory::Parameters], want.parameters) << what << " (rank_peaks)";
    EXPECT_EQ(epoch[MemCategory::OptimizerState], want.optimizer_state) << what << " (rank_peaks)";
    auto near = [&](size_t measured, size_t formula, const char* cat) {
      EXPECT_LE(std::fabs(double(measured) - double(formula)), 0.05 * double(formula))
          << what << ": " << cat << " " << measured << " B, ZeRO's formula " << formula << " B";
    };
    near(got[MemCategory::Parameters], z.parameters, "parameters");
    near(got[MemCategory::Gradients], z.gradients, "gradients");
    if (s > 0) near(got[MemCategory::OptimizerState], z.optimizer_state, "optimizer state");
    // The rest (activations, temporaries, data, workspace, comm scratch) as measured.
    size_t rest = 0;
    for (MemCategory cat : {MemCategory::Activations, MemCategory::Temporaries, MemCategory::Data,
                            MemCategory::Workspace, MemCategory::Comm})
      rest += got[cat];
    near(got.total(), z.total() + rest, "total");
    if (r == 0)
      std::printf("  %-8s %-10s k=%d: model states %8.3f MiB, ZeRO's %8.3f MiB, rest %.3f MiB\n",
                  c.backend.c_str(), to_string(c.shard).c_str(), k,
                  double(want.total()) / 1048576, double(z.total()) / 1048576, double(rest) / 1048576);
  }
}

TEST(ShardMemoryModel, PeakPerCategoryFollowsZeroMetaAndCpu) {
  const Dataset data = synthetic_dataset(32, 8, 8);  // one step
  for (const char* backend : {"meta", "cpu"})
    for (ShardMode m : kModes)
      for (int k : {1, 2, 4}) check_memory(memory_config(backend, k, m, "adam"), data);
  for (ShardMode m : kModes) check_memory(memory_config("cpu", 2, m, "sgd"), data);  // no state
}

// ---- bytes sent per step (item 4, comm_bytes) ----

struct StepBytes {
  std::vector<uint64_t> measured, schedule;  // per rank, bytes of one step
};

// A few training steps of the MLP (3 x 37 on 29) with `mode` over k CPU (or async) ranks and the
// ring; every step, each rank's bytes sent (CommGroup::sent_bytes) must rise by the schedule's
// count: schedule_sent_bytes over shard_step_calls. Returns the last step's.
StepBytes check_step_bytes(ShardMode mode, int k, SyncMode sm, bool overlap, int global_batch,
                           const char* backend = "cpu") {
  const std::string what = "--shard " + to_string(mode) + " k=" + std::to_string(k) + " " +
                           to_string(sm) + " overlap " + (overlap ? "on" : "off") + " batch " +
                           std::to_string(global_batch) + " " + backend;
  const ModelOptions o{3, 37, 29};
  GradSyncConfig sync;
  sync.mode = sm;
  sync.overlap = overlap;
  sync.bucket_mb = 0.005;
  RankSet ranks(make_devices(backend, k, 1), "ring");
  ranks.add_shard_collectives();
  adapt_barrier_spin(*ranks.group, sync);
  std::vector<Replica> reps;  // after ranks: destroyed first
  const int per = (global_batch + k - 1) / k;
  for (int r = 0; r < k; ++r)
    reps.push_back(make_replica(ranks[r], *ranks.group, "mlp", o, per, sync, *ranks.allreduce,
                                "adam", "xent", mode, ranks.reducescatter.get(),
                                ranks.allgather.get()));
  const std::vector<float> init = init_params(reps[0].model->params(), 7);
  for (Replica& rep : reps) load_params(rep, init);
  const Split data = random_split(global_batch, 29, 5);
  constexpr int kSteps = 3;
  std::vector<std::vector<uint64_t>> sent(size_t(k), std::vector<uint64_t>(kSteps + 1));
  on_ranks(
      k,
      [&](int r) {
        Replica& rep = reps[size_t(r)];
        broadcast_params(rep, *ranks.group);
        const int lo = int(chunk_begin(size_t(global_batch), k, r));
        const int n = int(chunk_size(size_t(global_batch), k, r));
        for (int s = 0; s < kSteps; ++s) {
          sent[size_t(r)][size_t(s)] = ranks.group->sent_bytes(r);
          if (n > 0) load_batch(rep, data.images.data() + size_t(lo) * 29, data.labels.data() + lo, n);
          train_step(rep, n, global_batch, 1e-3f);
        }
        rep.dev->synchronize();
        sent[size_t(r)][kSteps] = ranks.group->sent_bytes(r);
      },
      [&](int r, const std::string& why) { ranks.abort(r, why); });
  StepBytes out;
  const std::vector<size_t> sizes = reps[0].model->param_sizes();
  for (int r = 0; r < k; ++r) {
    const ShardLayout L = make_shard_layout(reps[0].model->params(), sync, k, r);
    const std::vector<ShardCall> calls = shard_step_calls(mode, L, sizes, sync);
    uint64_t want = 0;
    for (const ShardCall& c : calls) want += schedule_sent_bytes(c.op, "ring", c.floats, k, r);
    for (int s = 0; s < kSteps; ++s)
      EXPECT_EQ(sent[size_t(r)][size_t(s) + 1] - sent[size_t(r)][size_t(s)], want)
          << what << ": rank " << r << " step " << s + 1;
    out.measured.push_back(sent[size_t(r)][kSteps] - sent[size_t(r)][kSteps - 1]);
    out.schedule.push_back(want);
    // The calls agree with ShardedStep::traffic (reduce-scatters and all-gathers: calls and
    // floats; all-reduces: floats, in GradSync's units).
    if (mode == ShardMode::None) continue;
    const ShardTraffic t = ShardedStep::traffic(mode, L);
    ShardTraffic got;
    for (const ShardCall& c : calls) {
      if (c.op == Collective::AllReduce) got.allreduce_floats += c.floats;
      if (c.op == Collective::ReduceScatter) ++got.reducescatter_calls, got.reducescatter_floats += c.floats;
      if (c.op == Collective::AllGather) ++got.allgather_calls, got.allgather_floats += c.floats;
    }
    EXPECT_EQ(got.allreduce_floats, t.allreduce_floats) << what;
    EXPECT_EQ(got.reducescatter_calls, t.reducescatter_calls) << what;
    EXPECT_EQ(got.reducescatter_floats, t.reducescatter_floats) << what;
    EXPECT_EQ(got.allgather_calls, t.allgather_calls) << what;
    EXPECT_EQ(got.allgather_floats, t.allgather_floats) << what;
  }
  return out;
}

uint64_t sum(const std::vector<uint64_t>& v) {
  uint64_t s = 0;
  for (uint64_t x : v) s += x;
  return s;
}

// Every mode: measured == schedule per rank and step (units uneven over 3 and 4 ranks; a batch
// of 2 over 3 ranks leaves one without examples; overlap on and off; the async device).
TEST(ShardBytes, EveryStepSendsTheSchedulesBytes) {
  for (ShardMode m : kModes) {
    check_step_bytes(m, 2, SyncMode::PerParam, true, 50);
    check_step_bytes(m, 3, SyncMode::Bucketed, false, 2);
    check_step_bytes(m, 4, SyncMode::Fused, true, 50);
    check_step_bytes(m, 3, SyncMode::PerParam, true, 50, "async");
  }
}

// The volumes (ring, k = 4, a unit per layer). Summed over the ranks, a ring all-reduce of n
// floats sends 2(k-1)n, a reduce-scatter or all-gather (k-1)n, so per step:
//   none        2(k-1)P                 (each rank ~2(k-1)/k of the gradients)
//   optimizer   3(k-1)P = 1.5x none     (all-reduce, then all-gather: ZeRO-1 as issue 22 words it)
//   gradients   2(k-1)P = 1x none       (reduce-scatter + all-gather)
//   parameters  3(k-1)P - (k-1)(the last two units of forward, still gathered for backward)
//               = ZeRO-3's 1.5x, less what the two slots save.
TEST(ShardBytes, ZeroVolumesAgainstReplicated) {
  const int k = 4;
  const auto params = model_param_layout("mlp", ModelOptions{3, 37, 29});
  GradSyncConfig per;
  per.mode = SyncMode::PerParam;
  const ShardLayout L = make_shard_layout(params, per, k, 0);
  const uint64_t P = L.total, f = sizeof(float), K = uint64_t(k);
  std::map<ShardMode, StepBytes> b;
  for (ShardMode m : kModes) b[m] = check_step_bytes(m, k, SyncMode::PerParam, false, 50);
  const uint64_t none = sum(b[ShardMode::None].measured);
  EXPECT_EQ(none, 2 * (K - 1) * P * f);
  for (uint64_t x : b[ShardMode::None].measured)  // within a float per unit of 2(k-1)/k
    EXPECT_NEAR(double(x), 2.0 * (k - 1) / k * double(P * f), 2.0 * f * double(params.size()));
  EXPECT_EQ(sum(b[ShardMode::Optimizer].measured), 3 * none / 2);
  EXPECT_EQ(sum(b[ShardMode::Gradients].measured), none);
  const size_t F = L.forward_order.size();
  const uint64_t resident = L.units[L.forward_order[F - 1]].count + L.units[L.forward_order[F - 2]].count;
  const uint64_t z3 = sum(b[ShardMode::Parameters].measured);
  EXPECT_EQ(z3, 3 * (K - 1) * P * f - (K - 1) * resident * f);
  const double ratio = double(z3) / double(none);
  EXPECT_NEAR(ratio, 1.5 - double(resident) / (2.0 * double(P)), 1e-12);
  // The notebook's shape (many layers): ZeRO-3's 1.5x, within what two of 257 units save.
  const auto deep = model_param_layout("mlp", ModelOptions{256, 32, 32});
  std::vector<size_t> sizes;
  for (const ParamInfo& p : deep) sizes.push_back(p.size);
  uint64_t deep_none = 0, deep_z3 = 0;
  for (int r = 0; r < k; ++r) {
    const ShardLayout D = make_shard_layout(deep, per, k, r);
    for (const ShardCall& c : shard_step_calls(ShardMode::None, D, sizes, per))
      deep_none += schedule_sent_bytes(c.op, "ring", c.floats, k, r);
    for (const ShardCall& c : shard_step_calls(ShardMode::Parameters, D, sizes, per))
      deep_z3 += schedule_sent_bytes(c.op, "ring", c.floats, k, r);
  }
  EXPECT_GT(double(deep_z3) / double(deep_none), 1.49);
  EXPECT_LT(double(deep_z3) / double(deep_none), 1.5);
  std::printf("  ring k=%d, P=%llu: bytes per step over the ranks: none %llu; optimizer %.3fx, "
              "gradients %.3fx, parameters %.3fx (1.5x less the last two units: %llu floats)\n",
              k, (unsigned long long)P, (unsigned long long)none,
              double(sum(b[ShardMode::Optimizer].measured)) / double(none),
              double(sum(b[ShardMode::Gradients].measured)) / double(none), ratio,
              (unsigned long long)resident);
  std::printf("  256 x 32 MLP: parameters %.4fx none\n", double(deep_z3) / double(deep_none));
}

}  // namespace
}  // namespace dpb
