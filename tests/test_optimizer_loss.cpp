// test_optimizer_loss.cpp: the Adam and MSE Device ops on the CPU reference against results known
// exactly (Adam's first step moves each weight by lr * sign(g), up to eps; MSE on a hand-computed
// case), Adam against a double-precision loop over several steps, the optimizer and loss tables
// (state allocated as optimizer state, names refused with the valid ones), and training with them:
// LeNet with Adam on k = 2 and 3 equals k = 1 (relative L2 <= 1e-5, replicas bitwise in sync), the
// async backend equals the CPU's with Adam and MSE, --loss mse learns, and the MLP with Adam
// matches across k and reaches 0.80 test accuracy in 2 epochs (the check). Adam against
// PyTorch's torch.optim.Adam: AdamTorch.MatchesFixture, driven by tests/adam_torch_test.py (ctest
// adam_torch).
// The async and CUDA twins of the ops are checked against the CPU by the op table
// (kernels/conformance/op_table_more.cpp, tests/test_op_table.cpp).
// Run: ./build/dpb_tests --gtest_filter='Adam*:Mse*:OptimizerTable*:LossTable*:TrainAdam*'
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_device.h"
#include "src/core/check.h"
#include "src/core/device.h"
#include "src/data/dataset.h"
#include "src/train/loss.h"
#include "src/train/optimizer.h"
#include "src/train/step.h"
#include "src/train/trainer.h"
#include "tests/cpu_reference_test_util.h"
#include "tests/train_test_util.h"

namespace dpb {
namespace {

using namespace cpu_reference_test;  // Vec, rand_vec, Ctx (tests/cpu_reference_test_util.h)

TEST(AdamStepCpu, FirstStepMovesEachWeightByLrTimesSign) {
  // m1 = (1-b1) g, v1 = (1-b2) g^2: the bias-corrected ratio is g / (|g| + eps), so with |g| >=
  // 0.01 each weight moves by lr * sign(g) within lr * 1e-6; a zero gradient moves nothing.
  Ctx c(2);  // 2 threads: the OpenMP path
  const size_t n = 100000;  // above cpu::kParallelMin: the parallel loop
  Vec w0 = rand_vec(n, 1, -1.f, 1.f), g = rand_vec(n, 2, 0.01f, 3.f);
  for (size_t i = 0; i < n; i += 2) g[i] = -g[i];
  for (size_t i = 0; i < n; i += 101) g[i] = 0.f;
  Buffer w = c.up(w0), gb = c.up(g), m = c.up(Vec(n, 0.f)), v = c.up(Vec(n, 0.f));
  AdamStep s;
  s.lr = 0.01;
  s.t = 1;
  c.dev->adam_step(w.get(), gb.get(), m.get(), v.get(), n, s);
  const Vec w1 = c.down(w), m1 = c.down(m), v1 = c.down(v);
  int bad = 0;
  for (size_t i = 0; i < n && bad < 5; ++i) {
    const float sign = g[i] > 0 ? 1.f : g[i] < 0 ? -1.f : 0.f;
    const float want = w0[i] - 0.01f * sign;
    if (!(std::fabs(w1[i] - want) <= 2e-7f) || !(std::fabs(m1[i] - 0.1f * g[i]) <= 1e-7f) ||
        !(std::fabs(v1[i] - 0.001f * g[i] * g[i]) <= 1e-9f))
      ADD_FAILURE() << "[" << i << "] g " << g[i] << ": w " << w0[i] << " -> " << w1[i]
                    << " (want " << want << "), m " << m1[i] << ", v " << v1[i],
          ++bad;
    if (g[i] == 0.f) EXPECT_EQ(w1[i], w0[i]) << i;
  }
}

TEST(AdamStepCpu, MatchesDoublePrecisionLoopOverSteps) {
  Ctx c(2);  // 2 threads: the OpenMP path
  const size_t n = 4099;
  const Vec w0 = rand_vec(n, 3, -1.f, 1.f);
  Buffer w = c.up(w0), m = c.up(Vec(n, 0.f)), v = c.up(Vec(n, 0.f));
  std::vector<double> rw(w0.begin(), w0.end()), rm(n, 0.0), rv(n, 0.0);
  AdamStep s;  // optax's defaults, lr 1e-3
  for (long t = 1; t <= 8; ++t) {
    const Vec g = rand_vec(n, 10 + uint32_t(t), -1.f, 1.f);
    Buffer gb = c.up(g);
    s.t = t;
    c.dev->adam_step(w.get(), gb.get(), m.get(), v.get(), n, s);
    for (size_t i = 0; i < n; ++i) {
      rm[i] = 0.9 * rm[i] + 0.1 * g[i];
      rv[i] = 0.999 * rv[i] + 0.001 * double(g[i]) * g[i];
      const double mh = rm[i] / (1 - std::pow(0.9, t)), vh = rv[i] / (1 - std::pow(0.999, t));
      rw[i] -= 1e-3 * mh / (std::sqrt(vh) + 1e-8);
    }
  }
  const Vec got = c.down(w);
  double worst = 0;
  for (size_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(got[i] - rw[i]));
  EXPECT_LE(worst, 1e-6) << "max |w - double reference| after 8 steps";
}

TEST(AdamStepCpu, RefusesStepZero) {
  Ctx c(2);  // 2 threads: the OpenMP path
  Buffer w = c.up({1.f}), g = c.up({1.f}), m = c.up({0.f}), v = c.up({0.f});
  AdamStep s;
  s.t = 0;
  try {
    c.dev->adam_step(w.get(), g.get(), m.get(), v.get(), 1, s);
    FAIL() << "t = 0 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("step count t must be >= 1"), std::string::npos)
        << e.what();
  }
}

TEST(MseLossCpu, HandComputedCase) {
  // Row 0: pred (0.5, 1, 0, 0), label 1: diffs (0.5, 0, 0, 0), loss 0.0625, argmax 1 (correct).
  // Row 1: pred (1, 0.5, 0.5, 0), label 3: diffs (1, 0.5, 0.5, -1), loss 2.5 / 4 = 0.625, argmax
  // 0 (wrong). scale 0.5: stats += (0.5 * 0.6875, 1); dpred = 0.5 * 2 / 4 * diffs. All exact.
  Ctx c(2);  // 2 threads: the OpenMP path
  Buffer pred = c.up({0.5f, 1.f, 0.f, 0.f, 1.f, 0.5f, 0.5f, 0.f}), lab = c.up({1.f, 3.f});
  Buffer stats = c.up({1.f, 2.f}), dpred = c.up(Vec(8, 7.f));
  c.dev->mse_loss(2, 4, pred.get(), lab.get(), 0.5f, dpred.get(), stats.get());
  EXPECT_EQ(c.down(stats), (Vec{1.f + 0.34375f, 3.f}));
  EXPECT_EQ(c.down(dpred), (Vec{0.125f, 0.f, 0.f, 0.f, 0.25f, 0.125f, 0.125f, -0.25f}));
  // Evaluation: no gradient, scale 1; ties take the first maximum (row 1's argmax stays 0).
  c.dev->mse_loss(2, 4, pred.get(), lab.get(), 1.f, nullptr, stats.get());
  EXPECT_EQ(c.down(stats), (Vec{1.34375f + 0.6875f, 4.f}));
}

TEST(MseLossCpu, RefusesALabelThatIsNoClass) {
  Ctx c(2);  // 2 threads: the OpenMP path
  Buffer pred = c.up(Vec(8, 0.f)), lab = c.up({1.f, 4.f}), stats = c.up({0.f, 0.f});
  try {
    c.dev->mse_loss(2, 4, pred.get(), lab.get(), 1.f, nullptr, stats.get());
    FAIL() << "label 4 of 4 classes accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("label 4 of row 1"), std::string::npos) << e.what();
  }
}

TEST(OptimizerTable, EntriesStateAndErrors) {
  ASSERT_EQ(optimizers().size(), 2u);
  EXPECT_EQ(find_optimizer("sgd").state_floats, 0);
  EXPECT_EQ(find_optimizer("adam").state_floats, 2);
  for (const OptimizerEntry& e : optimizers()) {  // state as the entry says, as optimizer state
    Ctx c(2);  // 2 threads: the OpenMP path
    const size_t n = 1024;  // a multiple of the CPU backend's 64-byte allocation granule
    const size_t before = c.dev->memory().current().total();
    std::unique_ptr<Optimizer> opt = e.make(*c.dev, n);
    const MemoryUsage now = c.dev->memory().current();
    EXPECT_EQ(now[MemCategory::OptimizerState], size_t(e.state_floats) * n * sizeof(float)) << e.name;
    EXPECT_EQ(now.total() - before, size_t(e.state_floats) * n * sizeof(float)) << e.name;
  }
  try {
    find_optimizer("adamw");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--optimizer: unknown optimizer 'adamw' (valid: sgd, adam)"),
              std::string::npos) << e.what();
  }
}

TEST(OptimizerTable, AdamCountsItsSteps) {
  // The table's Adam equals adam_step with t = 1, 2, 3 on the same gradients.
  Ctx c(2);  // 2 threads: the OpenMP path
  const size_t n = 257;
  const Vec w0 = rand_vec(n, 21, -1.f, 1.f);
  Buffer wa = c.up(w0), wb = c.up(w0), m = c.up(Vec(n, 0.f)), v = c.up(Vec(n, 0.f));
  std::unique_ptr<Optimizer> opt = find_optimizer("adam").make(*c.dev, n);
  AdamStep s;
  s.lr = 0.05;
  for (long t = 1; t <= 3; ++t) {
    Buffer g = c.up(rand_vec(n, 30 + uint32_t(t), -1.f, 1.f));
    opt->step(wa.get(), g.get(), 0.05f);
    s.t = t;
    c.dev->adam_step(wb.get(), g.get(), m.get(), v.get(), n, s);
  }
  EXPECT_EQ(c.down(wa), c.down(wb));
}

TEST(LossTable, EntriesCallTheirOps) {
  ASSERT_EQ(losses().size(), 2u);
  Ctx c(2);  // 2 threads: the OpenMP path
  Buffer pred = c.up({0.5f, 1.f, 0.f, 0.f}), lab = c.up({1.f}), stats = c.up({0.f, 0.f});
  find_loss("mse").apply(*c.dev, 1, 4, pred.get(), lab.get(), 1.f, nullptr, stats.get());
  EXPECT_EQ(c.down(stats), (Vec{0.0625f, 1.f}));
  c.dev->fill(stats.get(), 0.f, 2);
  Buffer z = c.up({0.f, 0.f, 0.f, 0.f});  // uniform logits: loss ln 4
  find_loss("xent").apply(*c.dev, 1, 4, z.get(), lab.get(), 1.f, nullptr, stats.get());
  EXPECT_NEAR(c.down(stats)[0], std::log(4.0), 1e-6);
  try {
    find_loss("hinge");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--loss: unknown loss 'hinge' (valid: xent, mse)"),
              std::string::npos) << e.what();
  }
}

// Adam against torch.optim.Adam: tests/adam_torch_test.py writes the fixture (little-endian):
// "DPBADAM1", int32 n, int32 steps, float64 lr, float32 w0[n], then per step float32 g[n] and
// torch's parameters after the step w[n]. The table's Adam (adam_step on the CPU reference) takes
// the same gradients; after every step each weight is within 1e-6 of torch's.
TEST(AdamTorch, MatchesFixture) {
  const char* path = std::getenv("DPB_ADAM_TORCH_FIXTURE");
  if (!path)
    GTEST_SKIP() << "needs DPB_ADAM_TORCH_FIXTURE: run by tests/adam_torch_test.py (ctest -R "
                    "adam_torch), which writes it with PyTorch";
  std::ifstream f(path, std::ios::binary);
  ASSERT_TRUE(f) << "cannot open " << path;
  char magic[8];
  int32_t n = 0, steps = 0;
  double lr = 0;
  f.read(magic, 8);
  f.read(reinterpret_cast<char*>(&n), 4).read(reinterpret_cast<char*>(&steps), 4);
  f.read(reinterpret_cast<char*>(&lr), 8);
  ASSERT_TRUE(f && std::string(magic, 8) == "DPBADAM1" && n > 0 && steps > 0) << path;
  auto read_vec = [&f](int32_t count) {
    Vec v(size_t(count), 0.f);
    f.read(reinterpret_cast<char*>(v.data()), std::streamsize(v.size() * sizeof(float)));
    return v;
  };
  Ctx c(2);  // 2 threads: the OpenMP path
  Buffer w = c.up(read_vec(n)), g(*c.dev, size_t(n), MemCategory::Gradients, "gradients");
  std::unique_ptr<Optimizer> opt = find_optimizer("adam").make(*c.dev, size_t(n));
  double worst = 0;
  for (int t = 1; t <= steps; ++t) {
    const Vec grad = read_vec(n), want = read_vec(n);
    ASSERT_TRUE(f) << path << ": truncated at step " << t;
    c.dev->upload(g.get(), grad.data(), grad.size());
    opt->step(w.get(), g.get(), float(lr));
    const Vec got = c.down(w);
    double step_worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double e = std::fabs(double(got[i]) - want[i]);
      if (!(e <= step_worst)) step_worst = e, at = i;
    }
    EXPECT_LE(step_worst, 1e-6) << "step " << t << ": w[" << at << "] " << got[at] << ", torch "
                                << want[at] << " (g " << grad[at] << ")";
    worst = std::max(worst, step_worst);
  }
  std::printf("AdamTorch: %d parameters, %d steps at lr %g: max |dpbench - torch| = %.3g\n", n,
              steps, lr, worst);
}

// ---- training with them (Fashion-MNIST subsets; skipped without the data set) ----

bool have_data() { return std::filesystem::exists(resolve_data_dir("")); }

double rel_l2(const Vec& a, const Vec& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += double(a[i] - b[i]) * (a[i] - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

// LeNet, global batch 50, one epoch of 600 examples: 12 Adam steps at lr 1e-3.
TrainConfig adam_config(const std::string& backend, int k, SyncMode mode, bool overlap) {
  TrainConfig c = dpb_test::small_train_config(backend, k, "ring", mode, overlap);
  c.optimizer = "adam";
  c.lr = 1e-3;
  return c;
}

TEST(TrainAdam, DataParallelMatchesOneDevice) {
  if (!have_data()) GTEST_SKIP() << "Fashion-MNIST not installed at " << resolve_data_dir("");
  static const Dataset d = load_fashion_mnist(resolve_data_dir(""), 600, 200);
  const TrainResult ref = train(adam_config("cpu", 1, SyncMode::Fused, false), d);
  const TrainResult sgd = train(dpb_test::small_train_config("cpu", 1, "ring", SyncMode::Fused,
                                                             false), d);
  EXPECT_GT(rel_l2(ref.final_params, sgd.final_params), 1e-3) << "adam ran as sgd";
  struct Case { int k; SyncMode mode; bool overlap; };
  for (const Case& c : {Case{2, SyncMode::Fused, false}, Case{2, SyncMode::Bucketed, true},
                        Case{3, SyncMode::PerParam, true}}) {
    const TrainResult res = train(adam_config("cpu", c.k, c.mode, c.overlap), d);
    const std::string what = "k=" + std::to_string(c.k) + " " + to_string(c.mode);
    EXPECT_LE(rel_l2(res.final_params, ref.final_params), 1e-5) << what;
    ASSERT_EQ(res.epochs.size(), 1u);
    EXPECT_TRUE(res.epochs[0].replicas_in_sync) << what;
    EXPECT_NEAR(res.epochs[0].train_loss, ref.epochs[0].train_loss, 1e-4) << what;
  }
}

// The sharding notebook's model with Adam (a small one: 3 hidden layers of 64), k = 2 and 3
// against k = 1, with each loss.
TEST(TrainAdam, MlpDataParallelMatchesOneDevice) {
  if (!have_data()) GTEST_SKIP() << "Fashion-MNIST not installed at " << resolve_data_dir("");
  static const Dataset d = load_fashion_mnist(resolve_data_dir(""), 600, 200);
  for (const char* loss : {"mse", "xent"}) {
    TrainConfig c = adam_config("cpu", 1, SyncMode::Bucketed, true);
    c.model = "mlp";
    c.model_opts.mlp_layers = 3;
    c.model_opts.mlp_hidden = 64;
    c.model_opts.mlp_input = kPixels;
    c.loss = loss;
    const TrainResult ref = train(c, d);
    for (int k : {2, 3}) {
      c.devices = k;
      const TrainResult res = train(c, d);
      EXPECT_LE(rel_l2(res.final_params, ref.final_params), 1e-5) << loss << " k=" << k;
      EXPECT_TRUE(res.epochs[0].replicas_in_sync) << loss << " k=" << k;
    }
  }
}

// The check: an MLP with Adam (and the notebook's MSE loss) on Fashion-MNIST reaches test
// accuracy >= 0.80 in 2 epochs (here 2 hidden layers of 256 on 10,000 examples: about 0.84).
TEST(TrainAdam, MlpReaches80PercentInTwoEpochs) {
  if (!have_data()) GTEST_SKIP() << "Fashion-MNIST not installed at " << resolve_data_dir("");
  static const Dataset d = load_fashion_mnist(resolve_data_dir(""), 10000, 2000);
  TrainConfig c = adam_config("cpu", 2, SyncMode::Bucketed, true);
  c.model = "mlp";
  c.model_opts.mlp_layers = 2;
  c.model_opts.mlp_hidden = 256;
  c.model_opts.mlp_input = kPixels;
  c.loss = "mse";
  c.batch = 64;
  c.epochs = 2;
  c.threads = 0;
  const TrainResult res = train(c, d);
  ASSERT_EQ(res.epochs.size(), 2u);
  EXPECT_GE(res.epochs[1].test_acc, 0.80);
  EXPECT_LT(res.epochs[1].train_loss, res.epochs[0].train_loss);
}

TEST(TrainAdam, AsyncBackendMatchesCpuWithMse) {
  if (!have_data()) GTEST_SKIP() << "Fashion-MNIST not installed at " << resolve_data_dir("");
  static const Dataset d = load_fashion_mnist(resolve_data_dir(""), 190, 32);
  TrainConfig c = adam_config("async", 2, SyncMode::Bucketed, true);
  c.loss = "mse";
  TrainConfig cpu = c;
  cpu.backend = "cpu";
  const TrainResult want = train(cpu, d), got = train(c, d);
  ASSERT_EQ(got.final_params.size(), want.final_params.size());
  double worst = 0;
  for (size_t i = 0; i < got.final_params.size(); ++i)
    worst = std::max(worst, double(std::fabs(got.final_params[i] - want.final_params[i])));
  EXPECT_LE(worst, 1e-5) << "async vs cpu (NaN: a read not ordered after its write)";
  EXPECT_TRUE(got.epochs[0].replicas_in_sync);
  EXPECT_NEAR(got.epochs[0].train_loss, want.epochs[0].train_loss, 1e-6);
}

TEST(TrainAdam, MseLossLearns) {
  if (!have_data()) GTEST_SKIP() << "Fashion-MNIST not installed at " << resolve_data_dir("");
  static const Dataset d = load_fashion_mnist(resolve_data_dir(""), 2000, 500);
  TrainConfig c = adam_config("cpu", 2, SyncMode::Bucketed, true);
  c.loss = "mse";
  c.batch = 32;
  c.epochs = 2;
  c.threads = 0;
  const TrainResult res = train(c, d);
  ASSERT_EQ(res.epochs.size(), 2u);
  // At initialization the outputs are about 0: the loss is mean(onehot^2) = 0.1.
  EXPECT_LT(res.epochs[0].train_loss, 0.1);
  EXPECT_LT(res.epochs[1].train_loss, res.epochs[0].train_loss * 0.9) << "the loss falls";
  EXPECT_GT(res.epochs[1].test_acc, 0.5) << "chance is 0.1";
}

}  // namespace
}  // namespace dpb
