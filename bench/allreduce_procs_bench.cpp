// allreduce_procs_bench.cpp: the all-reduce sweep with one rank per process (dpbench-micro under
// mpirun or srun; bench/main.cpp detects the launcher).
//
//   mpirun -np 2 build/dpbench-micro --benchmark_filter='allreduce/cpu/(ring|mpi)/'
//   allreduce/<backend>/<algorithm>/procs:<K>/bytes:<n>
//     One per algorithm of the table (collectives/registry.h) that runs across processes on the
//     backend, mpi (MPI_Allreduce) included. Every process runs the same benchmarks in the same
//     order. Per iteration: a barrier, each rank times its own run(), the ranks' times are
//     all-gathered (outside the timed part) and the iteration time is the slowest rank's, the
//     same on every process (so Google Benchmark sizes the same iteration counts everywhere).
//     Counters: algbw_GBps, busbw_GBps (nccl-tests' definitions, as the thread sweep),
//     rank_min_us / rank_avg_us / rank_max_us: each rank's mean time, min / average / max over
//     the ranks (nccl-tests -a); wrong: elements off the exact sum, over all ranks, in a check
//     outside the timed loop (rank r holds (r+1)*((i%5)+1)); sent_bytes, sent_bytes_schedule:
//     rank 0's bytes sent in that call, measured and the schedule's (allreduce_bench.cpp). Only
//     rank 0 reports (bench/main.cpp). hier runs on the processes' nodes: emulated with
//     --dpb_nodes / DPB_NODES (mpirun -np 4 with DPB_NODES=2: 2 x 2), else the real ones.
//   reducescatter/<backend>/<algorithm>/procs:<K>/bytes:<n>, allgather/...
//     The same for the tables of collectives/shard.h (mpi: MPI_Reduce_scatter_block,
//     MPI_Allgather), with their bus factor (k-1)/k and wrong as in allreduce_bench.cpp.
#include <algorithm>
#include <cstdio>
#include <string>

#include "bench/bench.h"
#include "collectives/mpi/mpi_transport.h"
#include "collectives/registry.h"
#include "kernels/backends.h"
#include "src/model/model.h"

namespace dpb::bench {
namespace {

// This process's rank: device, group over MPI, buffer, timer.
struct ProcRig {
  Collective op = Collective::AllReduce;
  std::unique_ptr<Device> dev;
  std::unique_ptr<CommGroup> group;
  std::unique_ptr<AllReduce> ar;
  Buffer buf;
  std::unique_ptr<RankTimer> timer;
  int rank = 0, k = 1;
  size_t n = 0;
  long wrong = -1;
  uint64_t sent = 0;  // bytes this rank sent in the check's call (CommGroup::sent_bytes)
  size_t base = 0;  // bytes in use on this rank before the algorithm was made
  double rank_sum = 0;  // this rank's own times over the timed iterations
  long iters = 0;

  double one() {  // one timed all-reduce; returns the slowest rank's seconds
    group->barrier(rank);
    timer->start();
    ar->run(rank, buf.get(), n);
    timer->stop();
    const double mine = timer->seconds();
    rank_sum += mine;
    ++iters;
    std::vector<double> all(static_cast<size_t>(k));
    group->allgather_host(rank, &mine, all.data(), sizeof mine);
    return *std::max_element(all.begin(), all.end());
  }

  long check() {  // the pattern's exact result on every rank; wrong elements over all ranks
    std::vector<float> host(n);
    for (size_t i = 0; i < n; ++i) host[i] = float((rank + 1) * int(i % 5 + 1));
    dev->upload(buf.get(), host.data(), n);
    const uint64_t sent0 = group->sent_bytes(rank);
    ar->run(rank, buf.get(), n);
    dev->comm_synchronize();
    sent = group->sent_bytes(rank) - sent0;
    dev->download(host.data(), buf.get(), n);
    const long w = count_wrong_host(op, host.data(), n, k, rank);
    std::vector<long> all(static_cast<size_t>(k));
    group->allgather_host(rank, &w, all.data(), sizeof w);
    dev->fill(buf.get(), 0.0f, n);
    dev->synchronize();
    long total = 0;
    for (long x : all) total += x;
    return total;
  }
};

std::shared_ptr<ProcRig> make_proc_rig(const BenchConfig& cfg, const BackendEntry& b, Collective op,
                                       const std::string& alg, size_t bytes) {
  auto g = std::make_shared<ProcRig>();
  g->op = op;
  g->rank = cfg.proc_rank;
  g->k = cfg.procs;
  g->n = bytes / sizeof(float);
  g->dev = make_device(b.name, g->rank, DeviceOptions{1, false, cfg.local_rank});
  g->dev->memory().set_capacity(cfg.run.device_mem);  // --dpb_device_mem
  g->group = std::make_unique<CommGroup>(make_mpi_transport(*g->dev, g->rank, g->k, cfg.run.link));
  // Our schedules (the transport's steps) run on the group's memory (shared by the node's
  // processes: the direct path); a library's own collective (MPI_Allreduce, not link_paced) on
  // ordinary memory, as a user's gradients are.
  g->buf = !find_collective(op, alg).link_paced ? Buffer(*g->dev, g->n, MemCategory::Comm, "all-reduce buffer")
                                            : g->group->alloc(g->rank, g->n, MemCategory::Comm,
                                                              "all-reduce buffer");
  g->dev->fill(g->buf.get(), 0.0f, g->n);
  g->dev->synchronize();
  g->base = g->dev->memory().current().total();  // what the algorithm allocates from here on
  g->ar = make_collective(op, alg, *g->group, AllReduceOptions{cfg.run.tune_file});
  g->timer = make_rank_timer(*g->dev, TimedStream::Comm);
  g->one();  // warm-up: first touch, staging buffers, MPI's connections
  return g;
}

void bm_allreduce_procs(benchmark::State& st, BenchEnv& env, const std::string& name, const BackendEntry& b,
                        Collective op, const std::string& alg, size_t bytes) {
  ProcRig* g = nullptr;
  // An error here (or in a run) ends the job: another process may be waiting in a collective.
  try {
    g = &env.rig<ProcRig>(name, [&] { return make_proc_rig(env.cfg(), b, op, alg, bytes); });
    if (g->wrong < 0) g->wrong = g->check();
    g->rank_sum = 0;
    g->iters = 0;
    double total = 0;
    for (auto _ : st) {
      const double t = g->one();
      st.SetIterationTime(t);
      total += t;
    }
    const int k = g->k;
    const double mine = g->iters > 0 ? g->rank_sum / double(g->iters) : 0.0;
    std::vector<double> all(static_cast<size_t>(k));
    g->group->allgather_host(g->rank, &mine, all.data(), sizeof mine);
    double lo = all[0], hi = all[0], sum = 0;
    for (double x : all) { lo = std::min(lo, x); hi = std::max(hi, x); sum += x; }
    const size_t peak = g->dev->memory().peak().total();
    const size_t my_alloc = peak - std::min(peak, g->base);
    std::vector<size_t> allocs(static_cast<size_t>(k));
    g->group->allgather_host(g->rank, &my_alloc, allocs.data(), sizeof my_alloc);
    st.counters["alloc_bytes"] = double(*std::max_element(allocs.begin(), allocs.end()));
    const double mean = st.iterations() > 0 ? total / double(st.iterations()) : 0.0;
    const double algbw = mean > 0 ? double(bytes) / mean / 1e9 : 0.0;
    st.counters["algbw_GBps"] = algbw;
    st.counters["busbw_GBps"] = algbw * collective_bus_factor(op, k);
    st.counters["rank_min_us"] = lo * 1e6;
    st.counters["rank_avg_us"] = sum / k * 1e6;
    st.counters["rank_max_us"] = hi * 1e6;
    st.counters["wrong"] = double(g->wrong);
    st.counters["bytes"] = double(bytes);
    st.counters["sent_bytes"] = double(g->sent);
    st.counters["sent_bytes_schedule"] = double(
        schedule_sent_bytes(op, alg, g->n, k, g->rank, b.kind, env.cfg().run.tune_file,
                            g->group->nodes()));  // hier: its node split
    if (g->ar->describe() != alg) st.SetLabel("ran " + g->ar->choice(g->n) + " | " + g->ar->describe());
  } catch (const std::exception& e) {
    mpi_abort_job(env.cfg().proc_rank, name + ": " + e.what());
  }
}

}  // namespace

void register_allreduce_procs(BenchEnv& env, const BackendEntry& b) {
  for (Collective op : kCollectives) register_collective_procs(env, b, op);
}

void register_collective_procs(BenchEnv& env, const BackendEntry& b, Collective op) {
  const BenchConfig& cfg = env.cfg();
  const int k = cfg.procs;
  const BackendKind kind = b.kind;
  const std::string family = collective_family(op);
  for (const AllReduceEntry& e : collective_algorithms(op)) {
    const std::string alg = e.name;
    std::string why = allreduce_refusal(e, k, kind, Launcher::Mpi);
    if (why.empty() && k == 1)
      why = std::string("one process: ") + collective_name(op) + " has nothing to communicate";
    if (why.empty() && cfg.run.link.enabled() && !e.link_paced)
      why = "a library's own collective, not paced by the emulated link (--dpb_link_gbps)";
    const size_t cap = std::min(cfg.max_bytes, cfg.max_total_bytes / size_t(k));
    if (!why.empty()) {
      env.not_registered(family + "/" + b.name + "/" + alg + "/procs:" + std::to_string(k), cap,
                         why);
      continue;
    }
    for (size_t bytes : allreduce_sizes(cap)) {
      std::string name = family + "/" + b.name + "/" + alg + "/procs:" +
                         std::to_string(k) + "/bytes:" + std::to_string(bytes);
      benchmark::RegisterBenchmark(name.c_str(), [&env, name, &b, op, alg, bytes](benchmark::State& st) {
        bm_allreduce_procs(st, env, name, b, op, alg, bytes);
      })
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }
}

}  // namespace dpb::bench
