// direct.cpp: one-shot reduce-scatter, all-gather and all-reduce (the first then the second, on
// one published buffer), over the transport's steps (transport.h). The buffer is split into k
// chunks (chunk_begin/chunk_size); rank r owns chunk r. Phase 1: rank r adds chunk r of every peer's
// buffer into its own, so it holds the full sum of chunk r. Phase 2: rank r copies chunk p from
// every peer p. Each phase reads k-1 peers at once, so there are 2 steps (barriers) (plus the pointer
// exchange) where the ring needs 2(k-1): fewer synchronizations for small messages, the same
// bytes moved (5(k-1)n loaded + stored by all ranks together, like the ring). Rank r starts with
// peer r+1, so the ranks do not all read the same peer at once.
// The reduce-scatter alone is phase 1, the all-gather phase 2 (shard.h: rank r's shard is chunk r).
// Built by make_collective(c, "direct", group); tested by tests/test_allreduce.cpp and
// tests/test_shard_collectives.cpp.
#include <memory>
#include <vector>

#include "collectives/allreduce.h"
#include "collectives/comm_volume.h"
#include "collectives/link.h"
#include "collectives/shard.h"

namespace dpb {
namespace {

// Phase 1 (reduce-scatter) on a published buffer: the peers' chunk `rank` into ours; our chunk
// p to peer p. Peers read only their own chunks of our buffer.
void direct_reduce_scatter_step(CommGroup& group, int rank, float* buf, size_t n) {
  const int k = group.size();
  const size_t off = chunk_begin(n, k, rank), len = chunk_size(n, k, rank);
  std::vector<SendOp> sends;
  std::vector<RecvOp> recvs;
  for (int i = 1; i < k; ++i) {
    const int p = (rank + i) % k, q = (rank + k - i) % k;  // we read p; q reads us
    if (len > 0) recvs.push_back({p, off, buf + off, len, RecvOp::Reduce});
    if (chunk_size(n, k, q) > 0) sends.push_back({q, chunk_begin(n, k, q), chunk_size(n, k, q)});
  }
  group.step(rank, sends, recvs);  // every chunk is summed on its owner
}

// Phase 2 (all-gather): chunk p from its owner p; ours to every peer. Owners do not write their
// own chunk.
void direct_allgather_step(CommGroup& group, int rank, float* buf, size_t n) {
  const int k = group.size();
  const size_t off = chunk_begin(n, k, rank), len = chunk_size(n, k, rank);
  std::vector<SendOp> sends;
  std::vector<RecvOp> recvs;
  for (int i = 1; i < k; ++i) {
    const int p = (rank + i) % k, q = (rank + k - i) % k;
    const size_t len_p = chunk_size(n, k, p), off_p = chunk_begin(n, k, p);
    if (len_p > 0) recvs.push_back({p, off_p, buf + off_p, len_p, RecvOp::Copy});
    if (len > 0) sends.push_back({q, off, len});
  }
  group.step(rank, sends, recvs);  // nobody reads our buffer after run() returns
}

class DirectCollective final : public AllReduce {
 public:
  DirectCollective(CommGroup& group, Collective op) : group_(group), op_(op) {}
  std::string name() const override { return "direct"; }

  void run(int rank, float* buf, size_t n) override {
    const int k = group_.size();
    if (k == 1 || n == 0) return;  // same decision on every rank: n is collective
    group_.begin(rank, buf);
    if (op_ != Collective::AllGather) direct_reduce_scatter_step(group_, rank, buf, n);
    if (op_ != Collective::ReduceScatter) direct_allgather_step(group_, rank, buf, n);
  }

 private:
  CommGroup& group_;
  Collective op_;
};

}  // namespace

std::unique_ptr<AllReduce> make_direct_collective(CommGroup& group, Collective c) {
  return std::make_unique<DirectCollective>(group, c);
}

std::unique_ptr<AllReduce> make_direct_allreduce(CommGroup& group) {
  return make_direct_collective(group, Collective::AllReduce);
}

// Its alpha-beta cost on an emulated link (link.h; its registry entry carries it): rank r reads its
// chunk from peers r+1, r+2, ... in turn; at each turn every rank sends one chunk and receives
// one, so no link is shared; then the same for the gather: 2(k-1) (L + n/(kG)); across emulated
// nodes every turn has a transfer that crosses (LinkSpec::step_s).
double direct_link_cost(const LinkCostQuery& q) {
  return q.k <= 1 ? 0.0 : 2.0 * (q.k - 1) * q.link.step_s(q.bytes / q.k, q.k);
}

// Bytes rank q.rank sends in one call (comm_volume.h; its registry entry carries it): phase 1,
// chunk p to each peer p (every chunk but its own); phase 2, its own chunk to each of k-1 peers.
uint64_t direct_sent_bytes(const SentBytesQuery& q) {
  const size_t n = q.n;
  const int k = q.k;
  if (k <= 1 || n == 0) return 0;
  const size_t mine = chunk_size(n, k, q.rank);
  size_t floats = 0;
  if (q.op != Collective::AllGather) floats += n - mine;
  if (q.op != Collective::ReduceScatter) floats += size_t(k - 1) * mine;
  return uint64_t(floats) * sizeof(float);
}

}  // namespace dpb
