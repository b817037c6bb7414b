// test_grad_sync.cpp: gradient-sync plans (per-param, fused, bucketed on LeNet's parameter
// sizes), exact reduced gradients for every mode with overlap on and off for k = 2, 3, 4 and for
// every all-reduce algorithm of the table under bucketed overlap, and errors from the
// communication thread surfacing from finish(). Run: ./dpb_tests --gtest_filter='GradSync*'
#include <gtest/gtest.h>

#include <cstdlib>

#include <atomic>
#include <exception>
#include <functional>
#include <thread>
#include <vector>

#include "tests/cpu_ranks.h"
#include "tests/rank_threads.h"
#include "collectives/grad_sync.h"
#include "collectives/registry.h"
#include "src/core/check.h"
#include "kernels/cpu/cpu_device.h"

namespace dpb {
namespace {

// LeNet's eight parameters in model order (conv1 w, b, conv2 w, b, dense w, b, ...).
const std::vector<size_t> kLeNet = {180, 20, 25000, 50, 102400, 128, 1280, 10};


GradSyncConfig config(SyncMode mode, bool overlap, double bucket_mb = 25) {
  GradSyncConfig c;
  c.mode = mode;
  c.overlap = overlap;
  c.bucket_mb = bucket_mb;
  return c;
}

// Units as (first_param, last_param) pairs, and the invariants every plan must keep.
std::vector<std::pair<int, int>> ranges(const std::vector<size_t>& sizes, const GradSyncConfig& c) {
  auto units = plan_units(sizes, c);
  std::vector<size_t> offset(sizes.size() + 1, 0);
  for (size_t p = 0; p < sizes.size(); ++p) offset[p + 1] = offset[p] + sizes[p];
  std::vector<std::pair<int, int>> out;
  int expect_last = int(sizes.size()) - 1;  // reverse order, contiguous, covering everything
  for (const Unit& u : units) {
    EXPECT_EQ(u.last_param, expect_last);
    EXPECT_LE(u.first_param, u.last_param);
    EXPECT_EQ(u.offset, offset[u.first_param]);
    EXPECT_EQ(u.count, offset[u.last_param + 1] - offset[u.first_param]);
    if (c.mode == SyncMode::Bucketed && u.first_param != u.last_param)
      EXPECT_LE(u.count * 4.0, c.bucket_mb * 1e6);
    expect_last = u.first_param - 1;
    out.emplace_back(u.first_param, u.last_param);
  }
  EXPECT_EQ(expect_last, -1);
  return out;
}

using R = std::vector<std::pair<int, int>>;

TEST(GradSync, Plans) {
  EXPECT_EQ(ranges(kLeNet, config(SyncMode::PerParam, false)),
            (R{{7, 7}, {6, 6}, {5, 5}, {4, 4}, {3, 3}, {2, 2}, {1, 1}, {0, 0}}));
  EXPECT_EQ(ranges(kLeNet, config(SyncMode::Fused, false)), (R{{0, 7}}));
  auto fused = plan_units(kLeNet, config(SyncMode::Fused, false));
  EXPECT_EQ(fused[0].count, 129068u);
  EXPECT_EQ(ranges(kLeNet, config(SyncMode::Bucketed, false, 25)), (R{{0, 7}}));
  // Cap 100000 B = 25000 floats: the 102400-float dense weight is alone (larger than the cap),
  // and 25000 + 50 floats no longer fit.
  EXPECT_EQ(ranges(kLeNet, config(SyncMode::Bucketed, false, 0.1)),
            (R{{5, 7}, {4, 4}, {3, 3}, {2, 2}, {0, 1}}));
  // Cap 410000 B = 102500 floats: 102400 + 50 fit, 1418 + 102400 do not.
  EXPECT_EQ(ranges(kLeNet, config(SyncMode::Bucketed, false, 0.41)), (R{{5, 7}, {3, 4}, {0, 2}}));
  // Exactly at the cap fits: 10 + 1280 floats = 5160 B.
  EXPECT_EQ(ranges(kLeNet, config(SyncMode::Bucketed, false, 0.00516)),
            (R{{6, 7}, {5, 5}, {4, 4}, {3, 3}, {2, 2}, {0, 1}}));
  EXPECT_EQ(ranges(kLeNet, config(SyncMode::Bucketed, false, 1e-9)),
            (R{{7, 7}, {6, 6}, {5, 5}, {4, 4}, {3, 3}, {2, 2}, {1, 1}, {0, 0}}));
  EXPECT_TRUE(plan_units({}, config(SyncMode::Fused, false)).empty());
  EXPECT_THROW(plan_units(kLeNet, config(SyncMode::Bucketed, false, 0)), Error);
  EXPECT_THROW(plan_units(kLeNet, config(SyncMode::Bucketed, false, -1)), Error);
}

TEST(GradSync, ParseMode) {
  for (const SyncModeEntry& m : sync_modes()) {
    EXPECT_EQ(parse_sync_mode(m.name), m.mode);
    EXPECT_EQ(to_string(m.mode), m.name);
  }
  try {
    parse_sync_mode("layerwise");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'layerwise'"), std::string::npos) << e.what();
  }
}

// Every rank runs `steps` steps over LeNet-sized gradients: rank r's gradient i at step s is
// (r+1+s)*(i%7+1), so the reduced value (i%7+1)*(k(k+1)/2 + k*s) is exact.
void check_sync(int k, const std::string& algo, const GradSyncConfig& cfg, bool forward_order) {
  const int steps = 3;
  CpuRanks ranks(k);
  CommGroup& group = ranks.group;
  auto ar = make_allreduce(algo, group);
  size_t n = 0;
  for (size_t s : kLeNet) n += s;
  const int P = int(kLeNet.size());
  on_ranks(k, [&](int r) {
    Device& dev = *ranks.raw[r];
    Buffer grads(dev, n, MemCategory::Temporaries, "grads");
    GradSync sync(cfg, kLeNet, *ar, dev, r, grads.get());
    std::vector<float> host(n);
    for (int step = 0; step < steps; ++step) {
      for (size_t i = 0; i < n; ++i) host[i] = float((r + 1 + step) * int(i % 7 + 1));
      dev.upload(grads.get(), host.data(), n);
      sync.begin_step();
      for (int j = 0; j < P; ++j) {
        sync.grad_ready(forward_order ? j : P - 1 - j);
        std::this_thread::yield();  // "backward" goes on
      }
      sync.finish();
      dev.download(host.data(), grads.get(), n);
      const float base = float(k * (k + 1) / 2 + k * step);
      size_t wrong = 0, first = n;
      for (size_t i = 0; i < n; ++i)
        if (host[i] != base * float(i % 7 + 1)) { ++wrong; if (first == n) first = i; }
      EXPECT_EQ(wrong, 0u) << "k=" << k << " " << algo << " " << to_string(cfg.mode)
                           << " overlap=" << cfg.overlap << " rank " << r << " step " << step
                           << ": first wrong element " << first;
    }
    EXPECT_EQ(sync.times().calls, long(sync.units().size()) * steps);
    EXPECT_GE(sync.times().comm_s, 0.0);
    EXPECT_GT(sync.times().exposed_s, 0.0);
    sync.reset_times();
    EXPECT_EQ(sync.times().calls, 0);
  });
}

TEST(GradSync, ExactReducedGradients) {
  for (int k : {2, 3, 4})
    for (bool overlap : {false, true})
      for (const SyncModeEntry& m : sync_modes())
        check_sync(k, "ring", config(m.mode, overlap, 0.1), false);
  // Every algorithm that runs on every backend, under the busiest mode (bucketed with overlap).
  for (const AllReduceEntry& e : allreduce_algorithms())
    for (int k : {3, 4})
      if (e.runs_on.empty() && allreduce_refusal(e, k, BackendKind::Cpu).empty())
        check_sync(k, e.name, config(SyncMode::Bucketed, true, 0.1), false);
  // Gradients ready in forward order: units still launch in plan order on every rank.
  check_sync(2, "ring", config(SyncMode::Bucketed, true, 0.1), true);
  check_sync(3, "ring", config(SyncMode::PerParam, true), true);
}

// Overlap adds a communication thread per rank: the group polls as for 2k threads.
TEST(GradSync, OverlapAdaptsBarrierSpin) {
  unsetenv("DPB_SPIN_US");
  CpuRanks ranks(2);
  CommGroup& group = ranks.group;
  const long before = group.barrier_spin_ns();
  adapt_barrier_spin(group, GradSyncConfig{SyncMode::Bucketed, false, 25.0});
  EXPECT_EQ(group.barrier_spin_ns(), before);  // no comm threads: unchanged
  adapt_barrier_spin(group, GradSyncConfig{SyncMode::Bucketed, true, 25.0});
  EXPECT_EQ(group.barrier_spin_ns(), default_barrier_spin_ns(4));
}

TEST(GradSync, MisuseIsAnError) {
  auto dev = make_cpu_device(0, 1);
  CommGroup group(1, {dev.get()});
  auto ar = make_allreduce("ring", group);
  Buffer grads(*dev, 129068, MemCategory::Temporaries, "grads");
  GradSync sync(config(SyncMode::Fused, false), kLeNet, *ar, *dev, 0, grads.get());
  EXPECT_THROW(sync.grad_ready(8), Error);
  EXPECT_THROW(sync.grad_ready(-1), Error);
  sync.grad_ready(3);
  EXPECT_THROW(sync.grad_ready(3), Error);
  sync.finish();  // launches what is left
  sync.grad_ready(3);  // finish() re-armed the step
}

// Forwards to `inner` but throws on call number fail_at (and aborts the group, as
// make_allreduce's objects do).
class FailingAllReduce final : public AllReduce {
 public:
  FailingAllReduce(AllReduce* inner, int fail_at) : inner_(inner), fail_at_(fail_at) {}
  std::string name() const override { return "failing"; }
  void run(int rank, float* buf, size_t n) override {
    if (calls_++ == fail_at_) throw Error("injected all-reduce failure");
    if (inner_) inner_->run(rank, buf, n);
  }
  void abort(int rank, const std::string& why) override {
    aborted_ = true;
    if (inner_) inner_->abort(rank, why);
  }
  bool aborted_ = false;

 private:
  AllReduce* inner_;
  int fail_at_;
  int calls_ = 0;
};

TEST(GradSync, CommThreadErrorSurfacesFromFinish) {
  for (bool overlap : {true, false}) {
    auto dev = make_cpu_device(0, 1);
    Buffer grads(*dev, 129068, MemCategory::Temporaries, "grads");
    FailingAllReduce ar(nullptr, 2);
    GradSync sync(config(SyncMode::PerParam, overlap), kLeNet, ar, *dev, 0, grads.get());
    for (int p = 7; p >= 0; --p) sync.grad_ready(p);
    try {
      sync.finish();
      FAIL() << "finish() did not rethrow";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("injected all-reduce failure"), std::string::npos);
    }
    EXPECT_TRUE(ar.aborted_);
    EXPECT_EQ(sync.times().calls, 3);  // the failed call counts; later units are dropped
  }
}

TEST(GradSync, FailureOnOneRankReachesEveryRank) {
  const int k = 2;
  CpuRanks ranks(k);
  CommGroup& group = ranks.group;
  auto ring = make_allreduce("ring", group);
  FailingAllReduce failing(ring.get(), 1);  // rank 1's second call fails before communicating
  std::atomic<int> threw{0};
  on_ranks(k, [&](int r) {
    Buffer grads(*ranks.raw[r], 129068, MemCategory::Temporaries, "grads");
    AllReduce& ar = r == 1 ? static_cast<AllReduce&>(failing) : *ring;
    GradSync sync(config(SyncMode::PerParam, true), kLeNet, ar, *ranks.raw[r], r, grads.get());
    for (int p = 7; p >= 0; --p) sync.grad_ready(p);
    try {
      sync.finish();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("injected all-reduce failure"), std::string::npos)
          << e.what();
      ++threw;
    }
  });
  EXPECT_EQ(threw.load(), k);
}

TEST(GradSync, DestructorWithCommunicationInFlightDoesNotHang) {
  // Rank 0 launches its units, then fails before finish(); rank 1 never takes part.
  CpuRanks ranks(2);
  CommGroup& group = ranks.group;
  auto ar = make_allreduce("ring", group);
  Buffer grads(*ranks.raw[0], 129068, MemCategory::Temporaries, "grads");
  {
    GradSync sync(config(SyncMode::PerParam, true), kLeNet, *ar, *ranks.raw[0], 0, grads.get());
    for (int p = 7; p >= 0; --p) sync.grad_ready(p);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(group.aborted());
}

}  // namespace
}  // namespace dpb
