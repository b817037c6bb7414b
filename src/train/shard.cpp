// shard.cpp: the sharded modes' table, layout and step (see shard.h).
#include "src/train/shard.h"

#include <algorithm>

#include "collectives/registry.h"
#include "src/core/check.h"
#include "src/core/registry.h"

namespace dpb {

const std::vector<ShardModeEntry>& shard_modes() {
  static const std::vector<ShardModeEntry> table = {
      {"none", "replicated: parameters, gradients and optimizer state on every rank", ShardMode::None, 0},
      {"optimizer",
       "ZeRO-1: gradients all-reduced, each rank updates its shard with its shard of the optimizer "
       "state, parameters all-gathered",
       ShardMode::Optimizer, 1},
      {"gradients",
       "ZeRO-2: gradients reduce-scattered per unit during backward, each rank keeps its shard; "
       "optimizer as ZeRO-1",
       ShardMode::Gradients, 2},
      {"parameters",
       "ZeRO-3 / FSDP full shard: parameters sharded at rest, each unit all-gathered before its "
       "forward and backward (next unit prefetched); gradients as ZeRO-2",
       ShardMode::Parameters, 3},
  };
  return table;
}

const ShardModeEntry& find_shard_mode(const std::string& name) {
  return lookup_entry(shard_modes(), name, "--shard", "mode");
}

const ShardModeEntry& shard_mode_entry(ShardMode m) {
  for (const ShardModeEntry& e : shard_modes())
    if (e.mode == m) return e;
  DPB_CHECK(false, "shard mode " << int(m) << " has no entry in shard_modes()");
}

std::string to_string(ShardMode m) { return shard_mode_entry(m).name; }

const AllReduceEntry& shard_collective(ShardMode m, Collective c, const std::string& algorithm) {
  const auto& table = collective_algorithms(c);
  const AllReduceEntry* e = find_entry(table, algorithm);
  DPB_CHECK(e, "--shard " << to_string(m) << ": runs " << collective_name(c)
                          << " with --allreduce's algorithm, and '" << algorithm
                          << "' has none (valid: " << entry_names(table) << ")");
  return *e;
}

ShardLayout make_shard_layout(const std::vector<ParamInfo>& params, const GradSyncConfig& cfg,
                              int k, int rank) {
  DPB_CHECK(k >= 1 && rank >= 0 && rank < k, "shard layout: rank " << rank << " of " << k);
  ShardLayout L;
  L.k = k, L.rank = rank;
  const std::vector<int> layer = param_layers(params);
  const int nparams = int(params.size());
  // The gradient sync plan over the layers (each a "parameter" of its summed size) ...
  std::vector<size_t> layer_size;
  std::vector<int> layer_first;  // first parameter of each layer
  for (int p = 0; p < nparams; ++p) {
    L.param_offset.push_back(params[p].offset);
    L.total += params[p].size;
    if (p == 0 || layer[p] != layer[p - 1]) {
      layer_size.push_back(0);
      layer_first.push_back(p);
    }
    layer_size.back() += params[p].size;
  }
  layer_first.push_back(nparams);
  // ... then back to parameter ranges (a layer's parameters are consecutive in the table).
  for (const Unit& lu : plan_units(layer_size, cfg)) {
    Unit u = lu;
    u.first_param = layer_first[lu.first_param];
    u.last_param = layer_first[lu.last_param + 1] - 1;
    u.offset = params[u.first_param].offset;
    L.units.push_back(u);
  }
  const int U = int(L.units.size());
  L.unit_of_param.assign(nparams, -1);
  for (int u = 0; u < U; ++u) {
    const Unit& unit = L.units[u];
    for (int p = unit.first_param; p <= unit.last_param; ++p) L.unit_of_param[p] = u;
    L.own_begin.push_back(unit.offset + chunk_begin(unit.count, k, rank));
    L.own_size.push_back(chunk_size(unit.count, k, rank));
    L.compact.push_back(L.shard_floats);
    L.shard_floats += L.own_size.back();
    L.largest_unit = std::max(L.largest_unit, unit.count);
  }
  for (int u = 0; u < U; ++u) L.forward_order.push_back(u);
  std::sort(L.forward_order.begin(), L.forward_order.end(), [&](int a, int b) {
    return L.units[a].first_param < L.units[b].first_param;
  });
  return L;
}

ShardTraffic ShardedStep::traffic(ShardMode mode, const ShardLayout& L) {
  ShardTraffic t;
  const long U = long(L.units.size());
  if (mode == ShardMode::None || mode == ShardMode::Optimizer) {
    t.allreduce_floats = L.total;  // in GradSync's units (its calls are its plan's)
  } else {
    t.reducescatter_calls = U;
    t.reducescatter_floats = L.total;
  }
  if (mode == ShardMode::Optimizer || mode == ShardMode::Gradients) {
    t.allgather_calls = U;  // the updated parameters
    t.allgather_floats = L.total;
  }
  if (mode == ShardMode::Parameters) {
    // Forward gathers every unit; backward starts on forward's last unit and the one before it,
    // both still in their slots, and gathers the rest.
    t.allgather_calls = U;
    t.allgather_floats = L.total;
    const int F = int(L.forward_order.size());
    for (int j = 0; j < F - 2; ++j) {
      ++t.allgather_calls;
      t.allgather_floats += L.units[L.forward_order[j]].count;
    }
  }
  return t;
}

ShardedStep::ShardedStep(ShardMode mode, ShardLayout layout, CommGroup& group, AllReduce& rs,
                         AllReduce& ag, Device& dev, float* w, float* g, Optimizer& opt,
                         bool overlap)
    : mode_(mode), layout_(std::move(layout)), group_(group), rs_(rs), ag_(ag), dev_(dev),
      rank_(dev.rank()), w_(w), g_(g), opt_(opt),
      exposed_timer_(dev.make_timer(StreamKind::Compute)),
      q_(dev, dev.rank(), overlap, [this](const std::string& why) { group_.abort(rank_, why); }) {
  DPB_CHECK(mode_ != ShardMode::None, "ShardedStep: --shard none runs without one");
  DPB_CHECK(opt_.size() == layout_.shard_floats,
            "--shard " << to_string(mode_) << ": optimizer over " << opt_.size()
                       << " parameters, but rank " << rank_ << "'s shard has "
                       << layout_.shard_floats);
  const int U = int(layout_.units.size());
  const int slots = std::min(U, 2);  // one unit in use, the next one's prefetch or reduction
  const size_t big = layout_.largest_unit;
  if (mode_ == ShardMode::Parameters)
    for (int s = 0; s < slots; ++s)
      pslot_[s].buf = group.alloc(rank_, big, MemCategory::Parameters, "gathered parameters (a unit)");
  if (shards_gradients(mode_))
    for (int s = 0; s < slots; ++s)
      gslot_[s].buf = group.alloc(rank_, big, MemCategory::Gradients, "gradient bucket (a unit)");
  launch_pos_.assign(U, 0);
  for (int j = 0; j < U; ++j) launch_pos_[layout_.forward_order[U - 1 - j]] = j;
  rs_.reserve(rank_, big);  // scratch now, not inside the first timed step
  ag_.reserve(rank_, big);
  pending_.assign(U, 0);
}

void ShardedStep::wait_exposed(long ticket) {
  PhaseRange ph(tl_, "comm wait");
  exposed_timer_->begin();
  q_.wait(ticket);
  dev_.compute_wait_comm();
  exposed_timer_->end();
}

long ShardedStep::submit(CommQueue::Job job, const char* what, const AllReduce& c, size_t count,
                         int unit) {
  CommJobInfo info{what, c.choice(count), uint64_t(count) * sizeof(float), unit};
  if (q_.threaded()) return q_.submit(std::move(job), std::move(info));
  PhaseRange ph(tl_, "comm wait");
  exposed_timer_->begin();
  const long t = q_.submit(std::move(job), std::move(info));
  exposed_timer_->end();
  return t;
}

double ShardedStep::exposed_seconds() { return exposed_timer_->seconds(); }

void ShardedStep::reset_times() {
  q_.reset_times();
  exposed_timer_->reset();
}

void ShardedStep::begin_forward() {
  phase_ = Phase::Forward;
  pos_ = -1;
}

void ShardedStep::skip_forward() {
  begin_forward();
  if (mode_ != ShardMode::Parameters) return;
  for (int u : layout_.forward_order) param(layout_.units[u].first_param);
}

void ShardedStep::begin_backward() {
  phase_ = Phase::Backward;
  pos_ = -1;
  for (size_t u = 0; u < layout_.units.size(); ++u)
    pending_[u] = layout_.units[u].last_param - layout_.units[u].first_param + 1;
}

void ShardedStep::gather(int slot, int unit) {
  const Unit& u = layout_.units[unit];
  float* buf = pslot_[slot].buf.get();
  float* mine = buf + (layout_.own_begin[unit] - u.offset);
  const float* src = w_ + layout_.compact[unit];
  const size_t own = layout_.own_size[unit], count = u.count;
  pslot_[slot].unit = unit;
  pslot_[slot].ticket = submit([=, this](CommQueue::Clock::time_point issued) {
    dev_.comm_copy(mine, src, own);  // this rank's part in place, then every rank's
    ag_.issue(rank_, issued);
    ag_.run(rank_, buf, count);
  }, "all-gather", ag_, count, unit);
}

int ShardedStep::expect_unit(int i) {
  const int u = layout_.unit_of_param[i];
  const int U = int(layout_.forward_order.size());
  auto order = [&](int j) {
    return phase_ == Phase::Forward ? layout_.forward_order[j] : layout_.forward_order[U - 1 - j];
  };
  if (pos_ >= 0 && order(pos_) == u) return -1;  // the unit in use
  DPB_CHECK(phase_ != Phase::Idle && pos_ + 1 < U && order(pos_ + 1) == u,
            "--shard " << to_string(mode_) << ": the model asked for parameter " << i
                       << " out of order (a sharded model must use its parameters in the "
                       << "table's order in forward and in reverse in backward)");
  ++pos_;
  return pos_ + 1 < U ? order(pos_ + 1) : -2;  // the next unit to prefetch (-2: none)
}

const float* ShardedStep::param(int i) {
  if (mode_ != ShardMode::Parameters) return w_ + layout_.param_offset[i];
  const int u = layout_.unit_of_param[i];
  const int next = expect_unit(i);
  if (next != -1) {  // u starts: make it resident, then prefetch the next one
    int s = pslot_[0].unit == u ? 0 : pslot_[1].unit == u ? 1 : -1;
    if (s < 0) {
      s = cur_ < 0 || !pslot_[1 - cur_].buf.get() ? 0 : 1 - cur_;
      gather(s, u);
    }
    wait_exposed(pslot_[s].ticket);
    cur_ = s;
    if (next >= 0 && pslot_[1 - s].buf.get() && pslot_[1 - s].unit != next) gather(1 - s, next);
  }
  return pslot_[cur_].buf.get() + (layout_.param_offset[i] - layout_.units[u].offset);
}

int ShardedStep::bucket_for(int unit) {
  const int s = gslot_[1].buf.get() ? launch_pos_[unit] % 2 : 0;
  if (gslot_[s].unit != unit) {
    // The bucket's last reduce-scatter must have read it before backward writes it again.
    if (gslot_[s].ticket > 0) wait_exposed(gslot_[s].ticket);
    gslot_[s].unit = unit;
  }
  return s;
}

float* ShardedStep::grad(int i) {
  if (!shards_gradients(mode_)) return g_ + layout_.param_offset[i];
  const int u = layout_.unit_of_param[i];
  return gslot_[bucket_for(u)].buf.get() + (layout_.param_offset[i] - layout_.units[u].offset);
}

void ShardedStep::grad_ready(int i) {
  if (!shards_gradients(mode_)) return;
  const int u = layout_.unit_of_param[i];
  DPB_CHECK(pending_[u] > 0, "rank " << rank_ << ": grad_ready(" << i << ") twice in one step");
  if (--pending_[u] > 0) return;
  const int s = bucket_for(u);
  const Unit& unit = layout_.units[u];
  float* buf = gslot_[s].buf.get();
  const float* mine = buf + (layout_.own_begin[u] - unit.offset);
  float* dst = g_ + layout_.compact[u];
  const size_t own = layout_.own_size[u], count = unit.count;
  gslot_[s].ticket = submit([=, this](CommQueue::Clock::time_point issued) {
    rs_.issue(rank_, issued);
    rs_.run(rank_, buf, count);
    dev_.comm_copy(dst, mine, own);  // keep this rank's shard of the sums
  }, "reduce-scatter", rs_, count, u);
}

void ShardedStep::finish_backward() {
  phase_ = Phase::Idle;
  if (!shards_gradients(mode_)) return;
  for (size_t u = 0; u < pending_.size(); ++u)
    DPB_CHECK(pending_[u] == 0, "rank " << rank_ << ": backward left unit " << u
                                        << " without all its gradients");
  wait_exposed(q_.submitted());
}

void ShardedStep::update(float lr) {
  std::vector<OptSegment> segs;
  if (mode_ == ShardMode::Parameters) {
    segs.push_back({w_, g_, layout_.shard_floats});
  } else {
    for (size_t u = 0; u < layout_.units.size(); ++u) {
      if (layout_.own_size[u] == 0) continue;
      const size_t gat = mode_ == ShardMode::Optimizer ? layout_.own_begin[u] : layout_.compact[u];
      segs.push_back({w_ + layout_.own_begin[u], g_ + gat, layout_.own_size[u]});
    }
  }
  opt_.step(segs, lr);
  if (mode_ == ShardMode::Parameters) {  // the gathered copies are stale now
    release_gathered();
    return;
  }
  for (int u : layout_.forward_order) {
    float* buf = w_ + layout_.units[u].offset;
    const size_t count = layout_.units[u].count;
    submit([=, this](CommQueue::Clock::time_point issued) {
      ag_.issue(rank_, issued);
      ag_.run(rank_, buf, count);
    }, "all-gather", ag_, count, u);
  }
  wait_exposed(q_.submitted());
}

void ShardedStep::release_gathered() {
  for (Slot& s : pslot_) s.unit = -1;
  cur_ = -1;
  phase_ = Phase::Idle;
}

void ShardedStep::load_shard(const float* host_full) {
  DPB_CHECK(mode_ == ShardMode::Parameters, "load_shard: only --shard parameters keeps a shard");
  for (size_t u = 0; u < layout_.units.size(); ++u)
    if (layout_.own_size[u] > 0)
      dev_.upload(w_ + layout_.compact[u], host_full + layout_.own_begin[u], layout_.own_size[u]);
  release_gathered();
}

void ShardedStep::download_full(float* host_full) {
  if (mode_ != ShardMode::Parameters) {
    dev_.download(host_full, w_, layout_.total);
    return;
  }
  begin_forward();
  for (int u : layout_.forward_order) {
    const Unit& unit = layout_.units[u];
    const float* p = param(unit.first_param);  // the unit's start
    dev_.download(host_full + unit.offset, p, unit.count);
  }
  release_gathered();
}

size_t ShardMemory::total() const { return parameters + gradients + optimizer_state; }

ShardMemory zero_formula(ShardMode m, size_t P, int k, int state_floats) {
  DPB_CHECK(k >= 1 && state_floats >= 0,
            "zero_formula: k " << k << ", state floats " << state_floats);
  const size_t K = size_t(k), s = size_t(state_floats);
  auto shard = [K](size_t bytes) { return (bytes + K - 1) / K; };
  ShardMemory z{4 * P, 4 * P, 4 * s * P};
  if (m != ShardMode::None) z.optimizer_state = shard(z.optimizer_state);
  if (shards_gradients(m)) z.gradients = shard(z.gradients);
  if (m == ShardMode::Parameters) z.parameters = shard(z.parameters);
  return z;
}

ShardMemory shard_model_states(ShardMode m, const ShardLayout& L, int state_floats,
                               size_t granule) {
  DPB_CHECK(state_floats >= 0 && granule >= 1,
            "shard_model_states: state floats " << state_floats << ", granule " << granule);
  auto buf = [granule](size_t floats) {  // one buffer's bytes as the device charges them
    return (floats * sizeof(float) + granule - 1) / granule * granule;
  };
  // ShardedStep's constructor: two slots / buckets of the largest unit, one if there is one unit.
  const size_t slots = std::min<size_t>(L.units.size(), 2) * buf(L.largest_unit);
  const size_t s = size_t(state_floats);
  ShardMemory a{buf(L.total), buf(L.total), s * buf(L.total)};
  if (m == ShardMode::None) return a;
  a.optimizer_state = s * buf(L.shard_floats);
  if (shards_gradients(m)) a.gradients = buf(L.shard_floats) + slots;
  if (m == ShardMode::Parameters) a.parameters = buf(L.shard_floats) + slots;
  return a;
}

std::vector<ShardCall> shard_step_calls(ShardMode m, const ShardLayout& L,
                                        const std::vector<size_t>& param_sizes,
                                        const GradSyncConfig& sync) {
  std::vector<ShardCall> calls;
  if (!shards_gradients(m))
    for (const Unit& u : plan_units(param_sizes, sync)) calls.push_back({Collective::AllReduce, u.count});
  if (shards_gradients(m))
    for (const Unit& u : L.units) calls.push_back({Collective::ReduceScatter, u.count});
  if (m != ShardMode::None)
    for (const Unit& u : L.units) calls.push_back({Collective::AllGather, u.count});
  if (m == ShardMode::Parameters)
    for (size_t j = 0; j + 2 < L.forward_order.size(); ++j)
      calls.push_back({Collective::AllGather, L.units[L.forward_order[j]].count});
  return calls;
}

}  // namespace dpb
