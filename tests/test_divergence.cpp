// test_divergence.cpp: a run that diverges ends as a result, not in silence (issue 25 item 3;
// src/train/divergence.h). LeNet at lr 1e8 (its loss is NaN within the first epoch) makes train()
// throw Diverged naming the epoch, step and rank after on_epoch has seen the epoch marked; with
// allow_divergence the run stops after that epoch and returns it marked (the CSV's diverged column
// says 1). NaN logits on rank 1 name rank 1 and that step; a parameter made NaN at the epoch's
// last update (what a non-finite gradient leaves, the loss still finite) is found too.
// Run: dpb_tests --gtest_filter='Divergence*'
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "kernels/backends.h"
#include "src/core/forwarding_device.h"
#include "src/data/dataset.h"
#include "src/train/divergence.h"
#include "src/train/train_csv.h"
#include "src/train/trainer.h"
#include "tests/train_test_util.h"

using namespace dpb;

namespace {

const Dataset& data() {
  static Dataset d = load_fashion_mnist(resolve_data_dir(""), 600, 200);
  return d;
}
bool have_data() { return std::filesystem::exists(resolve_data_dir("")); }
bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// 12 steps over the 600 examples of data(), k ranks as threads, 3 epochs. Seed 0: at lr 1e8 the
// loss is NaN within the first epoch (at lr 1e6 with some seeds the ReLUs die first: a huge but
// finite loss, which is no divergence here).
TrainConfig small(int k, double lr) {
  TrainConfig c = dpb_test::small_train_config("cpu", k, "ring", SyncMode::Fused, false);
  c.lr = lr;
  c.epochs = 3;
  c.seed = 0;
  return c;
}

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Its rank's logits become NaN from the given loss on (0-based: the training step, on a rank that
// does not evaluate): a NaN loss, and NaN gradients the all-reduce spreads. (NaN images would not
// do: the ReLUs map NaN to 0, the loss stays finite, only the parameters go NaN.)
class PoisonsLogits final : public ForwardingDevice {
 public:
  PoisonsLogits(std::unique_ptr<Device> d, int from) : ForwardingDevice(std::move(d)), from_(from) {}
  void softmax_xent(int n, int classes, const float* logits, const float* labels, float scale,
                    float* dlogits, float* stats) override {
    if (calls_++ >= from_) fill(const_cast<float*>(logits), kNaN, size_t(n) * size_t(classes));
    ForwardingDevice::softmax_xent(n, classes, logits, labels, scale, dlogits, stats);
  }

 private:
  int from_, calls_ = 0;
};

// Its n-th SGD update (1-based; fused gradient sync: one per step) leaves a NaN parameter, as a
// non-finite gradient would; the loss of that step was computed before it.
class PoisonsUpdate final : public ForwardingDevice {
 public:
  PoisonsUpdate(std::unique_ptr<Device> d, int nth) : ForwardingDevice(std::move(d)), nth_(nth) {}
  void sgd_step(float* w, const float* g, float lr, size_t n) override {
    ForwardingDevice::sgd_step(w, g, lr, n);
    if (++steps_ == nth_) fill(w + n / 2, kNaN, 1);
  }

 private:
  int nth_, steps_ = 0;
};

template <class Wrapper>
DeviceFactory on_rank1(int arg) {
  return [arg](int r, int threads) -> std::unique_ptr<Device> {
    auto d = make_device("cpu", r, DeviceOptions{threads});
    if (r == 1) return std::make_unique<Wrapper>(std::move(d), arg);
    return d;
  };
}

}  // namespace

TEST(Divergence, LargeLearningRateStopsNamingEpochStepAndRank) {
  if (!have_data()) GTEST_SKIP() << "Fashion-MNIST not installed";
  int calls = 0;
  bool marked = false;
  try {
    train(small(2, 1e8), data(), [&](const EpochStats& s, const TrainResult&) {
      ++calls;
      marked = s.diverged;
    });
    FAIL() << "train() did not throw";
  } catch (const Diverged& e) {
    const std::string m = e.what();
    EXPECT_TRUE(has(m, "training diverged in epoch 1 at step ")) << m;
    EXPECT_TRUE(has(m, "/12 (rank ")) << m;
    EXPECT_TRUE(has(m, "--allow-divergence")) << m;
  }
  EXPECT_EQ(calls, 1) << "training stops after the epoch that diverged";
  EXPECT_TRUE(marked) << "on_epoch (the CSV row) sees it marked";
}

TEST(Divergence, AllowedIsAMarkedResult) {
  if (!have_data()) GTEST_SKIP() << "Fashion-MNIST not installed";
  TrainConfig c = small(2, 1e8);
  c.allow_divergence = true;
  const TrainResult res = train(c, data());
  ASSERT_EQ(res.epochs.size(), 1u) << "stopped after the diverged epoch, not trained on NaNs";
  const EpochStats& e = res.epochs[0];
  EXPECT_TRUE(e.diverged);
  EXPECT_FALSE(std::isfinite(e.train_loss));
  EXPECT_GE(e.diverged_step, 0);
  EXPECT_LT(e.diverged_step, 12);
  EXPECT_GE(e.diverged_rank, 0);
  // The CSV's diverged column says so; a finite run says 0.
  const auto& cols = train_csv_columns();
  size_t col = cols.size();
  for (size_t i = 0; i < cols.size(); ++i)
    if (std::string(cols[i].name) == "diverged") col = i;
  ASSERT_LT(col, cols.size()) << "no diverged column";
  const TrainCsvRun run{c, data().train.n, data().test.n, true, false, res.allreduce_resolved};
  auto cell = [&](const std::string& row) {  // cell `col` of a CSV row (quoted cells hold commas)
    std::vector<std::string> cells(1);
    bool quoted = false;
    for (char ch : row) {
      if (ch == '"') quoted = !quoted;
      else if (ch == ',' && !quoted) cells.emplace_back();
      else cells.back() += ch;
    }
    return col < cells.size() ? cells[col] : std::string("<no cell>");
  };
  const std::string row = train_csv_row(run, e);
  EXPECT_EQ(cell(row), "1") << row;
  TrainConfig fine = small(2, 0.2);
  fine.epochs = 1;
  const TrainResult ok = train(fine, data());
  EXPECT_FALSE(ok.epochs.at(0).diverged);
  const std::string ok_row = train_csv_row(run, ok.epochs[0]);
  EXPECT_EQ(cell(ok_row), "0") << ok_row;
}

TEST(Divergence, NamesTheRankAndStepWhereTheLossWentFirst) {
  if (!have_data()) GTEST_SKIP() << "Fashion-MNIST not installed";
  TrainConfig c = small(2, 0.2);
  c.allow_divergence = true;
  // Rank 1's logits are NaN from step 4 (0-based): its loss then; rank 0's only from step 5,
  // after the all-reduce spread the NaN gradients.
  const TrainResult res = train(c, data(), {}, on_rank1<PoisonsLogits>(4));
  ASSERT_EQ(res.epochs.size(), 1u);
  EXPECT_TRUE(res.epochs[0].diverged);
  EXPECT_EQ(res.epochs[0].diverged_step, 4);
  EXPECT_EQ(res.epochs[0].diverged_rank, 1);
  c.allow_divergence = false;
  try {
    train(c, data(), {}, on_rank1<PoisonsLogits>(4));
    FAIL() << "train() did not throw";
  } catch (const Diverged& e) {
    EXPECT_TRUE(has(e.what(), "epoch 1 at step 5/12 (rank 1's loss first not finite")) << e.what();
  }
}

TEST(Divergence, NonFiniteParametersWithAFiniteLoss) {
  if (!have_data()) GTEST_SKIP() << "Fashion-MNIST not installed";
  TrainConfig c = small(2, 0.2);
  // Rank 1's last update of epoch 2 (its 24th) leaves a NaN parameter: every loss so far finite.
  try {
    train(c, data(), {}, on_rank1<PoisonsUpdate>(24));
    FAIL() << "train() did not throw";
  } catch (const Diverged& e) {
    EXPECT_TRUE(has(e.what(), "training diverged in epoch 2 (the parameters are not finite"))
        << e.what();
  }
  c.allow_divergence = true;
  const TrainResult res = train(c, data(), {}, on_rank1<PoisonsUpdate>(24));
  ASSERT_EQ(res.epochs.size(), 2u);
  EXPECT_FALSE(res.epochs[0].diverged);
  EXPECT_TRUE(res.epochs[1].diverged);
  EXPECT_TRUE(std::isfinite(res.epochs[1].train_loss));
  EXPECT_EQ(res.epochs[1].diverged_step, -1);
  EXPECT_EQ(res.epochs[1].diverged_rank, -1);
}
