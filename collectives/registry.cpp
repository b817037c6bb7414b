// registry.cpp: the all-reduce algorithm table (see registry.h). One entry per algorithm.
#include "collectives/registry.h"

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

const std::vector<AllReduceEntry>& allreduce_algorithms() {
  static const std::vector<AllReduceEntry> table = {
      {"naive", "d2l's textbook version: rank 0 gathers, sums and scatters (baseline)", {},
       nullptr, [](CommGroup& g, const AllReduceOptions&) { return make_naive_allreduce(g); }, 5,
       naive_link_cost},
      {"ring", "reduce-scatter + all-gather around a ring, 2(k-1) steps", {}, nullptr,
       [](CommGroup& g, const AllReduceOptions&) { return make_ring_allreduce(g); }, 5,
       ring_link_cost},
      {"direct", "every rank sums its 1/k from all peers, then gathers: 2 barriers", {}, nullptr,
       [](CommGroup& g, const AllReduceOptions&) { return make_direct_allreduce(g); }, 5,
       direct_link_cost},
      {"rhd", "recursive halving and doubling (Rabenseifner), 2 log2(k) steps; k a power of two",
       {}, rhd_refuse_ranks,
       [](CommGroup& g, const AllReduceOptions&) { return make_rhd_allreduce(g); }, 5,
       rhd_link_cost},
      {"auto", "per message size, the algorithm of a tuning table measured here (--tune-file)",
       {}, nullptr, make_auto_allreduce, 0, auto_link_cost, AllReduceEntry::kBoth, nullptr,
       /*link_paced=*/true, /*picks_algorithm=*/true},
      {"nccl", "ncclAllReduce (NCCL picks its own algorithm)", {BackendKind::Cuda},
       nccl_refuse_ranks,
       [](CommGroup& g, const AllReduceOptions&) { return make_nccl_allreduce(g); }, 0,
       ring_link_cost,  // NCCL's ring
       AllReduceEntry::kBoth, nccl_max_ranks_per_gpu},
      {"mpi", "MPI_Allreduce in place (the MPI library's own choice; our schedules' peer)", {},
       nullptr, [](CommGroup& g, const AllReduceOptions&) { return make_mpi_allreduce(g); }, 0,
       nullptr, AllReduceEntry::kProcesses, nullptr, /*link_paced=*/false},
  };
  return table;
}

const AllReduceEntry& find_allreduce(const std::string& name) {
  return lookup_entry(allreduce_algorithms(), name, "--allreduce", "algorithm");
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
  if (!here) {
    std::string others;
    for (const AllReduceEntry& o : allreduce_algorithms())
      if (o.runs_on.empty()) others += (others.empty() ? "" : ", ") + o.name;
    return "--allreduce " + e.name + " needs --backend " + allreduce_runs_on(e) + " (this run uses the " +
           backend_kind_name(kind) + " backend; use " + others + ")";
  }
  const bool procs = launcher != Launcher::Threads;
  if (!e.runs_with(launcher))
    return procs ? "--allreduce " + e.name + " runs only with ranks as threads of one process "
                                             "(start dpbench without mpirun/srun)"
                 : "--allreduce " + e.name + " runs only with one process per rank: start dpbench "
                                             "under mpirun or srun (e.g. mpirun -np 2 dpbench "
                                             "train --allreduce " + e.name + ")";
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
