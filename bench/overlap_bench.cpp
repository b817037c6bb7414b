// overlap_bench.cpp: how much gradient communication a real training step exposes.
//
//   overlap/<backend>/<model>/<mode>/ranks:<k>[/shared]
//     One data-parallel SGD step of LeNet (global batch --dpb_lenet_batch, default 256) or
//     ResNet-18 (--dpb_resnet18_batch, default 32) split across k ranks in contiguous shards, made
//     of the trainer's own step functions (src/train/step.h: step_forward with the loss scaled by
//     1/global batch, step_backward handing each gradient to GradSync::grad_ready,
//     step_sync_wait, step_update), ring all-reduce, on the first global batch of Fashion-MNIST
//     (random pixels when the data directory is absent).
//     mode: fused-after        one all-reduce after backward
//           per-param-after    one all-reduce per parameter, after backward
//           per-param-overlap  one per parameter, launched as backward produces it
//           bucket<N>MB-overlap  buckets of --dpb_bucket_mb (default 25), launched as ready
//     Each benchmark iteration runs a pair of steps: one compute-only step (forward + backward +
//     sgd, no communication, all ranks at once, untimed by the framework) and one full step
//     (timed: the slowest rank's step), in alternating order (ABBA), so that load drifting over
//     the run falls on both alike. Counters, means over the iterations unless said otherwise:
//       compute_s      compute-only step time (slowest rank)
//       backward_s     backward time inside those compute-only steps (slowest rank)
//       exposed_comm_s full step time - compute_s (can be slightly negative from noise)
//       exposed_comm_median_s  median over iterations of (full step - its paired compute-only
//                      step): less sensitive to steps slowed by other processes
//       exposed_comm_ci95_lo_s, exposed_comm_ci95_hi_s  distribution-free 95% confidence
//                      interval of that median (order statistics of the paired differences;
//                      min and max below 6 pairs): two modes differ when their intervals do not
//                      overlap
//       comm_s         the comm stream's time inside collective calls per step (rank 0;
//                      GradSync's timer: CUDA events, the host clock on the CPU backend)
//       calls          collective calls per step; batch: the global batch
//     CPU: each rank's device gets max(1, cores / k) math threads (--dpb_cpu_threads overrides);
//     with overlap the rank's communication thread competes with them for the cores, which is
//     part of what is measured: a CPU collective is CPU work, so overlap can hide it only where
//     cores are left over (fewer math threads), otherwise only its waiting.
#include <algorithm>
#include <cstdio>
#include <string>

#include "bench/bench.h"
#include "collectives/grad_sync.h"
#include "kernels/backends.h"
#include "src/core/check.h"
#include "src/core/stats.h"
#include "src/model/model.h"
#include "src/train/step.h"

namespace dpb::bench {
namespace {

constexpr float kLr = 0.01f;

struct OvMode {
  std::string name;
  GradSyncConfig cfg;
};

std::string mb_label(double mb) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%gMB", mb);
  return buf;
}

std::vector<OvMode> overlap_modes(double bucket_mb) {
  return {{"fused-after", {SyncMode::Fused, false, bucket_mb}},
          {"per-param-after", {SyncMode::PerParam, false, bucket_mb}},
          {"per-param-overlap", {SyncMode::PerParam, true, bucket_mb}},
          {"bucket" + mb_label(bucket_mb) + "-overlap", {SyncMode::Bucketed, true, bucket_mb}}};
}

struct Timers {  // one rank's: the whole step, and backward
  std::unique_ptr<RankTimer> step, bwd;
};

// One overlap benchmark's setup, kept across the framework's calls (BenchEnv::rig).
struct OvRig {  // destroyed in reverse: rank threads, timers, replicas (their comm threads), ranks
  std::unique_ptr<RankSet> ranks;
  std::vector<Replica> reps;
  std::vector<Timers> timers;
  std::unique_ptr<RankThreads> pool;
  std::vector<int> n;          // per rank: shard size
  std::vector<double> ts, tb;  // per rank: last step's time, last compute-only backward time
  int gb = 0;

  // One training step on rank r, made of the trainer's own step functions (src/train/step.h);
  // comm = false leaves out all gradient communication (the compute-only step).
  void step(int r, bool comm) {
    Replica& rep = reps[r];
    Timers& t = timers[r];
    ranks->group->barrier(r);  // all ranks start together, in both kinds of step
    t.step->start();
    step_forward(rep, n[r], 1.0f / float(gb));
    t.bwd->start();
    step_backward(rep, n[r], comm);
    t.bwd->stop();
    if (comm) step_sync_wait(rep);
    step_update(rep, kLr);
    t.step->stop();
    ts[r] = t.step->seconds();
    tb[r] = comm ? 0.0 : t.bwd->seconds();
  }
};

std::shared_ptr<OvRig> make_ov_rig(BenchEnv& env, const BackendEntry& b, const std::string& model,
                                   const GradSyncConfig& cfg, int k, int gb) {
  DPB_CHECK(gb >= k, "global batch " << gb << " is smaller than the rank count " << k);
  const HostBatch& data = env.batch(gb);
  auto g = std::make_shared<OvRig>();
  g->gb = gb;
  g->ts.assign(k, 0.0);
  g->tb.assign(k, 0.0);
  const int hw = int(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = env.cfg().run.threads > 0 ? env.cfg().run.threads : std::max(1, hw / k);
  auto devs = make_devices(b.name, k, threads);
  for (auto& d : devs) d->memory().set_capacity(env.cfg().run.device_mem);  // --dpb_device_mem
  g->ranks = std::make_unique<RankSet>(std::move(devs), "ring", AllReduceOptions{},
                                       env.cfg().run.link);  // no link: not paced
  adapt_barrier_spin(*g->ranks->group, cfg);
  ModelOptions mopts = env.cfg().run.model_opts;  // --dpb_mlp_layers, --dpb_mlp_hidden
  mopts.mlp_input = kPixels;                        // the batches are 28x28 images
  const std::vector<float> init = init_params(model_param_layout(model, mopts), 0);
  for (int r = 0; r < k; ++r) {
    Device& dev = (*g->ranks)[r];
    const int lo = int(chunk_begin(gb, k, r));
    g->n.push_back(int(chunk_size(gb, k, r)));
    g->reps.push_back(make_replica(dev, *g->ranks->group, model, mopts, g->n[r], cfg,
                                  *g->ranks->allreduce));
    if (r == 0) dev.upload(g->reps[0].w.get(), init.data(), init.size());
    load_batch(g->reps[r], data.images.data() + size_t(lo) * kPixels, data.labels.data() + lo,
               g->n[r]);
    g->timers.push_back({make_rank_timer(dev, TimedStream::Compute),
                         make_rank_timer(dev, TimedStream::Compute)});
  }
  OvRig* raw = g.get();
  g->pool = std::make_unique<RankThreads>(
      k, [raw](int r, const std::string& why) { raw->ranks->abort(r, why); });
  g->pool->run([raw](int r) {  // the trainer's broadcast, then a warm-up step (primitives, comm thread)
    broadcast_params(raw->reps[r], *raw->ranks->group);
    raw->step(r, true);
  });
  return g;
}

void bm_overlap(benchmark::State& st, BenchEnv& env, const std::string& name, const BackendEntry& b,
                const std::string& model, const GradSyncConfig& cfg, int k, int gb) {
  OvRig* g = nullptr;
  if (!guarded(st, [&] {
        g = &env.rig<OvRig>(name, [&] { return make_ov_rig(env, b, model, cfg, k, gb); });
        g->reps[0].sync->reset_times();
      })) {
    env.drop_rig();
    return;
  }
  const std::function<void(int)> compute_only = [g](int r) { g->step(r, false); };
  const std::function<void(int)> full = [g](int r) { g->step(r, true); };
  double total = 0, compute = 0, backward = 0;
  std::vector<double> diffs;  // per iteration: full step - its paired compute-only step
  bool full_first = false;
  for (auto _ : st) {  // steps are long: one hand-off per step costs nothing measurable
    // Pairs alternate their order (compute-only first, then full first, ...), so that a load
    // drifting over the run, and what one kind of step leaves in the caches for the next, falls
    // on both kinds alike.
    double c = 0, s = 0;
    for (int half = 0; half < 2; ++half) {
      const bool run_full = (half == 0) == full_first;
      if (!guarded(st, [&] { g->pool->run(run_full ? full : compute_only); })) break;
      const double t = *std::max_element(g->ts.begin(), g->ts.end());
      if (run_full) {
        s = t;
      } else {
        c = t;
        backward += *std::max_element(g->tb.begin(), g->tb.end());
      }
    }
    if (st.error_occurred()) break;
    full_first = !full_first;
    st.SetIterationTime(s);
    total += s;
    compute += c;
    diffs.push_back(s - c);
  }
  if (st.error_occurred()) {
    env.drop_rig();
    return;
  }
  const double iters = double(std::max<int64_t>(1, st.iterations()));
  const SyncTimes& times = g->reps[0].sync->times();
  st.counters["compute_s"] = compute / iters;
  st.counters["backward_s"] = backward / iters;
  st.counters["exposed_comm_s"] = (total - compute) / iters;
  if (!diffs.empty()) {  // robust to the odd step slowed by other processes
    const MedianCi m = median_ci95(diffs);
    st.counters["exposed_comm_median_s"] = m.median;
    st.counters["exposed_comm_ci95_lo_s"] = m.lo;
    st.counters["exposed_comm_ci95_hi_s"] = m.hi;
  }
  st.counters["comm_s"] = times.comm_s / iters;
  st.counters["calls"] = double(times.calls) / iters;
  st.counters["batch"] = gb;
  st.counters["bytes"] = double(g->reps[0].num_params() * sizeof(float));
}

}  // namespace

void register_overlap(BenchEnv& env, const BackendEntry& b) {
  for (const ModelEntry& me : models()) {
    const std::string model = me.name;
    const auto given = env.cfg().model_batch.find(model);
    const int gb = given != env.cfg().model_batch.end() ? given->second : me.bench_batch;
    for (const OvMode& m : overlap_modes(env.cfg().run.sync.bucket_mb)) {
      for (int k : env.cfg().ranks) {
        if (gb < k) continue;  // every rank needs an example
        const std::string name = bench_name("overlap", b, {model, m.name}, k);
        const std::string mdl = model;
        const GradSyncConfig cfg = m.cfg;
        benchmark::RegisterBenchmark(name.c_str(),
                                     [&env, name, &b, mdl, cfg, k, gb](benchmark::State& st) {
                                       bm_overlap(st, env, name, b, mdl, cfg, k, gb);
                                     })
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond);
      }
    }
  }
}

}  // namespace dpb::bench
