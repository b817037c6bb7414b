// comm_volume.h: the schedule's count of bytes a rank sends in one call of a collective, the
// number CommGroup::sent_bytes (allreduce.h) measures, per algorithm and collective: what
// `comm_bytes` per rank per step is checked against (issue 22), and what ZeRO's volumes (1x, 1.5x
// the replicated one) are built from. Each algorithm's count is defined beside its schedule, in its
// own file (naive.cpp, ring.cpp, direct.cpp, rhd.cpp, auto.cpp), and its registry entry carries it
// (AllReduceEntry::sent_bytes, registry.h), as it carries the link cost.
//   naive, ring, direct, rhd, auto: exactly the lens of the SendOps the schedule lists (pulls and
//     puts alike), so the measured count equals it byte for byte;
//   hier (hier.cpp): the sum of its inner collectives' counts on the node group (g = k / nodes
//     ranks) and the cross-node group (nodes ranks), on the ranges hier runs them on;
//   nccl, mpi (a library's own collective, not measured inside the library): the nominal count,
//     nccl-tests' convention: the ring's (ring_sent_bytes), 2(k-1)/k of the buffer for an
//     all-reduce, (k-1)/k for a reduce-scatter or an all-gather, in the ring's exact chunk sizes.
//     Their objects add it to the group with CommGroup::count_sent.
// Tested by tests/test_comm_bytes.cpp (measured == schedule, every rank, k = 2..4, odd sizes).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "collectives/link.h"
#include "collectives/shard.h"

namespace dpb {

struct SentBytesQuery {
  Collective op = Collective::AllReduce;
  size_t n = 0;   // floats, the whole buffer (as run(rank, buf, n) takes it)
  int k = 1;      // ranks
  int rank = 0;   // whose sends
  BackendKind kind = BackendKind::Cpu;  // auto: the backend its tuning table is resolved for
  std::string tune_file;                // auto: its tuning table ("": the built-in one)
  int nodes = 1;                        // hier: the group's nodes (k / nodes ranks each)
  std::string intra = "ring", cross = "ring";  // hier: its algorithms in and across the nodes
  LinkSpec link;  // auto: the emulated link it weighs hier on with nodes > 1 (tuning.h)
};

// Bytes `rank` sends in one call of c's `algorithm` (a name in c's table, registry.h) on n floats
// over k ranks. Throws dpb::Error naming the algorithm when it is unknown or has no count.
uint64_t schedule_sent_bytes(Collective c, const std::string& algorithm, size_t n, int k, int rank,
                             BackendKind kind = BackendKind::Cpu, const std::string& tune_file = "",
                             int nodes = 1, const LinkSpec& link = {});

// The ring's count (ring.cpp), also the nominal count of the library collectives (nccl, mpi):
// reduce-scatter n - |chunk r|, all-gather n - |chunk r+1|, all-reduce the ring's rotated halves,
// (n - |chunk r+1|) + (n - |chunk r+2|); floats times 4; 0 when k = 1.
uint64_t ring_sent_bytes(const SentBytesQuery& q);
// The library collectives' nominal count (nccl, mpi: their own schedule is not known): the ring's
// for `op` over n floats, k ranks, rank's sends.
inline uint64_t library_sent_bytes(Collective op, size_t n, int k, int rank) {
  SentBytesQuery q;
  q.op = op;
  q.n = n;
  q.k = k;
  q.rank = rank;
  return ring_sent_bytes(q);
}

}  // namespace dpb
