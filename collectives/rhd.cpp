// rhd.cpp: recursive halving and doubling (Rabenseifner's all-reduce), for k a power of two,
// over the transport's steps (transport.h).
// The buffer is split into k chunks (chunk_begin/chunk_size); a rank's segment is a range of
// chunks. Reduce-scatter by recursive halving, steps d = k/2, k/4, ..., 1: rank r and its partner
// r^d hold the same segment; each keeps one half (r keeps the lower half when bit d of r is 0) and
// adds the partner's copy of that half into its own. After log2 k steps rank r holds the full sum
// of chunk r. All-gather by recursive doubling, d = 1, 2, ..., k/2: rank r copies its partner's
// (complete) segment, doubling its own. A transport step (threads: a device-ordered barrier) ends every step: 2 log2 k + 1
// barriers (with the pointer exchange) instead of the ring's 2(k-1) + 1, the same bytes moved as
// the ring (5(k-1)n loaded + stored by all ranks together). Within a step a rank writes only its
// kept (or received) range and its partner reads only the other one, so no step races.
// The reduce-scatter alone (shard.h) is the halving, which leaves rank r its chunk r; the
// all-gather alone is the doubling, starting from rank r's chunk r.
// Built by make_collective(c, "rhd", group), which refuses other k; tested by
// tests/test_allreduce.cpp and tests/test_shard_collectives.cpp.
#include <algorithm>
#include <memory>
#include <string>

#include "collectives/allreduce.h"
#include "collectives/comm_volume.h"
#include "collectives/link.h"
#include "collectives/shard.h"

namespace dpb {
namespace {

// rhd's schedule for `rank`: its exchanges in order, fn(partner, send_lo, send_hi, recv_lo,
// recv_hi, kind) with the ranges in chunks; run() moves them, rhd_sent_bytes sums the sends.
template <class Fn>
void rhd_exchanges(Collective op, int k, int rank, Fn&& fn) {
  int lo = 0, hi = k;  // this rank's segment, in chunks
  if (op != Collective::AllGather) {
    for (int d = k / 2; d >= 1; d /= 2) {  // reduce-scatter: halve; send the half we drop
      const int mid = (lo + hi) / 2;
      const bool upper = rank & d;
      const int olo = upper ? lo : mid, ohi = upper ? mid : hi;  // the partner's half
      if (upper) lo = mid; else hi = mid;
      fn(rank ^ d, olo, ohi, lo, hi, RecvOp::Reduce);
    }
  } else {
    lo = rank, hi = rank + 1;  // the all-gather starts from this rank's own chunk
  }
  if (op == Collective::ReduceScatter) return;
  for (int d = 1; d < k; d *= 2) {  // all-gather: the partner's segment is the sibling half
    const int plo = (rank & d) ? lo - d : hi, phi = plo + d;
    fn(rank ^ d, lo, hi, plo, phi, RecvOp::Copy);  // the last: nobody reads us after
    lo = std::min(lo, plo);
    hi = std::max(hi, phi);
  }
}

class RhdCollective final : public AllReduce {
 public:
  RhdCollective(CommGroup& group, Collective op) : group_(group), op_(op) {}
  std::string name() const override { return "rhd"; }

  void run(int rank, float* buf, size_t n) override {
    const int k = group_.size();
    if (k == 1 || n == 0) return;  // same decision on every rank: n is collective
    group_.begin(rank, buf);
    auto at = [&](int c) { return chunk_begin(n, k, c); };  // at(k) == n
    rhd_exchanges(op_, k, rank, [&](int partner, int send_lo, int send_hi, int recv_lo,
                                    int recv_hi, RecvOp::Kind op) {
      SendOp s{partner, at(send_lo), at(send_hi) - at(send_lo)};
      RecvOp r{partner, at(recv_lo), buf + at(recv_lo), at(recv_hi) - at(recv_lo), op};
      group_.step(rank, std::span<const SendOp>(&s, s.len > 0 ? 1 : 0),
                  std::span<const RecvOp>(&r, r.len > 0 ? 1 : 0));
    });
  }

 private:
  CommGroup& group_;
  Collective op_;
};

}  // namespace

std::unique_ptr<AllReduce> make_rhd_collective(CommGroup& group, Collective c) {
  return std::make_unique<RhdCollective>(group, c);
}

std::unique_ptr<AllReduce> make_rhd_allreduce(CommGroup& group) {
  return make_rhd_collective(group, Collective::AllReduce);
}

namespace {
std::string refuse(const char* what, int k) {
  if (k >= 1 && (k & (k - 1)) == 0) return "";
  return std::string(what) + " needs a power-of-two rank count, got k = " + std::to_string(k) +
         " (use 1, 2, 4, 8, ... ranks, or ring/direct for any k)";
}
}  // namespace

std::string rhd_refuse_ranks(int k, int /*node_ranks*/) {
  return refuse("--allreduce rhd (recursive halving and doubling)", k);
}
std::string rhd_reducescatter_refuse_ranks(int k, int /*node_ranks*/) {
  return refuse("reduce-scatter rhd (recursive halving)", k);
}
std::string rhd_allgather_refuse_ranks(int k, int /*node_ranks*/) {
  return refuse("all-gather rhd (recursive doubling)", k);
}

// Its alpha-beta cost on an emulated link (link.h; its registry entry carries it). Halving: log2 k
// exchanges of n/2, n/4, ..., n/k with a partner (full duplex); doubling: the same sizes back:
// 2 log2(k) L + 2(k-1)/k n/G. (k a power of two; rhd refuses other k.) Across emulated nodes of g
// ranks (a power of two too) the exchanges at distance d >= g cross, the others do not.
double rhd_link_cost(const LinkCostQuery& q) {
  double t = 0;
  for (int d = q.k / 2; d >= 1; d /= 2) t += 2.0 * q.link.transfer_s(q.bytes * d / q.k, 0, d, q.k);
  return t;
}
// Halving alone, or doubling alone: half of it, log2(k) L + (k-1)/k n/G.
double rhd_half_link_cost(const LinkCostQuery& q) { return rhd_link_cost(q) / 2; }

// Bytes rank q.rank sends in one call (comm_volume.h; its registry entry carries it): the sums of
// the ranges its exchanges send (rhd_exchanges). 0 for a k that is not a power of two (refused).
uint64_t rhd_sent_bytes(const SentBytesQuery& q) {
  const int k = q.k;
  if (k <= 1 || q.n == 0 || (k & (k - 1)) != 0) return 0;
  size_t floats = 0;
  rhd_exchanges(q.op, k, q.rank, [&](int, int send_lo, int send_hi, int, int, RecvOp::Kind) {
    floats += chunk_begin(q.n, k, send_hi) - chunk_begin(q.n, k, send_lo);
  });
  return uint64_t(floats) * sizeof(float);
}

}  // namespace dpb
