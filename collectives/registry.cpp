// registry.cpp: the all-reduce, reduce-scatter and all-gather algorithm tables (see registry.h).
// One entry per algorithm and collective.
#include "collectives/registry.h"

#include "src/core/check.h"
#include "src/core/registry.h"

namespace dpb {

std::unique_ptr<AllReduce> make_direct_allreduce(CommGroup& group);  // direct.cpp
std::unique_ptr<AllReduce> make_rhd_allreduce(CommGroup& group);     // rhd.cpp
std::string rhd_refuse_ranks(int k, int node_ranks);                  // rhd.cpp
std::unique_ptr<AllReduce> make_auto_allreduce(CommGroup& g, const AllReduceOptions& o);  // auto.cpp
std::unique_ptr<AllReduce> make_mpi_allreduce(CommGroup& g);  // mpi/mpi_allreduce.cpp
// Each algorithm's alpha-beta cost on an emulated link, in its own file (link.h, LinkCostQuery).
double naive_link_cost(const LinkCostQuery& q);   // naive.cpp
double ring_link_cost(const LinkCostQuery& q);    // ring.cpp
double direct_link_cost(const LinkCostQuery& q);  // direct.cpp
double rhd_link_cost(const LinkCostQuery& q);     // rhd.cpp
double auto_link_cost(const LinkCostQuery& q);    // auto.cpp: its tuning table's pick
double naive_reducescatter_link_cost(const LinkCostQuery& q);  // naive.cpp
double naive_allgather_link_cost(const LinkCostQuery& q);      // naive.cpp
double ring_half_link_cost(const LinkCostQuery& q);            // ring.cpp (direct's too)
double rhd_half_link_cost(const LinkCostQuery& q);             // rhd.cpp
std::string rhd_reducescatter_refuse_ranks(int k, int node_ranks);  // rhd.cpp
std::string rhd_allgather_refuse_ranks(int k, int node_ranks);      // rhd.cpp
// Each algorithm's count of the bytes a rank sends (comm_volume.h), in its own file; nccl and mpi
// take the ring's (ring_sent_bytes, comm_volume.h) as their nominal count.
uint64_t naive_sent_bytes(const SentBytesQuery& q);   // naive.cpp
uint64_t direct_sent_bytes(const SentBytesQuery& q);  // direct.cpp
uint64_t rhd_sent_bytes(const SentBytesQuery& q);     // rhd.cpp
uint64_t auto_sent_bytes(const SentBytesQuery& q);    // auto.cpp: its tuning table's pick
uint64_t hier_sent_bytes(const SentBytesQuery& q);    // hier.cpp: its inner collectives'
double hier_link_cost(const LinkCostQuery& q);        // hier.cpp
double hier_half_link_cost(const LinkCostQuery& q);   // hier.cpp

const std::vector<AllReduceEntry>& allreduce_algorithms() {
  static const std::vector<AllReduceEntry> table = {
      {"naive", "d2l's textbook version: rank 0 gathers, sums and scatters (baseline)", {},
       nullptr, [](CommGroup& g, const AllReduceOptions&) { return make_naive_allreduce(g); }, 5,
       naive_link_cost, naive_sent_bytes},
      {"ring", "reduce-scatter + all-gather around a ring, 2(k-1) steps", {}, nullptr,
       [](CommGroup& g, const AllReduceOptions&) { return make_ring_allreduce(g); }, 5,
       ring_link_cost, ring_sent_bytes},
      {"direct", "every rank sums its 1/k from all peers, then gathers: 2 barriers", {}, nullptr,
       [](CommGroup& g, const AllReduceOptions&) { return make_direct_allreduce(g); }, 5,
       direct_link_cost, direct_sent_bytes},
      {"rhd", "recursive halving and doubling (Rabenseifner), 2 log2(k) steps; k a power of two",
       {}, rhd_refuse_ranks,
       [](CommGroup& g, const AllReduceOptions&) { return make_rhd_allreduce(g); }, 5,
       rhd_link_cost, rhd_sent_bytes},
      {"hier", "two levels: reduce-scatter in the node, all-reduce of 1/g across nodes, "
       "all-gather in the node (--nodes)", {}, nullptr,
       [](CommGroup& g, const AllReduceOptions& o) {
         return make_hier_collective(g, Collective::AllReduce, o);
       }, 0, hier_link_cost, hier_sent_bytes},
      {"auto", "per message size, the algorithm of a tuning table measured here (--tune-file)",
       {}, nullptr, make_auto_allreduce, 0, auto_link_cost, auto_sent_bytes,
       AllReduceEntry::kBoth, nullptr,
       /*link_paced=*/true, /*picks_algorithm=*/true},
      {"nccl", "ncclAllReduce (NCCL picks its own algorithm)", {BackendKind::Cuda},
       nccl_refuse_ranks,
       [](CommGroup& g, const AllReduceOptions&) { return make_nccl_allreduce(g); }, 0,
       ring_link_cost, ring_sent_bytes,  // NCCL's ring; its nominal count
       AllReduceEntry::kBoth, nccl_max_ranks_per_gpu},
      {"mpi", "MPI_Allreduce in place (the MPI library's own choice; our schedules' peer)", {},
       nullptr, [](CommGroup& g, const AllReduceOptions&) { return make_mpi_allreduce(g); }, 0,
       nullptr, ring_sent_bytes, AllReduceEntry::kProcesses, nullptr, /*link_paced=*/false},
  };
  return table;
}

namespace {
AllReduceEntry of(Collective c, AllReduceEntry e) {
  e.op = c;
  return e;
}
}  // namespace

// Reduce-scatter (shard.h). Memory traffic: a reduce of a shard loads two and stores one, 3(k-1)n
// for all ranks together (ring, direct, rhd); naive's rank 0 sums every whole buffer and then
// copies out the shards, 3(k-1)n + 2(k-1)n/k: no constant factor, so no model (0).
const std::vector<AllReduceEntry>& reducescatter_algorithms() {
  constexpr Collective c = Collective::ReduceScatter;
  static const std::vector<AllReduceEntry> table = {
      of(c, {"naive", "rank 0 sums every buffer and puts each rank its shard (baseline)", {},
             nullptr, [](CommGroup& g, const AllReduceOptions&) { return make_naive_collective(g, c); },
             0, naive_reducescatter_link_cost, naive_sent_bytes}),
      of(c, {"ring", "k-1 steps around a ring (the ring all-reduce's first half)", {}, nullptr,
             [](CommGroup& g, const AllReduceOptions&) { return make_ring_collective(g, c); }, 3,
             ring_half_link_cost, ring_sent_bytes}),
      of(c, {"direct", "every rank sums its shard from all peers at once: 1 barrier", {}, nullptr,
             [](CommGroup& g, const AllReduceOptions&) { return make_direct_collective(g, c); }, 3,
             ring_half_link_cost, direct_sent_bytes}),
      of(c, {"rhd", "recursive halving, log2(k) steps; k a power of two", {},
             rhd_reducescatter_refuse_ranks,
             [](CommGroup& g, const AllReduceOptions&) { return make_rhd_collective(g, c); }, 3,
             rhd_half_link_cost, rhd_sent_bytes}),
      of(c, {"hier", "reduce-scatter in the node per node's region, then across nodes (--nodes)", {}, nullptr,
             [](CommGroup& g, const AllReduceOptions& o) { return make_hier_collective(g, c, o); },
             0, hier_half_link_cost, hier_sent_bytes}),
      of(c, {"nccl", "ncclReduceScatter (uneven shards: ncclReduce per shard, grouped)",
             {BackendKind::Cuda}, nccl_refuse_ranks,
             [](CommGroup& g, const AllReduceOptions&) { return make_nccl_collective(g, c); }, 0,
             ring_half_link_cost, ring_sent_bytes, AllReduceEntry::kBoth, nccl_max_ranks_per_gpu}),
      of(c, {"mpi", "MPI_Reduce_scatter_block in place (uneven shards: MPI_Reduce_scatter)", {},
             nullptr, [](CommGroup& g, const AllReduceOptions&) { return make_mpi_collective(g, c); },
             0, nullptr, ring_sent_bytes, AllReduceEntry::kProcesses, nullptr,
             /*link_paced=*/false}),
  };
  return table;
}

// All-gather (shard.h). Memory traffic: a copy loads one and stores one, 2(k-1)n (ring, direct,
// rhd; naive: rank 0 copies in k-1 shards and out (k-1) times all but one, also 2(k-1)n).
const std::vector<AllReduceEntry>& allgather_algorithms() {
  constexpr Collective c = Collective::AllGather;
  static const std::vector<AllReduceEntry> table = {
      of(c, {"naive", "rank 0 collects every shard and puts the rest into each rank (baseline)",
             {}, nullptr,
             [](CommGroup& g, const AllReduceOptions&) { return make_naive_collective(g, c); }, 2,
             naive_allgather_link_cost, naive_sent_bytes}),
      of(c, {"ring", "k-1 steps around a ring (the ring all-reduce's second half)", {}, nullptr,
             [](CommGroup& g, const AllReduceOptions&) { return make_ring_collective(g, c); }, 2,
             ring_half_link_cost, ring_sent_bytes}),
      of(c, {"direct", "every rank copies every peer's shard at once: 1 barrier", {}, nullptr,
             [](CommGroup& g, const AllReduceOptions&) { return make_direct_collective(g, c); }, 2,
             ring_half_link_cost, direct_sent_bytes}),
      of(c, {"rhd", "recursive doubling, log2(k) steps; k a power of two", {},
             rhd_allgather_refuse_ranks,
             [](CommGroup& g, const AllReduceOptions&) { return make_rhd_collective(g, c); }, 2,
             rhd_half_link_cost, rhd_sent_bytes}),
      of(c, {"hier", "all-gather across nodes, then in the node per node's region (--nodes)", {}, nullptr,
             [](CommGroup& g, const AllReduceOptions& o) { return make_hier_collective(g, c, o); },
             0, hier_half_link_cost, hier_sent_bytes}),
      of(c, {"nccl", "ncclAllGather (uneven shards: ncclBroadcast per shard, grouped)",
             {BackendKind::Cuda}, nccl_refuse_ranks,
             [](CommGroup& g, const AllReduceOptions&) { return make_nccl_collective(g, c); }, 0,
             ring_half_link_cost, ring_sent_bytes, AllReduceEntry::kBoth, nccl_max_ranks_per_gpu}),
      of(c, {"mpi", "MPI_Allgather in place (uneven shards: MPI_Allgatherv)", {}, nullptr,
             [](CommGroup& g, const AllReduceOptions&) { return make_mpi_collective(g, c); }, 0,
             nullptr, ring_sent_bytes, AllReduceEntry::kProcesses, nullptr,
             /*link_paced=*/false}),
  };
  return table;
}

const std::vector<AllReduceEntry>& collective_algorithms(Collective c) {
  switch (c) {
    case Collective::ReduceScatter: return reducescatter_algorithms();
    case Collective::AllGather: return allgather_algorithms();
    default: return allreduce_algorithms();
  }
}

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::ReduceScatter: return "reduce-scatter";
    case Collective::AllGather: return "all-gather";
    default: return "all-reduce";
  }
}

const char* collective_family(Collective c) {
  switch (c) {
    case Collective::ReduceScatter: return "reducescatter";
    case Collective::AllGather: return "allgather";
    default: return "allreduce";
  }
}

const AllReduceEntry& find_allreduce(const std::string& name) {
  return lookup_entry(allreduce_algorithms(), name, "--allreduce", "algorithm");
}

const AllReduceEntry& find_collective(Collective c, const std::string& name) {
  if (c == Collective::AllReduce) return find_allreduce(name);
  return lookup_entry(collective_algorithms(c), name, collective_name(c), "algorithm");
}

uint64_t schedule_sent_bytes(Collective c, const std::string& algorithm, size_t n, int k, int rank,
                             BackendKind kind, const std::string& tune_file, int nodes,
                             const LinkSpec& link) {
  const AllReduceEntry& e = find_collective(c, algorithm);
  DPB_CHECK(e.sent_bytes, collective_name(c) << " " << algorithm << " has no count of bytes sent");
  DPB_CHECK(k >= 1 && rank >= 0 && rank < k,
            collective_name(c) << " " << algorithm << ": rank " << rank << " is not one of k = " << k);
  DPB_CHECK(nodes >= 1 && k % nodes == 0,
            collective_name(c) << " " << algorithm << ": " << k << " ranks do not split into "
                               << nodes << " nodes of equal size");
  SentBytesQuery q;  // by field, the rest (hier's inner algorithms) left at their defaults
  q.op = c;
  q.n = n;
  q.k = k;
  q.rank = rank;
  q.kind = kind;
  q.tune_file = tune_file;
  q.nodes = nodes;
  q.link = link;  // auto weighs hier on it
  return e.sent_bytes(q);
}

std::string allreduce_runs_on(const AllReduceEntry& e) {
  if (e.runs_on.empty()) return "every backend";
  std::string s;
  for (BackendKind k : e.runs_on) s += (s.empty() ? "" : ", ") + std::string(backend_kind_name(k));
  return s;
}

std::string allreduce_refusal(const AllReduceEntry& e, int k, BackendKind kind,
                              Launcher launcher, int node_ranks) {
  bool here = e.runs_on.empty();
  for (BackendKind b : e.runs_on) here = here || b == kind;
  // "--allreduce ring", "reduce-scatter ring": how messages name the entry.
  const std::string what =
      (e.op == Collective::AllReduce ? std::string("--allreduce") : collective_name(e.op)) + " " + e.name;
  if (!here) {
    std::string others;
    for (const AllReduceEntry& o : collective_algorithms(e.op))
      if (o.runs_on.empty()) others += (others.empty() ? "" : ", ") + o.name;
    return what + " needs --backend " + allreduce_runs_on(e) + " (this run uses the " +
           backend_kind_name(kind) + " backend; use " + others + ")";
  }
  const bool procs = launcher != Launcher::Threads;
  if (!e.runs_with(launcher))
    return procs ? what + " runs only with ranks as threads of one process "
                          "(start dpbench without mpirun/srun)"
                 : what + " runs only with one process per rank: start dpbench "
                          "under mpirun or srun (e.g. mpirun -np 2 " +
                          (e.op == Collective::AllReduce
                               ? "dpbench train --allreduce " + e.name
                               : "dpbench-micro --benchmark_filter=" +
                                     std::string(collective_family(e.op)) + "/") + ")";
  if (node_ranks <= 0) node_ranks = procs ? 0 : k;
  return e.refuse_ranks ? e.refuse_ranks(k, node_ranks) : "";
}

std::string allreduce_launchers(const AllReduceEntry& e) {
  if (e.launchers == AllReduceEntry::kBoth) return "threads, processes";
  return e.launchers == AllReduceEntry::kThreads ? "threads" : "processes";
}

std::string link_paced_algorithms(BackendKind kind, Launcher launcher) {
  std::vector<std::string> names;
  for (const AllReduceEntry& e : allreduce_algorithms())
    if (e.link_paced && allreduce_refusal(e, 2, kind, launcher).empty()) names.push_back(e.name);
  std::string s;
  for (size_t i = 0; i < names.size(); ++i)
    s += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return s;
}

}  // namespace dpb
