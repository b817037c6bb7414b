// shard.h: reduce-scatter and all-gather, the two halves of the all-reduce, as collectives of
// their own (what sharded data parallelism, ZeRO and FSDP, runs on). Like the all-reduce they work
// in place on the full buffer of n floats that every rank holds, and rank r's shard is chunk r of
// the all-reduce's split: [chunk_begin(n, k, r), + chunk_size(n, k, r)) (sizes differ by at most
// one when k does not divide n; a shard may be empty when n < k).
//   reduce-scatter: afterwards rank r's shard holds the sum over the ranks of that range; the rest
//     of its buffer is scratch (partial sums or its own input, per algorithm).
//   all-gather: rank r's shard holds its part (the rest of its buffer is ignored); afterwards
//     every rank's whole buffer holds every rank's part at its place.
// The objects have the all-reduce's interface (allreduce.h: run(rank, buf, n), stream-ordered,
// collective, abort on failure), so whatever drives an all-reduce (GradSync, the benchmarks)
// drives them. Each algorithm is written once over the transport's steps in its own file
// (naive.cpp, ring.cpp, direct.cpp, rhd.cpp: the all-reduce there is the reduce-scatter's steps
// followed by the all-gather's), with library peers in cuda/nccl_allreduce.cu (ncclReduceScatter,
// ncclAllGather) and mpi/mpi_allreduce.cpp (MPI_Reduce_scatter_block, MPI_Allgather); the tables
// are in registry.h (reducescatter_algorithms, allgather_algorithms). Tested by
// tests/test_shard_collectives.cpp and tests/mpi_shard_test.sh.
#pragma once
#include <memory>
#include <string>

#include "collectives/allreduce.h"

namespace dpb {

enum class Collective { AllReduce, ReduceScatter, AllGather };
inline constexpr Collective kCollectives[] = {Collective::AllReduce, Collective::ReduceScatter,
                                              Collective::AllGather};
// "all-reduce", "reduce-scatter", "all-gather": for messages.
const char* collective_name(Collective c);
// "allreduce", "reducescatter", "allgather": dpbench-micro's family names, NVTX labels.
const char* collective_family(Collective c);

// Rank r's shard of n floats over k ranks.
inline size_t shard_begin(size_t n, int k, int r) { return chunk_begin(n, k, r); }
inline size_t shard_size(size_t n, int k, int r) { return chunk_size(n, k, r); }

// algorithm: a name in c's table (registry.h). Throws dpb::Error naming the collective and the
// algorithm when it is unknown, not available on this group's backend or refuses this rank count.
// The result traces every run() as an NVTX range ("reducescatter ring 4.0 MB") and aborts the
// group when a rank's run() throws. make_collective(Collective::AllReduce, ...) is make_allreduce.
std::unique_ptr<AllReduce> make_collective(Collective c, const std::string& algorithm,
                                           CommGroup& group, const AllReduceOptions& opts = {});
inline std::unique_ptr<AllReduce> make_reducescatter(const std::string& algorithm, CommGroup& g) {
  return make_collective(Collective::ReduceScatter, algorithm, g);
}
inline std::unique_ptr<AllReduce> make_allgather(const std::string& algorithm, CommGroup& g) {
  return make_collective(Collective::AllGather, algorithm, g);
}

// The bare algorithms (no tracing, no abort on failure), one factory per file; use
// make_collective. piece_floats: as make_ring_allreduce's.
std::unique_ptr<AllReduce> make_naive_collective(CommGroup& group, Collective c);
std::unique_ptr<AllReduce> make_ring_collective(CommGroup& group, Collective c,
                                                size_t piece_floats = 0);
std::unique_ptr<AllReduce> make_direct_collective(CommGroup& group, Collective c);
std::unique_ptr<AllReduce> make_rhd_collective(CommGroup& group, Collective c);
std::unique_ptr<AllReduce> make_nccl_collective(CommGroup& group, Collective c);
std::unique_ptr<AllReduce> make_mpi_collective(CommGroup& group, Collective c);
// hier.cpp: over the group's node and cross-node groups (opts.hier_intra, opts.hier_cross).
std::unique_ptr<AllReduce> make_hier_collective(CommGroup& group, Collective c,
                                                const AllReduceOptions& opts);

}  // namespace dpb
