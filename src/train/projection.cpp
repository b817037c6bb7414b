// projection.cpp: the projected epoch of k devices on a link (one or two levels) from a step
// profile (step_profile.cpp), every shard mode's communication over one timeline. See
// projection.h; tested by tests/test_projection.cpp.
#include "src/train/projection.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "collectives/registry.h"
#include "kernels/backends.h"
#include "src/core/check.h"
#include "src/core/registry.h"
#include "src/train/run_options.h"

namespace dpb {

namespace {

// How each mode communicates (ShardedStep, src/train/shard.h), as the step's timeline reads it:
// a mode differs from the others by its row here, and project_step is written once over them.
struct ModeComm {
  ShardMode mode;
  bool allreduce;       // GradSync's all-reduce of the gradients, over its plan's units
  bool reduce_scatter;  // each layout unit reduce-scattered once backward made its gradients
  bool gather_on_use;   // units all-gathered before forward and backward use them (prefetch 1)
  bool gather_after;    // every unit all-gathered after the update (exposed)
  bool shard_update;    // the optimizer on this rank's shard of the parameters
};
constexpr ModeComm kModeComm[] = {
    {ShardMode::None, true, false, false, false, false},
    {ShardMode::Optimizer, true, false, false, true, true},
    {ShardMode::Gradients, false, true, false, true, true},
    {ShardMode::Parameters, false, true, true, false, true},
};

const ModeComm& mode_comm(ShardMode m) {
  for (const ModeComm& c : kModeComm)
    if (c.mode == m) return c;
  DPB_CHECK(false, "dpbench project: --shard " << to_string(m) << " has no row in kModeComm");
}

// Seconds for one call of collective c over `floats` floats (reduce-scatter, all-gather: the
// whole buffer) by cfg's algorithm's entry in c's table.
double collective_cost(Collective c, const ProjectConfig& cfg, BackendKind kind, double floats) {
  const double bytes = floats * sizeof(float);
  if (c == Collective::AllReduce)
    return allreduce_link_cost(cfg.allreduce, bytes, cfg.devices, cfg.link, kind, cfg.tune_file);
  return find_collective(c, cfg.allreduce)
      .link_cost(LinkCostQuery{bytes, cfg.devices, cfg.link, kind, cfg.tune_file});
}

// What the step's timeline takes from the profile and the layout, in unscaled seconds.
struct StepPlan {
  std::vector<Unit> ar_units;  // GradSync's plan (all-reduce modes)
  ShardLayout layout;          // rank 0's (its shard is the largest: chunk 0 of every unit)
  std::vector<int> fwd, bwd;   // the layout's units in forward's and backward's order
  // Per position in fwd / bwd: the unit's compute starts (since the phase's start; the next
  // position's start, or the phase's end, ends it) and, backward, its last gradient's ready time.
  std::vector<double> fstart, bstart, ready;
};

StepPlan make_plan(const StepProfile& prof, const ProjectConfig& cfg) {
  StepPlan s;
  std::vector<size_t> sizes;
  for (const auto& q : prof.params) sizes.push_back(q.floats);
  s.ar_units = plan_units(sizes, cfg.sync);
  if (cfg.shard == ShardMode::None) return s;
  s.layout = make_shard_layout(model_param_layout(prof.model, prof.model_opts), cfg.sync,
                               cfg.devices, 0);
  const int U = int(s.layout.units.size());
  s.fwd = s.layout.forward_order;
  s.bwd.assign(s.fwd.rbegin(), s.fwd.rend());
  // Per unit: the first ask of each phase (-1: none measured) and the last gradient.
  auto first_ask = [&](int u, double ParamTiming::*at) {
    double t = -1;
    for (int p = s.layout.units[u].first_param; p <= s.layout.units[u].last_param; ++p)
      if (prof.params[p].*at >= 0) t = t < 0 ? prof.params[p].*at : std::min(t, prof.params[p].*at);
    return t;
  };
  double prev = 0;  // backward: a unit without a measured ask starts at the previous one's end
  for (int j = 0; j < U; ++j) {
    const Unit& u = s.layout.units[s.bwd[j]];
    double r = 0;
    for (int p = u.first_param; p <= u.last_param; ++p) r = std::max(r, prof.params[p].ready_s);
    const double b = first_ask(s.bwd[j], &ParamTiming::bwd_at_s);
    s.bstart.push_back(std::clamp(b >= 0 ? b : prev, j ? s.bstart.back() : 0.0, prof.backward_s));
    s.ready.push_back(std::clamp(r, s.bstart.back(), prof.backward_s));
    prev = s.ready.back();
  }
  bool measured = true;
  for (int j = 0; j < U; ++j) {
    const double f = first_ask(s.fwd[j], &ParamTiming::fwd_at_s);
    measured = measured && f >= 0;
    s.fstart.push_back(std::clamp(f, j ? s.fstart.back() : 0.0, prof.forward_s));
  }
  if (!measured) {  // an older profile: forward split over the units as backward is
    std::vector<double> dur(U);  // per unit index
    double sum = 0;
    for (int j = 0; j < U; ++j)
      sum += dur[s.bwd[j]] = (j + 1 < U ? s.bstart[j + 1] : prof.backward_s) - s.bstart[j];
    double t = 0;
    for (int j = 0; j < U; ++j) {
      s.fstart[j] = t;
      t += prof.forward_s * (sum > 0 ? dur[s.fwd[j]] / sum : 1.0 / U);
    }
  }
  return s;
}

// One rank's clock through a step and its queue of communication jobs (collectives/comm_queue.h):
// a job starts when it is submitted and the one before it is done; overlap off runs it inline
// (the compute waits for it). Exposed: the time compute waits for communication.
struct Timeline {
  bool overlap = false;
  double now = 0, queue = 0, comm = 0, exposed = 0;
  long calls = 0;
  double submit(double cost) {  // returns when the job is done
    queue = std::max(queue, now) + cost;
    comm += cost;
    ++calls;
    if (!overlap) wait(queue);
    return queue;
  }
  void wait(double until) {
    if (until > now) exposed += until - now, now = until;
  }
};

struct StepTimes {
  double step = 0, data = 0, comm = 0, exposed = 0;
  long calls = 0;
};

// One step on one rank with `shard` images per device; f: the compute stretch.
StepTimes project_step(const StepProfile& prof, BackendKind kind, const ProjectConfig& cfg,
                       const StepPlan& plan, int shard, double f) {
  const ModeComm& m = mode_comm(cfg.shard);
  const double scale = double(shard) / prof.batch * f;
  const double fwd = prof.forward_s * scale, bwd = prof.backward_s * scale;
  auto cost = [&](Collective c, int unit) {
    return collective_cost(c, cfg, kind, double(plan.layout.units[unit].count));
  };
  Timeline tl;
  tl.overlap = cfg.sync.overlap;
  StepTimes t;
  t.data = prof.data_s * scale;
  tl.now = t.data;
  if (m.gather_on_use) {  // each unit's gather before its compute, the next one prefetched
    const int F = int(plan.fwd.size());
    std::vector<double> got(F, 0.0);
    tl.now += plan.fstart[0] * scale;
    for (int j = 0; j < F; ++j) {
      if (j == 0) got[0] = tl.submit(cost(Collective::AllGather, plan.fwd[0]));
      tl.wait(got[j]);
      if (j + 1 < F) got[j + 1] = tl.submit(cost(Collective::AllGather, plan.fwd[j + 1]));
      tl.now += ((j + 1 < F ? plan.fstart[j + 1] : prof.forward_s) - plan.fstart[j]) * scale;
    }
  } else {
    tl.now += fwd;
  }
  if (m.allreduce) {  // GradSync: its units as the gradients become ready, on its own stream
    double comm_end = 0;  // from the start of backward
    for (const Unit& u : plan.ar_units) {
      const double c = collective_cost(Collective::AllReduce, cfg, kind, double(u.count));
      t.comm += c;
      ++t.calls;
      double ready = 0;
      for (int p = u.first_param; p <= u.last_param; ++p)
        ready = std::max(ready, prof.params[p].ready_s * scale);
      comm_end = cfg.sync.overlap ? std::max(comm_end, ready) + c : comm_end + c;
    }
    t.exposed = cfg.sync.overlap ? std::max(0.0, comm_end - bwd) : comm_end;
    tl.now += bwd + t.exposed;
  } else if (m.reduce_scatter) {  // each unit's reduce-scatter once its gradients are made
    const int U = int(plan.bwd.size()), buckets = std::min(U, 2);
    std::vector<double> got(U, 0.0), reduced(U, 0.0);
    tl.now += plan.bstart[0] * scale;
    for (int j = 0; j < U; ++j) {
      if (m.gather_on_use) {  // forward's last two units are still in their slots
        if (j >= 2) tl.wait(got[j]);
        if (j >= 1 && j + 1 < U) got[j + 1] = tl.submit(cost(Collective::AllGather, plan.bwd[j + 1]));
      }
      if (j >= buckets) tl.wait(reduced[j - buckets]);  // its gradient bucket is free again
      const double seg = ((j + 1 < U ? plan.bstart[j + 1] : prof.backward_s) - plan.bstart[j]) * scale;
      const double ready = std::clamp((plan.ready[j] - plan.bstart[j]) * scale, 0.0, seg);
      tl.now += ready;
      reduced[j] = tl.submit(cost(Collective::ReduceScatter, plan.bwd[j]));
      tl.now += seg - ready;
    }
    tl.wait(tl.queue);  // finish_backward
  } else {
    tl.now += bwd;
  }
  const double share =
      m.shard_update ? double(plan.layout.shard_floats) / double(plan.layout.total) : 1.0;
  tl.now += prof.optimizer_s * f * share;
  if (m.gather_after) {  // the updated shards to every rank, before the next forward
    for (int u : plan.fwd) tl.submit(cost(Collective::AllGather, u));
    tl.wait(tl.queue);
  }
  t.step = tl.now;
  t.comm += tl.comm;
  t.exposed += tl.exposed;
  t.calls += tl.calls;
  return t;
}

}  // namespace

void check_cost_models(const ProjectConfig& cfg, BackendKind kind) {
  const ModeComm& m = mode_comm(cfg.shard);
  // Refuses an algorithm without a cost model, and a bad tuning file.
  if (m.allreduce) allreduce_link_cost(cfg.allreduce, 4, 2, cfg.link, kind, cfg.tune_file);
  if (cfg.shard == ShardMode::None) return;
  for (Collective c : {Collective::ReduceScatter, Collective::AllGather}) {
    const auto& table = collective_algorithms(c);
    const AllReduceEntry* e = &shard_collective(cfg.shard, c, cfg.allreduce);
    std::string have;
    for (const AllReduceEntry& o : table)
      if (o.link_cost) have += (have.empty() ? "" : ", ") + o.name;
    DPB_CHECK(e->link_cost, "--shard " << to_string(cfg.shard) << ": no link cost model for "
                                       << collective_name(c) << " '" << cfg.allreduce
                                       << "' (have: " << have << ")");
  }
}

Projection project(const StepProfile& prof, const ProjectConfig& cfg) {
  const int k = cfg.devices;
  DPB_CHECK(k >= 1, "--devices: must be >= 1, got " << k);
  DPB_CHECK(cfg.link.nodes >= 1 && k % cfg.link.nodes == 0,
            "--nodes " << cfg.link.nodes << ": the " << k
                       << " devices must split into nodes of equal size (a divisor of --devices "
                       << k << ")");
  DPB_CHECK(cfg.batch >= k, "--batch: the global batch (" << cfg.batch
                                << ") is smaller than the device count (" << k << ")");
  DPB_CHECK(cfg.train_examples >= 1, "training examples must be >= 1");
  const BackendEntry& backend = find_backend(prof.backend);
  check_cost_models(cfg, backend.kind);
  const StepPlan plan = make_plan(prof, cfg);
  Projection p;
  p.units = int(plan.ar_units.size());
  p.shard_units = int(plan.layout.units.size());
  // Ranks computing on the host share its cores: relative to the sharing the profile saw.
  if (!backend.physical_devices && cfg.cores > 0) {
    auto share = [&](int ranks) { return std::max(1.0, double(ranks) * prof.threads / cfg.cores); };
    p.compute_stretch = std::max(1.0, share(k) / share(prof.ranks));
  }
  const int full = cfg.train_examples / cfg.batch, rest = cfg.train_examples % cfg.batch;
  p.steps = full + (rest > 0);
  auto add = [&](const StepTimes& t, int times) {
    p.epoch_s += t.step * times;
    p.data_s += t.data * times;
    p.comm_s += (k > 1 ? t.comm : 0) * times;
    p.exposed_comm_s += (k > 1 ? t.exposed : 0) * times;
  };
  const StepTimes one =
      project_step(prof, backend.kind, cfg, plan, (cfg.batch + k - 1) / k, p.compute_stretch);
  p.step_s = one.step;
  p.calls = one.calls;
  add(one, full);
  if (rest > 0)
    add(project_step(prof, backend.kind, cfg, plan, (rest + k - 1) / k, p.compute_stretch), 1);
  p.compute_s = std::max(0.0, p.epoch_s - p.data_s - p.exposed_comm_s);  // as the trainer's CSV
  return p;
}

nlohmann::json projection_to_json(const StepProfile& prof, const ProjectConfig& cfg,
                                  const Projection& p) {
  return {{"model", prof.model},
          {"optimizer", prof.optimizer},
          {"loss", prof.loss},
          {"devices", cfg.devices},
          {"global_batch", cfg.batch},
          {"train_examples", cfg.train_examples},
          {"allreduce", cfg.allreduce},
          {"grad_sync", to_string(cfg.sync.mode)},
          {"bucket_mb", cfg.sync.bucket_mb},
          {"overlap", cfg.sync.overlap ? "on" : "off"},
          {"shard", to_string(cfg.shard)},
          {"link_gbps", cfg.link.gbps},
          {"link_latency_us", cfg.link.latency_us},
          {"link_name", cfg.link_name},
          {"nodes", cfg.link.nodes},
          {"devices_per_node", cfg.devices / std::max(1, cfg.link.nodes)},
          {"node_link_gbps", cfg.link.inter().gbps},
          {"node_link_latency_us", cfg.link.inter().latency_us},
          {"node_link_name", cfg.node_link_name},
          {"link", cfg.link.label()},
          {"steps", p.steps},
          {"units", p.units},
          {"shard_units", p.shard_units},
          {"calls_per_step", p.calls},
          {"step_s", p.step_s},
          {"epoch_s", p.epoch_s},
          {"compute_s", p.compute_s},
          {"data_s", p.data_s},
          {"comm_s", p.comm_s},
          {"exposed_comm_s", p.exposed_comm_s},
          {"compute_stretch", p.compute_stretch},
          {"profile", {{"backend", prof.backend}, {"device", prof.device}, {"cpu", prof.cpu},
                       {"threads", prof.threads}, {"ranks", prof.ranks},
                       {"batch", prof.batch}}}};
}

}  // namespace dpb
