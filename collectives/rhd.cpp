// rhd.cpp: recursive halving and doubling (Rabenseifner's all-reduce), for k a power of two.
// The buffer is split into k chunks (chunk_begin/chunk_size); a rank's segment is a range of
// chunks. Reduce-scatter by recursive halving, steps d = k/2, k/4, ..., 1: rank r and its partner
// r^d hold the same segment; each keeps one half (r keeps the lower half when bit d of r is 0) and
// adds the partner's copy of that half into its own. After log2 k steps rank r holds the full sum
// of chunk r. All-gather by recursive doubling, d = 1, 2, ..., k/2: rank r copies its partner's
// (complete) segment, doubling its own. A device-ordered barrier ends every step: 2 log2 k + 1
// barriers (with the pointer exchange) instead of the ring's 2(k-1) + 1, the same bytes moved as
// the ring (5(k-1)n loaded + stored by all ranks together). Within a step a rank writes only its
// kept (or received) range and its partner reads only the other one, so no step races.
// Built by make_allreduce("rhd", group), which refuses other k; tested by tests/test_allreduce.cpp.
#include <algorithm>
#include <memory>
#include <string>

#include "collectives/allreduce.h"

namespace dpb {
namespace {

class RhdAllReduce final : public AllReduce {
 public:
  explicit RhdAllReduce(CommGroup& group) : group_(group) {}
  std::string name() const override { return "rhd"; }

  void run(int rank, float* buf, size_t n) override {
    const int k = group_.size();
    if (k == 1 || n == 0) return;  // same decision on every rank: n is collective
    Device& dev = group_.device(rank);
    group_.exchange(rank, buf);
    auto at = [&](int c) { return chunk_begin(n, k, c); };  // at(k) == n
    int lo = 0, hi = k;                                      // this rank's segment, in chunks
    for (int d = k / 2; d >= 1; d /= 2) {                    // reduce-scatter: halve
      const int mid = (lo + hi) / 2;
      if (rank & d) lo = mid; else hi = mid;
      if (at(hi) > at(lo))
        dev.comm_reduce(buf + at(lo), group_.peer(rank ^ d) + at(lo), at(hi) - at(lo));
      group_.barrier(rank);
    }
    for (int d = 1; d < k; d *= 2) {  // all-gather: the partner's segment is the sibling half
      const int plo = (rank & d) ? lo - d : hi, phi = plo + d;
      if (at(phi) > at(plo))
        dev.comm_copy(buf + at(plo), group_.peer(rank ^ d) + at(plo), at(phi) - at(plo));
      lo = std::min(lo, plo);
      hi = std::max(hi, phi);
      group_.barrier(rank);  // the last one: nobody reads our buffer after run() returns
    }
  }

 private:
  CommGroup& group_;
};

}  // namespace

std::unique_ptr<AllReduce> make_rhd_allreduce(CommGroup& group) {
  return std::make_unique<RhdAllReduce>(group);
}

std::string rhd_refuse_ranks(int k) {
  if (k >= 1 && (k & (k - 1)) == 0) return "";
  return "--allreduce rhd (recursive halving and doubling) needs a power-of-two rank count, got "
         "k = " + std::to_string(k) + " (use 1, 2, 4, 8, ... ranks, or ring/direct for any k)";
}

}  // namespace dpb
