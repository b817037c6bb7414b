// registry.h: the tables of collective algorithms: the all-reduce's, and the reduce-scatter's and
// all-gather's (collectives/shard.h), entries of one shape. An entry gives the --allreduce name
// (the algorithm's name in the other tables), one line of help, the backends it runs on, its constraints on the rank count k, its factory, its
// memory-traffic model, its link cost and its count of the bytes a rank sends (comm_volume.h). make_allreduce, the trainer's validate(), the CLI's choices and --help,
// dpbench-micro's registrations and counters, and the test loops all read this table.
// Adding an algorithm: its file (collectives/<name>.cpp, written over CommGroup's transport steps
// like naive.cpp and ring.cpp, so it runs across threads and processes) and one entry in
// registry.cpp (per collective it implements).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "collectives/allreduce.h"
#include "collectives/comm_volume.h"
#include "collectives/link.h"
#include "collectives/shard.h"

namespace dpb {

struct AllReduceEntry {
  std::string name;  // --allreduce value
  std::string help;  // one line for --help
  // Backends whose devices it runs on; empty: every backend (written over Device's primitives).
  std::vector<BackendKind> runs_on;
  // nullptr: any k. Else "" when k ranks, node_ranks of them on this node (0: not known), are
  // allowed, or why not, naming the algorithm and the counts.
  std::string (*refuse_ranks)(int k, int node_ranks);
  std::unique_ptr<AllReduce> (*make)(CommGroup& group, const AllReduceOptions& opts);
  // CPU memory-traffic model: bytes loaded + stored by all ranks together for one all-reduce (or
  // reduce-scatter, all-gather) of n bytes per rank = traffic_factor * (k - 1) * n (see bench/allreduce_bench.cpp). 0: no model
  // (benchmarks then report no traffic counters rather than a made-up zero).
  double traffic_factor;
  // Alpha-beta cost on an emulated link (collectives/link.h): seconds for one all-reduce of
  // `bytes` per rank over k ranks; what `dpbench project` and the link benchmarks use. Defined in
  // the algorithm's own file (reduce-scatter, all-gather: of `bytes`, the whole buffer).
  // nullptr: no cost model.
  double (*link_cost)(const LinkCostQuery& q);
  // Bytes one rank sends in one call of this collective (collectives/comm_volume.h): what
  // CommGroup::sent_bytes measures, defined in the algorithm's own file (nccl, mpi: the ring's,
  // their nominal count). nullptr: no count.
  uint64_t (*sent_bytes)(const SentBytesQuery& q);
  // Where its ranks may live: threads of one process (Launcher::Threads), processes (one rank
  // each, started by mpirun/srun: Launcher::Mpi; collectives/mpi/mpi_transport.h), or both.
  enum Launchers { kThreads = 1, kProcesses = 2, kBoth = 3 };
  int launchers = kBoth;
  // The most ranks one GPU may hold (k ranks on G GPUs put ceil(k / G) on one), asked by planners
  // that leave out the runs a machine with fewer GPUs would refuse (`dpbench info`,
  // scripts/suitelib.py); nullptr: any number.
  int (*max_ranks_per_gpu)() = nullptr;
  // It moves data through the transport's steps, which the emulated link paces; false: a
  // library's own collective (MPI_Allreduce) the link cannot pace, refused with a link.
  bool link_paced = true;
  // It runs another entry's schedule, picked per message size by a tuning table (auto): no
  // tuning table may pick it.
  bool picks_algorithm = false;
  // The collective this entry implements (the table it is in).
  Collective op = Collective::AllReduce;
  bool runs_with(Launcher l) const {
    return launchers & (l == Launcher::Threads ? kThreads : kProcesses);
  }
};

const std::vector<AllReduceEntry>& allreduce_algorithms();
// The entry called name; throws "--allreduce: unknown algorithm 'x' (valid: ...)".
const AllReduceEntry& find_allreduce(const std::string& name);
// The reduce-scatter and all-gather tables (shard.h): naive, ring, direct, rhd, nccl, mpi.
const std::vector<AllReduceEntry>& reducescatter_algorithms();
const std::vector<AllReduceEntry>& allgather_algorithms();
const std::vector<AllReduceEntry>& collective_algorithms(Collective c);
// The entry of c's table called name; throws "reduce-scatter: unknown algorithm 'x' (valid: ...)".
const AllReduceEntry& find_collective(Collective c, const std::string& name);
// "" when `e` may run with k ranks on devices of this kind, launched as `launcher`, else the
// reason (names e and k; e's collective when it is not the all-reduce). node_ranks: the ranks on this node (processes: the node's processes;
// 0: all k for threads, not known for processes).
std::string allreduce_refusal(const AllReduceEntry& e, int k, BackendKind kind,
                              Launcher launcher = Launcher::Threads, int node_ranks = 0);
// "naive, ring, direct, rhd or auto": the entries the emulated link paces that run on devices of
// this kind launched as `launcher`, for messages that refuse another.
std::string link_paced_algorithms(BackendKind kind, Launcher launcher);
// "threads", "processes" or "threads, processes": where the entry's ranks may live.
std::string allreduce_launchers(const AllReduceEntry& e);
// "cpu, cuda" or "every backend": where the entry runs, for --help and messages.
std::string allreduce_runs_on(const AllReduceEntry& e);
// nccl-tests' bus-bandwidth factor of all-reduce, the same for every algorithm so that numbers
// compare across algorithms and rank counts: busbw = algbw * 2(k-1)/k.
inline double allreduce_bus_factor(int k) { return k > 1 ? 2.0 * (k - 1) / k : 0.0; }
// nccl-tests' factor for c: reduce-scatter and all-gather move (k-1)/k of the whole buffer
// (algbw counts the whole buffer for them too), busbw = algbw * (k-1)/k.
inline double collective_bus_factor(Collective c, int k) {
  if (c == Collective::AllReduce) return allreduce_bus_factor(k);
  return k > 1 ? double(k - 1) / k : 0.0;
}

}  // namespace dpb
