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
//     algbw_GBps / busbw_GBps over those bytes, wrong (exact-sum check after the timed loop).
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

std::vector<GsMode> gradsync_modes() {
  std::vector<GsMode> m;
  m.push_back({"per-param", {SyncMode::PerParam, false, 25.0}});
  m.push_back({"fused", {SyncMode::Fused, false, 25.0}});
  for (double mb : {1.0, 5.0, 25.0})
    m.push_back({"bucket" + std::to_string(int(mb)) + "MB", {SyncMode::Bucketed, false, mb}});
  return m;
}

void bm_gradsync(benchmark::State& st, Backend b, const std::string& model, GradSyncConfig cfg,
                 int k) {
  std::vector<size_t> sizes;
  for (const auto& p : model_param_layout(model)) sizes.push_back(p.size);
  size_t P = 0;
  for (size_t s : sizes) P += s;
  const int nparams = int(sizes.size());

  std::unique_ptr<DeviceSet> ds;
  std::unique_ptr<AllReduce> ar;
  std::vector<Buffer> grads;
  std::vector<std::unique_ptr<GradSync>> syncs;
  std::vector<std::unique_ptr<RankTimer>> timers;
  std::unique_ptr<RankThreads> pool;  // last: joined first
  auto sync_once = [&](int r) {
    syncs[r]->begin_step();
    for (int p = nparams - 1; p >= 0; --p) syncs[r]->grad_ready(p);
    syncs[r]->finish();
  };
  auto one = [&](int r) {
    ds->group->barrier(r);  // aligned start
    timers[r]->start();
    sync_once(r);
    timers[r]->stop();
    return timers[r]->seconds();
  };
  if (!guarded(st, [&] {
        ds = std::make_unique<DeviceSet>(b, k, 1);
        ar = make_allreduce("ring", *ds->group);
        for (int r = 0; r < k; ++r) {
          grads.emplace_back((*ds)[r], P, "gradients");
          (*ds)[r].fill(grads[r].get(), 0.0f, P);
          syncs.push_back(std::make_unique<GradSync>(cfg, sizes, *ar, (*ds)[r], r, grads[r].get()));
          timers.push_back(make_rank_timer((*ds)[r], TimedStream::Compute));
        }
        pool = std::make_unique<RankThreads>(
            k, [&](int r, const std::string& why) { ds->group->abort(r, why); });
        pool->run([&](int r) { one(r); });  // warm-up
        for (auto& s : syncs) s->reset_times();
      }))
    return;

  const double total = run_timed_loop(st, *pool, one);
  if (st.error_occurred()) return;
  const double iters = double(std::max<int64_t>(1, st.iterations()));
  const double calls = double(syncs[0]->times().calls) / iters;

  long wrong = 0;  // rank r holds (r+1)*((i%5)+1); the sum is ((i%5)+1)*k(k+1)/2, exact
  if (!guarded(st, [&] {
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
        for (int r = 0; r < k; ++r) {
          (*ds)[r].download(host.data(), grads[r].get(), P);
          for (size_t i = 0; i < P; ++i) wrong += host[i] != float(int(i % 5 + 1) * tri);
        }
      }))
    return;

  const double mean = total / iters;
  const double bytes = double(P * sizeof(float));
  const double algbw = mean > 0 ? bytes / mean / 1e9 : 0.0;
  st.counters["calls"] = calls;
  st.counters["bytes"] = bytes;
  st.counters["algbw_GBps"] = algbw;
  st.counters["busbw_GBps"] = algbw * 2.0 * (k - 1) / k;
  st.counters["wrong"] = double(wrong);
}

}  // namespace

void register_gradsync(BenchEnv& env, Backend b) {
  for (const char* model : {"lenet", "resnet18"}) {
    for (const GsMode& m : gradsync_modes()) {
      for (int k : env.cfg().ranks) {
        const std::string name = std::string("gradsync/") + backend_name(b) + "/" + model + "/" +
                                 m.name + "/" + ranks_label(b, k);
        const std::string mdl = model;
        const GradSyncConfig cfg = m.cfg;
        benchmark::RegisterBenchmark(name.c_str(),
                                     [b, mdl, cfg, k](benchmark::State& st) {
                                       bm_gradsync(st, b, mdl, cfg, k);
                                     })
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
}

}  // namespace dpb::bench
