// gradsync_bench.cpp: gradient-sync granularity on the real parameter lists.
//
//   gradsync/<backend>/<model>/<mode>/ranks:<k>[/shared]
//     model: lenet (8 tensors, 129,068 floats) | resnet18 (11,175,818 floats).
//     mode:  per-param | fused | bucket1MB | bucket5MB | bucket25MB (collectives/grad_sync.h;
//            MB = 1e6 bytes; buckets fill in reverse parameter order, as backward produces them).
//     One GradSync per rank, overlap off, ring all-reduce (on both backends, so the numbers
//     compare), over the real flat gradient buffer. An iteration is one sync: every parameter
//     is marked ready in reverse order, then finish() runs all units on the rank's thread; the
//     time is the slowest rank's (CUDA: events on the compute stream, which finish() orders
//     after the communication).
//     Counters: calls (collective calls per sync), bytes (gradient bytes per rank),
//     algbw_GBps / busbw_GBps over those bytes, wrong (exact-sum check, once per benchmark,
//     outside the timed loop; timed syncs run on zeros).
#include <algorithm>
#include <string>

#include "bench/bench.h"
#include "collectives/grad_sync.h"
#include "src/model/model.h"

namespace dpb::bench {
namespace {

struct GsMode {
  std::string name;
  GradSyncConfig cfg;
};

// Every mode of the table (grad_sync.h); the bucketed one at three caps, named bucket<cap>MB.
std::vector<GsMode> gradsync_modes() {
  std::vector<GsMode> m;
  for (const SyncModeEntry& e : sync_modes()) {
    if (e.mode != SyncMode::Bucketed) {
      m.push_back({e.name, {e.mode, false, 25.0}});
      continue;
    }
    for (double mb : {1.0, 5.0, 25.0})
      m.push_back({"bucket" + std::to_string(int(mb)) + "MB", {e.mode, false, mb}});
  }
  return m;
}

// One gradsync benchmark's setup, kept across the framework's calls (BenchEnv::rig).
struct GsRig {  // declaration order: rank threads joined first, devices released last
  std::unique_ptr<DeviceSet> ds;
  std::unique_ptr<AllReduce> ar;
  std::vector<Buffer> grads;
  RigTrace trace;  // --dpb_trace: each sync's all-reduce calls; outlives the syncs that record
  std::vector<std::unique_ptr<GradSync>> syncs;
  std::vector<std::unique_ptr<RankTimer>> timers;
  std::unique_ptr<RankThreads> pool;
  size_t P = 0;
  int nparams = 0;
  long wrong = -1;  // -1: not checked yet
  std::vector<size_t> base;  // each rank's bytes in use before the all-reduce and syncs

  void sync_once(int r) {  // every parameter ready in backward's order, then finish()
    syncs[r]->begin_step();
    for (int p = nparams - 1; p >= 0; --p) syncs[r]->grad_ready(p);
    syncs[r]->finish();
  }
  double one(int r) {
    ds->group->barrier(r);  // aligned start
    if (RankTimeline* tl = trace.tl(r)) tl->set_step(trace.number, trace.steps[size_t(r)]++);
    timers[r]->start();
    sync_once(r);
    timers[r]->stop();
    return timers[r]->seconds();
  }
  // Rank r holds (r+1)*((i%5)+1); the sum is ((i%5)+1)*k(k+1)/2, exact. Zeroes the buffers after.
  long check() {
    const int k = ds->size();
    std::vector<float> host(P);
    for (int r = 0; r < k; ++r) {
      for (size_t i = 0; i < P; ++i) host[i] = float((r + 1) * int(i % 5 + 1));
      (*ds)[r].upload(grads[r].get(), host.data(), P);
    }
    pool->run([&](int r) {
      sync_once(r);
      (*ds)[r].synchronize();
    });
    const int tri = k * (k + 1) / 2;
    long w = 0;
    for (int r = 0; r < k; ++r) {
      (*ds)[r].download(host.data(), grads[r].get(), P);
      for (size_t i = 0; i < P; ++i) w += host[i] != float(int(i % 5 + 1) * tri);
      (*ds)[r].fill(grads[r].get(), 0.0f, P);
      (*ds)[r].synchronize();
    }
    for (auto& s : syncs) s->reset_times();
    return w;
  }
};

std::shared_ptr<GsRig> make_gs_rig(const BackendEntry& b, const std::string& model,
                                   const ModelOptions& mopts, const GradSyncConfig& cfg, int k,
                                   size_t device_mem) {
  auto g = std::make_shared<GsRig>();
  std::vector<size_t> sizes;
  for (const auto& p : model_param_layout(model, mopts)) sizes.push_back(p.size);
  for (size_t s : sizes) g->P += s;
  g->nparams = int(sizes.size());
  g->ds = std::make_unique<DeviceSet>(b, k, 1, LinkSpec{}, device_mem);
  for (int r = 0; r < k; ++r) {
    Device& dev = (*g->ds)[r];
    g->grads.emplace_back(dev, g->P, MemCategory::Gradients, "gradients");
    dev.fill(g->grads[r].get(), 0.0f, g->P);
    dev.synchronize();  // CUDA: fill is on the compute stream
  }
  g->base = g->ds->in_use();  // what the all-reduce and the syncs allocate from here on
  g->ar = make_allreduce("ring", *g->ds->group);
  for (int r = 0; r < k; ++r) {
    Device& dev = (*g->ds)[r];
    g->syncs.push_back(std::make_unique<GradSync>(cfg, sizes, *g->ar, dev, r, g->grads[r].get()));
    g->timers.push_back(make_rank_timer(dev, TimedStream::Compute));
  }
  GsRig* raw = g.get();
  g->pool = std::make_unique<RankThreads>(
      k, [raw](int r, const std::string& why) { raw->ds->group->abort(r, why); });
  g->pool->run([raw](int r) { raw->one(r); });  // warm-up
  return g;
}

void bm_gradsync(benchmark::State& st, BenchEnv& env, const std::string& name, const BackendEntry& b,
                 const std::string& model, const GradSyncConfig& cfg, int k) {
  GsRig* g = nullptr;
  if (!guarded(st, [&] {
        g = &env.rig<GsRig>(name, [&] {
          return make_gs_rig(b, model, env.cfg().run.model_opts, cfg, k, env.cfg().run.device_mem);
        });
        if (g->wrong < 0) g->wrong = g->check();  // once per benchmark, outside any timing
        for (auto& s : g->syncs) s->reset_times();
        if (g->trace.start(env, name, *g->ds))
          for (int r = 0; r < k; ++r) g->syncs[size_t(r)]->set_timeline(g->trace.tl(r));
      })) {
    env.drop_rig();
    return;
  }
  const double total = run_timed_loop(st, *g->pool, [g](int r) { return g->one(r); });
  if (st.error_occurred() ||
      !guarded(st, [&] { g->trace.collect(env, *g->ds, *g->pool); })) {
    env.drop_rig();
    return;
  }
  const double iters = double(std::max<int64_t>(1, st.iterations()));
  const double mean = total / iters;
  const double bytes = double(g->P * sizeof(float));
  const double algbw = mean > 0 ? bytes / mean / 1e9 : 0.0;
  st.counters["calls"] = double(g->syncs[0]->times().calls) / iters;
  st.counters["bytes"] = bytes;
  st.counters["alloc_bytes"] = double(g->ds->alloc_bytes(g->base));
  st.counters["algbw_GBps"] = algbw;
  st.counters["busbw_GBps"] = algbw * 2.0 * (k - 1) / k;
  st.counters["wrong"] = double(g->wrong);
}

}  // namespace

void register_gradsync(BenchEnv& env, const BackendEntry& b) {
  for (const ModelEntry& model_entry : models()) {
    const std::string& model = model_entry.name;
    for (const GsMode& m : gradsync_modes()) {
      for (int k : env.cfg().ranks) {
        const std::string name = bench_name("gradsync", b, {model, m.name}, k);
        const std::string mdl = model;  // copied into the benchmark's closure
        const GradSyncConfig cfg = m.cfg;
        benchmark::RegisterBenchmark(name.c_str(),
                                     [&env, name, &b, mdl, cfg, k](benchmark::State& st) {
                                       bm_gradsync(st, env, name, b, mdl, cfg, k);
                                     })
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
}

}  // namespace dpb::bench
