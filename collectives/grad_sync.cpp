// grad_sync.cpp: gradient synchronisation for one rank: the unit plan (per-param, fused,
// bucketed in reverse parameter order), and the launch machinery, either on the calling thread
// after backward (overlap off) or on a per-rank communication thread that starts each unit as
// soon as its gradients are ready (overlap on). See grad_sync.h; tested by
// tests/test_grad_sync.cpp.
#include "collectives/grad_sync.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "src/core/check.h"
#include "src/core/registry.h"

namespace dpb {

namespace {

Unit unit_of(const std::vector<size_t>& offset, int first, int last) {
  return Unit{offset[first], offset[last + 1] - offset[first], first, last};
}

std::vector<Unit> plan_per_param(const std::vector<size_t>& offset, const GradSyncConfig&) {
  std::vector<Unit> units;
  for (int p = int(offset.size()) - 2; p >= 0; --p) units.push_back(unit_of(offset, p, p));
  return units;
}

std::vector<Unit> plan_fused(const std::vector<size_t>& offset, const GradSyncConfig&) {
  return {unit_of(offset, 0, int(offset.size()) - 2)};
}

// Parameters in reverse order into buckets of at most bucket_mb * 1e6 bytes; a parameter larger
// than the cap gets a bucket of its own.
std::vector<Unit> plan_bucketed(const std::vector<size_t>& offset, const GradSyncConfig& cfg) {
  DPB_CHECK(std::isfinite(cfg.bucket_mb) && cfg.bucket_mb > 0,
            "--bucket-mb must be a positive number, got " << cfg.bucket_mb);
  const double cap = cfg.bucket_mb * 1e6;  // bytes
  std::vector<Unit> units;
  const int P = int(offset.size()) - 1;
  int last = P - 1;  // the open bucket is [p+1, last]
  for (int p = P - 1; p >= 0; --p) {
    const double bytes = double(offset[last + 1] - offset[p]) * sizeof(float);
    if (p < last && bytes > cap) {  // p does not fit: close [p+1, last], open one at p
      units.push_back(unit_of(offset, p + 1, last));
      last = p;
    }
  }
  units.push_back(unit_of(offset, 0, last));
  return units;
}

}  // namespace

const std::vector<SyncModeEntry>& sync_modes() {
  static const std::vector<SyncModeEntry> table = {
      {"per-param", "one all-reduce per parameter tensor, in backward's order (d2l's loop)",
       SyncMode::PerParam, plan_per_param},
      {"fused", "one all-reduce over the whole flat gradient buffer", SyncMode::Fused, plan_fused},
      {"bucketed", "buckets of --bucket-mb in backward's order (PyTorch DDP)", SyncMode::Bucketed,
       plan_bucketed},
  };
  return table;
}

SyncMode parse_sync_mode(const std::string& s) {
  return lookup_entry(sync_modes(), s, "--grad-sync", "gradient sync mode").mode;
}

std::string to_string(SyncMode m) {
  for (const SyncModeEntry& e : sync_modes())
    if (e.mode == m) return e.name;
  return "?";
}

std::vector<Unit> plan_units(const std::vector<size_t>& param_sizes, const GradSyncConfig& cfg) {
  const int P = int(param_sizes.size());
  if (P == 0) return {};
  std::vector<size_t> offset(P + 1, 0);  // model order: param p occupies [offset[p], offset[p+1])
  for (int p = 0; p < P; ++p) offset[p + 1] = offset[p] + param_sizes[p];
  for (const SyncModeEntry& e : sync_modes())
    if (e.mode == cfg.mode) return e.plan(offset, cfg);
  DPB_CHECK(false, "gradient sync mode " << int(cfg.mode) << " has no entry in sync_modes()");
}

void adapt_barrier_spin(CommGroup& group, const GradSyncConfig& cfg) {
  if (cfg.overlap) group.set_barrier_spin_ns(default_barrier_spin_ns(2 * group.size()));
}

// ---------------------------------------------------------------- GradSync

GradSync::GradSync(const GradSyncConfig& cfg, const std::vector<size_t>& param_sizes,
                   AllReduce& ar, Device& dev, int rank, float* grads)
    : cfg_(cfg), units_(plan_units(param_sizes, cfg)), ar_(ar), dev_(dev), rank_(rank),
      grads_(grads), exposed_timer_(dev.make_timer(StreamKind::Compute)),
      q_(dev, rank, cfg.overlap, [this](const std::string& why) { ar_.abort(rank_, why); }) {
  unit_of_param_.assign(param_sizes.size(), -1);
  for (size_t u = 0; u < units_.size(); ++u)
    for (int p = units_[u].first_param; p <= units_[u].last_param; ++p) unit_of_param_[p] = int(u);
  size_t largest = 0;
  for (const Unit& u : units_) largest = std::max(largest, u.count);
  ar_.reserve(rank_, largest);  // scratch space now, not inside the first timed step
  arm();
}

void GradSync::arm() {
  pending_.assign(units_.size(), 0);
  for (size_t u = 0; u < units_.size(); ++u)
    pending_[u] = units_[u].last_param - units_[u].first_param + 1;
  ready_.assign(unit_of_param_.size(), 0);
  launched_ = 0;
}

void GradSync::begin_step() {
  DPB_CHECK(q_.idle(), "rank " << rank_ << ": begin_step() while gradient communication is in flight");
  arm();
}

void GradSync::grad_ready(int param) {
  DPB_CHECK(param >= 0 && size_t(param) < unit_of_param_.size(),
            "rank " << rank_ << ": grad_ready(" << param << ") but the model has "
                    << unit_of_param_.size() << " parameters");
  DPB_CHECK(!ready_[param],
            "rank " << rank_ << ": grad_ready(" << param << ") called twice in one step");
  ready_[param] = 1;
  --pending_[unit_of_param_[param]];
  if (!cfg_.overlap) return;
  // Launch in plan order only, so that every rank's collective calls match.
  while (launched_ < int(units_.size()) && pending_[launched_] == 0) launch(launched_++);
}

// The comm queue marks the compute stream at submit, on the backward thread: the unit waits for
// exactly the work that produced its gradients, not for backward layers issued after it; the time
// of submit is when the host issued the unit's comm work (an emulated link's clock: link.h).
void GradSync::launch(int unit) {
  const Unit u = units_[unit];
  float* buf = grads_ + u.offset;
  q_.submit([this, buf, u](CommQueue::Clock::time_point issued) {
    ar_.issue(rank_, issued);
    ar_.run(rank_, buf, u.count);
  }, CommJobInfo{"all-reduce", ar_.choice(u.count), uint64_t(u.count) * sizeof(float), unit});
}

const SyncTimes& GradSync::times() {
  times_.comm_s = q_.comm_seconds();
  times_.exposed_s = exposed_timer_->seconds();
  times_.calls = q_.calls();
  return times_;
}

void GradSync::reset_times() {
  times_ = {};
  q_.reset_times();
  exposed_timer_->reset();
}

void GradSync::finish() {
  exposed_timer_->begin();
  try {
    const int U = int(units_.size());
    while (launched_ < U) launch(launched_++);  // overlap off: each runs now, inline
    q_.wait_all();
  } catch (...) {
    arm();
    throw;  // the queue keeps the error: the GradSync is unusable
  }
  dev_.compute_wait_comm();
  exposed_timer_->end();  // CUDA: how long the compute stream stood at the wait above
  arm();
}

}  // namespace dpb
