// allreduce_bench.cpp: the all-reduce, reduce-scatter and all-gather sweeps and the CPU
// memory-bandwidth bound.
//
//   allreduce/<backend>/<algorithm>/ranks:<k>[/shared]/bytes:<n>
//     One per algorithm of the table in collectives/registry.h that runs on the backend with k
//     ranks (the harness never names an algorithm). k persistent rank threads, each with its own device (CPU: 1 math thread) and n-byte buffer.
//     Per iteration every rank passes a device-ordered barrier, then times its own run(); the
//     iteration time is the slowest rank's (host clock on the CPU, CUDA events on the comm stream).
//     Counters (nccl-tests definitions): algbw_GBps = n / time / 1e9,
//     busbw_GBps = algbw * 2(k-1)/k; wrong = elements off the exact sum in a check run outside
//     the timed loop (once per benchmark, after the warm-up) on re-initialized buffers (rank r
//     holds (r+1)*((i%5)+1): small integers, exact in float); timed iterations run on zeros.
//     CPU only: traffic_GBps (model below), membw_GBps (the bound), bw_fraction = their ratio,
//     xcore_GBps (k > 1: the cross-core probe, BenchEnv::cross_core_gbps, just before the
//     benchmark: how fast a rank read its neighbour's freshly written 2 MiB then; on a VM it moves
//     with the host between invocations, and the all-reduce times with it).
//     sent_bytes: the bytes rank 0 sent in the check's call, measured by the group
//     (CommGroup::sent_bytes; nccl, mpi: their nominal count), beside sent_bytes_schedule, the
//     schedule's count for rank 0 (collectives/comm_volume.h): the two are equal.
//   reducescatter/<backend>/<algorithm>/ranks:<k>[/shared]/bytes:<n>
//   allgather/<backend>/<algorithm>/ranks:<k>[/shared]/bytes:<n>
//     The same for the tables of collectives/shard.h, n the whole buffer (nccl-tests' size for
//     both), busbw_GBps = algbw * (k-1)/k (nccl-tests' factor for both). wrong: reduce-scatter,
//     elements of each rank's shard off the exact sum; all-gather, elements off the owner's
//     (every rank starts with its pattern everywhere, so a shard not written is counted).
//     Traffic model: 3(k-1)n (reduce-scatter: reduces) and 2(k-1)n (all-gather: copies), the
//     all-reduce's two halves (registry.cpp; naive's reduce-scatter has none).
//   membw/<backend>/copy/threads:<k>[/shared]
//     k ranks (threads) each copy 64 MiB with Device::comm_copy (CPU: memcpy; CUDA: a
//     device-to-device copy on the comm stream, timed by its events); membw_GBps = bytes read +
//     written by all ranks / slowest rank's time: the copy bandwidth the all-reduces' busbw is
//     read against (nccl-tests' reference figure on one GPU).
//
// Memory-traffic model (bytes loaded + stored by the algorithm's loops, for n bytes per rank);
// each algorithm's factor is in its entry of collectives/registry.cpp (traffic_factor), and an
// algorithm without a model (traffic_factor 0, e.g. nccl) gets no traffic counters:
//   ring:  reduce-scatter, k-1 steps, each rank loads its chunk and the left neighbour's and
//          stores its chunk: 3n/k; all-gather, k-1 steps, load the neighbour's chunk, store own:
//          2n/k. All ranks together: 5(k-1)n.
//   naive: rank 0 adds each of the k-1 peers' buffers into its own (3(k-1)n, on ONE thread),
//          then each peer copies the sum from rank 0 (2n each, in parallel): 5(k-1)n.
//   The ring pipelines each chunk in pieces (collectives/ring.cpp): the same bytes, but what the
//   left neighbour stored a tick earlier is often still in cache when it is loaded.
//   Not modelled: write-allocate reads on stores (memcpy avoids them with non-temporal stores
//   only for large copies) and cache hits. Messages whose working set fits in the caches can
//   exceed the DRAM bound (bw_fraction > 1 there means "cache-resident", not an error). k = 1:
//   both algorithms return at once; traffic and bw_fraction are 0.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "bench/bench.h"
#include "collectives/registry.h"
#include "src/core/check.h"
#include "src/model/model.h"

namespace dpb::bench {
namespace {

// rank r, element i: (r+1)*((i%5)+1); the sum over k ranks is ((i%5)+1)*k(k+1)/2.
void fill_pattern(Device& dev, float* buf, size_t n, int r, std::vector<float>& host) {
  host.resize(n);
  for (size_t i = 0; i < n; ++i) host[i] = float((r + 1) * int(i % 5 + 1));
  dev.upload(buf, host.data(), n);
}

}  // namespace

long count_wrong_host(Collective op, const float* got, size_t n, int k, int r) {
  long wrong = 0;
  const int tri = k * (k + 1) / 2;
  size_t lo = 0, hi = n;  // what op defines on rank r
  if (op == Collective::ReduceScatter) lo = chunk_begin(n, k, r), hi = lo + chunk_size(n, k, r);
  int owner = 0;
  for (size_t i = lo; i < hi; ++i) {
    while (owner + 1 < k && i >= chunk_begin(n, k, owner + 1)) ++owner;
    const int want = op == Collective::AllGather ? owner + 1 : tri;
    wrong += got[i] != float(int(i % 5 + 1) * want);
  }
  return wrong;
}

namespace {

long count_wrong(Collective op, Device& dev, const float* buf, size_t n, int k, int r,
                 std::vector<float>& host) {
  host.resize(n);
  dev.download(host.data(), buf, n);
  return count_wrong_host(op, host.data(), n, k, r);
}

// Everything one all-reduce (reduce-scatter, all-gather) benchmark needs; kept across the framework's calls (BenchEnv::rig).
// Declaration order matters: the rank threads are joined first, the devices released last.
struct ArRig {
  Collective op = Collective::AllReduce;
  std::unique_ptr<DeviceSet> ds;
  std::unique_ptr<AllReduce> ar;
  std::vector<Buffer> bufs;
  std::vector<std::unique_ptr<RankTimer>> timers;
  RigTrace trace;  // --dpb_trace
  CommJobInfo span_info;  // what each traced call is
  std::unique_ptr<RankThreads> pool;
  size_t n = 0;
  double bound = 0;  // CPU: membw/cpu/copy with k threads, GB/s
  double xcore = 0;  // CPU, k > 1: the cross-core probe just before this benchmark, GB/s
  long wrong = -1;   // -1: not checked yet
  uint64_t sent = 0;  // bytes rank 0 sent in the check's call (CommGroup::sent_bytes)
  std::vector<size_t> base;  // each rank's bytes in use before the algorithm was made

  // One timed all-reduce on rank r; returns this rank's seconds.
  double one(int r) {
    ds->group->barrier(r);  // aligned start; on CUDA also orders the comm streams
    RankTimeline* tl = trace.tl(r);  // --dpb_trace: the span encloses the timed interval
    RankTimeline::OpenComm span;
    if (tl) span = tl->begin_comm(trace.number, trace.steps[size_t(r)]++);
    timers[r]->start();
    ar->run(r, bufs[r].get(), n);
    timers[r]->stop();
    if (tl) tl->end_comm(span, span_info);
    return timers[r]->seconds();
  }

  // Re-initializes every buffer to the pattern, runs one all-reduce, counts wrong elements, then
  // zeroes the buffers again (zeros stay zeros while the timed iterations keep summing).
  long check() {
    const int k = ds->size();
    std::vector<float> host;
    for (int r = 0; r < k; ++r) fill_pattern((*ds)[r], bufs[r].get(), n, r, host);
    const uint64_t sent0 = ds->group->sent_bytes(0);
    pool->run([&](int r) {
      ar->run(r, bufs[r].get(), n);
      (*ds)[r].comm_synchronize();
    });
    sent = ds->group->sent_bytes(0) - sent0;
    long w = 0;
    for (int r = 0; r < k; ++r) w += count_wrong(op, (*ds)[r], bufs[r].get(), n, k, r, host);
    for (int r = 0; r < k; ++r) {
      (*ds)[r].fill(bufs[r].get(), 0.0f, n);
      (*ds)[r].synchronize();  // CUDA: fill is on the compute stream, the all-reduce on comm
    }
    return w;
  }
};

std::shared_ptr<ArRig> make_ar_rig(BenchEnv& env, const BackendEntry& b, Collective op,
                                   const std::string& alg, int k, size_t bytes) {
  auto g = std::make_shared<ArRig>();
  g->op = op;
  g->n = bytes / sizeof(float);
  if (b.kind == BackendKind::Cpu && k > 1) {  // before any timing
    g->bound = env.membw_bound_gbps(k);
    g->xcore = env.cross_core_gbps(k);
  }
  g->ds = std::make_unique<DeviceSet>(b, k, 1, env.cfg().run.link, env.cfg().run.device_mem);
  for (int r = 0; r < k; ++r) {
    Device& dev = (*g->ds)[r];
    g->bufs.emplace_back(dev, g->n, MemCategory::Gradients, "all-reduce buffer");
    dev.fill(g->bufs[r].get(), 0.0f, g->n);
    dev.synchronize();  // CUDA: fill is on the compute stream, the all-reduce on comm
    g->timers.push_back(make_rank_timer(dev, TimedStream::Comm));
  }
  g->base = g->ds->in_use();  // what the algorithm allocates from here on is its own
  g->ar = make_collective(op, alg, *g->ds->group, AllReduceOptions{env.cfg().run.tune_file});
  ArRig* raw = g.get();
  g->pool = std::make_unique<RankThreads>(
      k, [raw](int r, const std::string& why) { raw->ds->group->abort(r, why); });
  g->pool->run([raw](int r) { raw->one(r); });  // warm-up: first touch, staging, NCCL's first call
  return g;
}

void bm_allreduce(benchmark::State& st, BenchEnv& env, const std::string& name, const BackendEntry& b,
                  Collective op, const std::string& alg, int k, size_t bytes) {
  ArRig* g = nullptr;
  if (!guarded(st, [&] {
        g = &env.rig<ArRig>(name, [&] { return make_ar_rig(env, b, op, alg, k, bytes); });
        if (g->wrong < 0) g->wrong = g->check();  // once per benchmark, outside any timing
        if (g->trace.start(env, name, *g->ds))
          g->span_info = {collective_name(op), g->ar->choice(g->n), uint64_t(bytes), -1};
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
  const double mean = st.iterations() > 0 ? total / double(st.iterations()) : 0.0;
  const double algbw = mean > 0 ? double(bytes) / mean / 1e9 : 0.0;
  st.counters["algbw_GBps"] = algbw;
  st.counters["busbw_GBps"] = algbw * collective_bus_factor(op, k);
  st.counters["wrong"] = double(g->wrong);
  st.counters["bytes"] = double(bytes);
  st.counters["alloc_bytes"] = double(g->ds->alloc_bytes(g->base));
  const std::vector<int> cpus = g->pool->cpus();  // where each rank ran (issue 25 item 6)
  for (int r = 0; r < k; ++r) st.counters["cpu_rank" + std::to_string(r)] = double(cpus[size_t(r)]);
  st.counters["pinned"] = g->pool->placement()[0].empty() ? 0.0 : 1.0;
  st.counters["sent_bytes"] = double(g->sent);
  st.counters["sent_bytes_schedule"] =
      double(schedule_sent_bytes(op, alg, g->n, k, 0, b.kind, env.cfg().run.tune_file,
                                 g->ds->group->nodes(), env.cfg().run.link));  // hier: its split
  // The algorithm that ran (auto picks one per size): named in the label with auto's rules; its
  // traffic model is the one used.
  const std::string ran = g->ar->choice(g->n);
  if (g->ar->describe() != alg) st.SetLabel("ran " + ran + " | " + g->ar->describe());
  const AllReduceEntry& entry = find_collective(op, ran);
  if (const LinkSpec& link = env.cfg().run.link; link.enabled() && entry.link_cost) {
    // The alpha-beta check.
    const double model = op == Collective::AllReduce
                             ? allreduce_link_cost(ran, double(bytes), k, link)
                             : entry.link_cost(LinkCostQuery{double(bytes), k, link, BackendKind::Cpu, ""});
    st.counters["link_model_s"] = model;
    st.counters["link_ratio"] = model > 0 ? mean / model : 0.0;  // measured / model
  }
  const double factor = entry.traffic_factor;
  if (b.kind == BackendKind::Cpu && factor > 0) {
    const double traffic = mean > 0 ? factor * (k - 1) * double(bytes) / mean / 1e9 : 0.0;
    st.counters["traffic_GBps"] = traffic;
    st.counters["membw_GBps"] = g->bound;
    st.counters["bw_fraction"] = g->bound > 0 ? traffic / g->bound : 0.0;
  }
  if (g->xcore > 0) st.counters["xcore_GBps"] = g->xcore;  // measured for every CPU k > 1 (hier too)
}

void bm_membw(benchmark::State& st, const BackendEntry& b, int k) {
  std::unique_ptr<CopyRig> rig;
  if (!guarded(st, [&] {
        rig = std::make_unique<CopyRig>(b, k, kMembwBytes);
        rig->run_once();  // warm-up
      }))
    return;
  double total = 0;
  for (auto _ : st) {
    double s = 0;
    if (!guarded(st, [&] { s = rig->run_once(); })) break;
    st.SetIterationTime(s);
    total += s;
  }
  if (st.error_occurred()) return;
  const double mean = st.iterations() > 0 ? total / double(st.iterations()) : 0.0;
  st.counters["membw_GBps"] = mean > 0 ? rig->gbps(mean) : 0.0;
  st.counters["bytes"] = double(kMembwBytes);
}

// Largest message for k ranks: --dpb_max_bytes, k * n <= --dpb_max_total_bytes, and on the CPU
// the buffers plus naive's staging (about 2k * n) within half of the available memory.
size_t cap_for(const BenchConfig& cfg, const BackendEntry& b, int k) {
  size_t cap = std::min(cfg.max_bytes, cfg.max_total_bytes / size_t(k));
  if (b.kind == BackendKind::Cpu) {
    const double avail = double(sysconf(_SC_AVPHYS_PAGES)) * double(sysconf(_SC_PAGESIZE));
    if (avail > 0) cap = std::min(cap, size_t(avail / 2 / (2.0 * k)));
  }
  return cap;
}

}  // namespace

void register_membw(BenchEnv& env, const BackendEntry& b) {
  for (int k : env.cfg().ranks) {
    const std::string name = bench_name("membw", b, {"copy"}, k);
    benchmark::RegisterBenchmark(name.c_str(), [&b, k](benchmark::State& st) { bm_membw(st, b, k); })
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
}

void register_allreduce(BenchEnv& env, const BackendEntry& b) {
  for (Collective op : kCollectives) register_collective(env, b, op);
}

void register_collective(BenchEnv& env, const BackendEntry& b, Collective op) {
  const BackendKind kind = b.kind;
  const std::string family = collective_family(op);
  for (const AllReduceEntry& e : collective_algorithms(op)) {
    const std::string alg = e.name;
    if (!e.runs_on.empty() &&
        std::find(e.runs_on.begin(), e.runs_on.end(), kind) == e.runs_on.end())
      continue;  // e.g. nccl on the CPU: not this backend's algorithm
    for (int k : env.cfg().ranks) {
      // Configurations that cannot run, or would time nothing, are left out with the reason.
      std::string why = allreduce_refusal(e, k, kind);
      if (why.empty() && k == 1)
        why = std::string("one rank: ") + collective_name(op) +
              " has nothing to communicate (it would time an empty call)";
      const size_t cap = cap_for(env.cfg(), b, k);
      if (!why.empty()) {
        env.not_registered(bench_name(family, b, {alg}, k), cap, why);
        continue;
      }
      for (size_t bytes : allreduce_sizes(cap)) {
        const std::string name = bench_name(family, b, {alg}, k, bytes);
        benchmark::RegisterBenchmark(name.c_str(),
                                     [&env, name, &b, op, alg, k, bytes](benchmark::State& st) {
                                       bm_allreduce(st, env, name, b, op, alg, k, bytes);
                                     })
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
}

}  // namespace dpb::bench
