// direct.cpp: one-shot reduce-scatter + all-gather. The buffer is split into k chunks
// (chunk_begin/chunk_size); rank r owns chunk r. Phase 1: rank r adds chunk r of every peer's
// buffer into its own, so it holds the full sum of chunk r. Phase 2: rank r copies chunk p from
// every peer p. Each phase reads k-1 peers at once, so there are 2 barriers (plus the pointer
// exchange) where the ring needs 2(k-1): fewer synchronizations for small messages, the same
// bytes moved (5(k-1)n loaded + stored by all ranks together, like the ring). Rank r starts with
// peer r+1, so the ranks do not all read the same peer at once.
// Built by make_allreduce("direct", group); tested by tests/test_allreduce.cpp.
#include <memory>

#include "collectives/allreduce.h"

namespace dpb {
namespace {

class DirectAllReduce final : public AllReduce {
 public:
  explicit DirectAllReduce(CommGroup& group) : group_(group) {}
  std::string name() const override { return "direct"; }

  void run(int rank, float* buf, size_t n) override {
    const int k = group_.size();
    if (k == 1 || n == 0) return;  // same decision on every rank: n is collective
    Device& dev = group_.device(rank);
    group_.exchange(rank, buf);
    // Phase 1: the peers' chunk `rank` into ours. Peers read only their own chunks of our buffer.
    const size_t off = chunk_begin(n, k, rank), len = chunk_size(n, k, rank);
    for (int i = 1; i < k && len > 0; ++i)
      dev.comm_reduce(buf + off, group_.peer((rank + i) % k) + off, len);
    group_.barrier(rank);  // every chunk is summed on its owner
    // Phase 2: chunk p from its owner p. Owners do not write their own chunk in this phase.
    for (int i = 1; i < k; ++i) {
      const int p = (rank + i) % k;
      const size_t len_p = chunk_size(n, k, p), off_p = chunk_begin(n, k, p);
      if (len_p > 0) dev.comm_copy(buf + off_p, group_.peer(p) + off_p, len_p);
    }
    group_.barrier(rank);  // nobody reads our buffer after run() returns
  }

 private:
  CommGroup& group_;
};

}  // namespace

std::unique_ptr<AllReduce> make_direct_allreduce(CommGroup& group) {
  return std::make_unique<DirectAllReduce>(group);
}

}  // namespace dpb
