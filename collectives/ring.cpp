// ring.cpp: the ring reduce-scatter, all-gather and all-reduce over the transport's steps
// (transport.h): runs across threads and across processes. The buffer is split into k chunks
// (chunk_begin/chunk_size). One schedule of 2(k-1) steps, each one transport step (threads: read
// the left neighbour's buffer, then the device-ordered barrier; MPI: receive from the left, send
// to the right); rank r owns chunk (r + rot) mod k:
//   reduce-scatter, steps s = 0..k-2: rank r adds chunk (r + rot - s - 2) mod k of its left
//     neighbour's buffer into its own; afterwards rank r holds the full sum of its own chunk.
//   all-gather, steps s = k-1..2k-3: rank r copies chunk (r + rot - (s - (k-1)) - 1) mod k from its
//     left neighbour, which holds it complete since the step before.
// The reduce-scatter collective runs the first k-1 steps, the all-gather the last k-1 (rot = 0:
// rank r's shard is chunk r, shard.h); the all-reduce runs the reduce-scatter's steps then the
// all-gather's as one pipeline (below), with rot = 1, the chunk order this ring has always
// summed in (its sums are bit for bit what they were before the halves were split out).
// Pipelining: each chunk is cut into m pieces and the steps run on piece j one tick
// after piece j-1 (tick t does step t-j of piece j, for every piece in flight), with one barrier
// per tick: m + S - 1 ticks instead of S steps (S: the collective's steps; fused, the all-reduce
// saves the m - 1 ticks that running its halves one after the other would add). Every hazard of
// the plain ring is at least one step apart, hence one tick apart, so one barrier per tick is enough. On the CPU this
// keeps what the left neighbour wrote in the last tick in cache when it is read (the buffers are
// larger than the cache); on other devices, and under an emulated link (where every piece would
// pay the link's latency), and across processes, m = 1 (the plain ring) unless a piece size is
// given.
// Built by make_collective(c, "ring", group); tested by tests/test_allreduce.cpp and
// tests/test_shard_collectives.cpp.
#include <algorithm>
#include <memory>
#include <vector>

#include "collectives/allreduce.h"
#include "collectives/comm_volume.h"
#include "collectives/link.h"
#include "collectives/shard.h"

namespace dpb {
namespace {

// CPU: pipeline only when the k buffers together outgrow the last-level cache (below that the
// extra barriers cost more than they save), in pieces small enough that the pieces of one tick
// (up to 2(k-1) per rank) stay in the private caches until the right neighbour reads them
// (measurements: docs/decisions.md).
constexpr size_t kCpuPieceFloats = size_t(16) << 10;      // 64 KB
constexpr size_t kCpuPipelineMinBytes = size_t(8) << 20;  // all k buffers together

// Piece j of a chunk of len floats cut into m pieces whose sizes differ by at most one.
inline size_t split_begin(size_t len, size_t m, size_t j) {
  return j * (len / m) + std::min(j, len % m);
}

class RingCollective final : public AllReduce {
 public:
  RingCollective(CommGroup& group, Collective op, size_t piece_floats)
      : group_(group), op_(op), piece_(piece_floats),
        auto_(piece_floats == 0 && group.kind() == BackendKind::Cpu &&
              group.launcher() == Launcher::Threads && !group.paced()) {}
  std::string name() const override { return "ring"; }

  void run(int rank, float* buf, size_t n) override {
    const int k = group_.size();
    if (k == 1 || n == 0) return;  // same decision on every rank: n is collective
    group_.begin(rank, buf);
    // This collective's steps of the ring: [first, first + steps).
    const int first = op_ == Collective::AllGather ? k - 1 : 0;
    const int steps = op_ == Collective::AllReduce ? 2 * (k - 1) : k - 1;
    const int rot = op_ == Collective::AllReduce ? 1 : 0;
    const int left = (rank + k - 1) % k, right = (rank + 1) % k;
    const size_t biggest_chunk = chunk_size(n, k, 0);
    size_t piece = piece_;
    if (auto_) piece = size_t(k) * n * sizeof(float) > kCpuPipelineMinBytes ? kCpuPieceFloats : 0;
    const size_t m = piece ? (biggest_chunk + piece - 1) / piece : 1;  // pieces per chunk
    // What rank q receives from its left neighbour at step s of piece j: [off, off + len).
    struct Piece { size_t off, len; bool gather; };
    auto piece_of = [&](int q, int s, size_t j) {
      const bool gather = s >= k - 1;
      const int c = gather ? ((q + rot - (s - (k - 1)) - 1) % k + k) % k
                           : ((q + rot - s - 2) % k + k) % k;
      const size_t len_c = chunk_size(n, k, c);
      const size_t lo = split_begin(len_c, m, j), hi = split_begin(len_c, m, j + 1);
      return Piece{chunk_begin(n, k, c) + lo, hi - lo, gather};
    };
    std::vector<SendOp> sends;
    std::vector<RecvOp> recvs;
    sends.reserve(size_t(steps));
    recvs.reserve(size_t(steps));
    for (size_t t = 0; t + 1 < m + steps; ++t) {
      // Pieces in flight at tick t: j with 0 <= t - j < steps; oldest (furthest along) first.
      const size_t j_lo = t + 1 > size_t(steps) ? t + 1 - steps : 0, j_hi = std::min(t, m - 1);
      sends.clear();
      recvs.clear();
      for (size_t j = j_lo; j <= j_hi; ++j) {
        const int s = first + int(t - j);
        const Piece in = piece_of(rank, s, j), out = piece_of(right, s, j);
        if (out.len > 0) sends.push_back({right, out.off, out.len});
        if (in.len > 0)
          recvs.push_back({left, in.off, buf + in.off, in.len,
                           in.gather ? RecvOp::Copy : RecvOp::Reduce});
      }
      group_.step(rank, sends, recvs);  // the last one: nobody reads this buffer after run()
    }
  }

 private:
  CommGroup& group_;
  Collective op_;
  size_t piece_;  // floats per piece of a chunk; 0: no pipelining
  bool auto_;     // CPU default: choose per call
};

}  // namespace

std::unique_ptr<AllReduce> make_ring_collective(CommGroup& group, Collective c, size_t piece_floats) {
  return std::make_unique<RingCollective>(group, c, piece_floats);
}

std::unique_ptr<AllReduce> make_ring_allreduce(CommGroup& group, size_t piece_floats) {
  return make_ring_collective(group, Collective::AllReduce, piece_floats);
}

// Its alpha-beta cost on an emulated link (link.h; its registry entry carries it): 2(k-1) steps of
// one chunk each, a transfer per rank and step with no link shared: 2(k-1) (L + n/(kG)). Across
// emulated nodes every step has a transfer that crosses, and the step waits for it: the slower
// link's L and G (LinkSpec::step_s).
double ring_link_cost(const LinkCostQuery& q) {
  return q.k <= 1 ? 0.0 : 2.0 * (q.k - 1) * q.link.step_s(q.bytes / q.k, q.k);
}

// The reduce-scatter's or the all-gather's (the whole buffer is `bytes`): half of it,
// (k-1) (L + n/(kG)). NCCL's ring and direct's one-shot halves cost the same.
double ring_half_link_cost(const LinkCostQuery& q) {
  return q.k <= 1 ? 0.0 : (q.k - 1) * q.link.step_s(q.bytes / q.k, q.k);
}

// Bytes rank q.rank sends in one call (comm_volume.h; its registry entry carries it, and nccl's
// and mpi's as their nominal count). At step s it sends its right neighbour q+1 the chunk q+1
// receives (piece_of above; pipelining cuts chunks into pieces, the sum is the same): the
// reduce-scatter (rot 0) every chunk but its own r, the all-gather every chunk but r+1, which it
// lacks; the all-reduce (rot 1) every chunk but r+1, then every chunk but r+2.
uint64_t ring_sent_bytes(const SentBytesQuery& q) {
  const size_t n = q.n;
  const int k = q.k, r = q.rank;
  if (k <= 1 || n == 0) return 0;
  auto all_but = [&](int c) { return n - chunk_size(n, k, c % k); };
  const size_t floats = q.op == Collective::ReduceScatter ? all_but(r)
                        : q.op == Collective::AllGather   ? all_but(r + 1)
                                                          : all_but(r + 1) + all_but(r + 2);
  return uint64_t(floats) * sizeof(float);
}

}  // namespace dpb
