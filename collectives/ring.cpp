// ring.cpp: ring all-reduce over Device comm primitives. The buffer is split into k chunks
// (chunk_begin/chunk_size). Reduce-scatter, steps s = 0..k-2: rank r adds chunk (r-s-1) mod k
// of its left neighbour's buffer into its own; afterwards rank r holds the full sum of chunk
// (r+1) mod k. All-gather, steps s = 0..k-2: rank r copies chunk (r-s) mod k from its left
// neighbour. A device-ordered barrier separates the steps, so each step reads what the left
// neighbour finished in the step before. Built by make_allreduce("ring", group); tested by
// tests/test_allreduce.cpp.
#include <memory>

#include "collectives/allreduce.h"

namespace dpb {
namespace {

class RingAllReduce final : public AllReduce {
 public:
  explicit RingAllReduce(CommGroup& group) : group_(group) {}
  std::string name() const override { return "ring"; }

  void run(int rank, float* buf, size_t n) override {
    const int k = group_.size();
    if (k == 1 || n == 0) return;  // same decision on every rank: n is collective
    Device& dev = group_.device(rank);
    group_.exchange(rank, buf);
    const float* left = group_.peer((rank + k - 1) % k);
    for (int s = 0; s < k - 1; ++s) {  // reduce-scatter
      const int c = ((rank - s - 1) % k + k) % k;
      const size_t off = chunk_begin(n, k, c), len = chunk_size(n, k, c);
      if (len) dev.comm_reduce(buf + off, left + off, len);
      group_.barrier(rank);
    }
    for (int s = 0; s < k - 1; ++s) {  // all-gather
      const int c = ((rank - s) % k + k) % k;
      const size_t off = chunk_begin(n, k, c), len = chunk_size(n, k, c);
      if (len) dev.comm_copy(buf + off, left + off, len);
      group_.barrier(rank);  // the last one: nobody reads this buffer after run() returns
    }
  }

 private:
  CommGroup& group_;
};

}  // namespace

std::unique_ptr<AllReduce> make_ring_allreduce(CommGroup& group) {
  return std::make_unique<RingAllReduce>(group);
}

}  // namespace dpb
