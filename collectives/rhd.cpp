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
// Built by make_allreduce("rhd", group), which refuses other k; tested by tests/test_allreduce.cpp.
#include <algorithm>
#include <memory>
#include <string>

#include "collectives/allreduce.h"
#include "collectives/link.h"

namespace dpb {
namespace {

class RhdAllReduce final : public AllReduce {
 public:
  explicit RhdAllReduce(CommGroup& group) : group_(group) {}
  std::string name() const override { return "rhd"; }

  void run(int rank, float* buf, size_t n) override {
    const int k = group_.size();
    if (k == 1 || n == 0) return;  // same decision on every rank: n is collective
    group_.begin(rank, buf);
    auto at = [&](int c) { return chunk_begin(n, k, c); };  // at(k) == n
    auto exchange = [&](int partner, int send_lo, int send_hi, int recv_lo, int recv_hi,
                        RecvOp::Kind op) {
      SendOp s{partner, at(send_lo), at(send_hi) - at(send_lo)};
      RecvOp r{partner, at(recv_lo), buf + at(recv_lo), at(recv_hi) - at(recv_lo), op};
      group_.step(rank, std::span<const SendOp>(&s, s.len > 0 ? 1 : 0),
                  std::span<const RecvOp>(&r, r.len > 0 ? 1 : 0));
    };
    int lo = 0, hi = k;                    // this rank's segment, in chunks
    for (int d = k / 2; d >= 1; d /= 2) {  // reduce-scatter: halve; send the half we drop
      const int mid = (lo + hi) / 2;
      const bool upper = rank & d;
      const int olo = upper ? lo : mid, ohi = upper ? mid : hi;  // the partner's half
      if (upper) lo = mid; else hi = mid;
      exchange(rank ^ d, olo, ohi, lo, hi, RecvOp::Reduce);
    }
    for (int d = 1; d < k; d *= 2) {  // all-gather: the partner's segment is the sibling half
      const int plo = (rank & d) ? lo - d : hi, phi = plo + d;
      exchange(rank ^ d, lo, hi, plo, phi, RecvOp::Copy);  // the last: nobody reads us after
      lo = std::min(lo, plo);
      hi = std::max(hi, phi);
    }
  }

 private:
  CommGroup& group_;
};

}  // namespace

std::unique_ptr<AllReduce> make_rhd_allreduce(CommGroup& group) {
  return std::make_unique<RhdAllReduce>(group);
}

std::string rhd_refuse_ranks(int k, int /*node_ranks*/) {
  if (k >= 1 && (k & (k - 1)) == 0) return "";
  return "--allreduce rhd (recursive halving and doubling) needs a power-of-two rank count, got "
         "k = " + std::to_string(k) + " (use 1, 2, 4, 8, ... ranks, or ring/direct for any k)";
}

// Its alpha-beta cost on an emulated link (link.h; its registry entry carries it). Halving: log2 k
// exchanges of n/2, n/4, ..., n/k with a partner (full duplex); doubling: the same sizes back:
// 2 log2(k) L + 2(k-1)/k n/G. (k a power of two; rhd refuses other k.)
double rhd_link_cost(const LinkCostQuery& q) {
  double t = 0;
  for (int d = q.k / 2; d >= 1; d /= 2) t += 2.0 * q.link.transfer_s(q.bytes * d / q.k);
  return t;
}

}  // namespace dpb
