// naive.cpp: d2l's textbook collectives, everything through rank 0. All-reduce: step 1, rank 0
// receives every other rank's buffer and adds it into its own; step 2, rank 0 puts the sum into
// every other rank's buffer. Reduce-scatter (shard.h): step 1 as the all-reduce's; step 2, rank 0
// puts each peer's shard of the sum into it. All-gather: step 1, rank 0 copies each peer's shard
// into its own buffer; step 2, rank 0 puts the rest of the buffer (all but the peer's own shard)
// into every peer. All the traffic goes through one rank, so they scale poorly: they are the
// baselines the ring is measured against. Written over the transport's steps (transport.h), so
// they run across threads and processes; step 1 is unfenced (the peers only wait for the put:
// a peer's buffer is next written by rank 0's put, after rank 0 has read it), so the threads
// transport needs two barriers a call, as the textbook's "copy to device 0, sum, copy back" does.
// Built by make_collective(c, "naive", group); tested by tests/test_allreduce.cpp and
// tests/test_shard_collectives.cpp.
#include <memory>
#include <vector>

#include "collectives/allreduce.h"
#include "collectives/comm_volume.h"
#include "collectives/link.h"
#include "collectives/shard.h"

namespace dpb {
namespace {

class NaiveCollective final : public AllReduce {
 public:
  NaiveCollective(CommGroup& group, Collective op) : group_(group), op_(op) {}
  std::string name() const override { return "naive"; }

  void run(int rank, float* buf, size_t n) override {
    const int k = group_.size();
    if (k == 1 || n == 0) return;  // same decision on every rank: n is collective
    group_.begin(rank, buf);
    const bool gather = op_ == Collective::AllGather;
    std::vector<SendOp> sends;
    std::vector<RecvOp> recvs;
    // Step 1: into rank 0, the peers' whole buffers summed (all-reduce, reduce-scatter) or their
    // shards copied (all-gather).
    for (int p = 1; p < k; ++p) {
      const size_t off = gather ? chunk_begin(n, k, p) : 0, len = gather ? chunk_size(n, k, p) : n;
      if (len == 0) continue;
      if (rank == 0) recvs.push_back({p, off, buf + off, len, gather ? RecvOp::Copy : RecvOp::Reduce});
      else if (rank == p) sends.push_back({0, off, len});
    }
    group_.step(rank, sends, recvs, /*fence=*/false);  // rank 0 holds the sum or every shard
    sends.clear();
    recvs.clear();
    // Step 2: rank 0 puts into each peer p the ranges [lo, hi) it lacks: the whole sum, its
    // shard of the sum, or all but its own shard.
    for (int p = 1; p < k; ++p) {
      const size_t off = chunk_begin(n, k, p), len = chunk_size(n, k, p);
      std::vector<std::pair<size_t, size_t>> ranges;
      if (op_ == Collective::AllReduce) ranges = {{0, n}};
      else if (op_ == Collective::ReduceScatter) ranges = {{off, off + len}};
      else ranges = {{0, off}, {off + len, n}};
      for (auto [lo, hi] : ranges) {
        if (hi <= lo) continue;
        if (rank == 0) sends.push_back({p, lo, hi - lo, /*put_off=*/lo});
        else if (rank == p) recvs.push_back({0, lo, buf + lo, hi - lo, RecvOp::Put});
      }
    }
    group_.step(rank, sends, recvs);  // nobody reads buf any more
  }

 private:
  CommGroup& group_;
  Collective op_;
};

}  // namespace

std::unique_ptr<AllReduce> make_naive_collective(CommGroup& group, Collective c) {
  return std::make_unique<NaiveCollective>(group, c);
}

std::unique_ptr<AllReduce> make_naive_allreduce(CommGroup& group) {
  return make_naive_collective(group, Collective::AllReduce);
}

// Its alpha-beta cost on an emulated link (link.h; its registry entry carries it): rank 0 pulls
// and adds the k-1 peers one after another ((k-1) (L + n/G)), then puts the sum into them one
// after another (the same): 2(k-1) (L + n/G). Across emulated nodes each transfer on its own link
// (LinkSpec::transfer_s(bytes, 0, p, k)): the peers of other nodes over the inter-node one.
namespace {
double from_root_s(const LinkCostQuery& q, double bytes) {  // rank 0 with every peer in turn
  double t = 0;
  for (int p = 1; p < q.k; ++p) t += q.link.transfer_s(bytes, 0, p, q.k);
  return t;
}
}  // namespace
double naive_link_cost(const LinkCostQuery& q) {
  return q.k <= 1 ? 0.0 : 2.0 * from_root_s(q, q.bytes);
}
// Reduce-scatter: the same pulls, then one shard to each peer: (k-1) (2L + n/G + n/(kG)).
double naive_reducescatter_link_cost(const LinkCostQuery& q) {
  return q.k <= 1 ? 0.0 : from_root_s(q, q.bytes) + from_root_s(q, q.bytes / q.k);
}
// All-gather: one shard from each peer, then all but its shard to each, the two ranges as two
// transfers: (k-1) (L + n/(kG)) + (k-1) (2L + (k-1)n/(kG)) (one range when the peer is the last).
double naive_allgather_link_cost(const LinkCostQuery& q) {
  if (q.k <= 1) return 0.0;
  const double shard = q.bytes / q.k;
  double second_range = 0;  // peers 1..k-2 get their two ranges as two transfers
  for (int p = 1; p + 1 < q.k; ++p) second_range += q.link.latency_s(0, p, q.k);
  return from_root_s(q, shard) + from_root_s(q, (q.k - 1) * shard) + second_range;
}

// Bytes rank q.rank sends in one call (comm_volume.h; its registry entry carries it): the lens of
// run()'s SendOps. Step 1: each peer its buffer (all-gather: its shard) to rank 0; step 2: rank 0
// to each peer the sum (all-reduce), its shard (reduce-scatter) or all but its shard (all-gather).
uint64_t naive_sent_bytes(const SentBytesQuery& q) {
  const size_t n = q.n;
  const int k = q.k;
  if (k <= 1 || n == 0) return 0;
  size_t floats = 0;
  if (q.rank != 0) floats = q.op == Collective::AllGather ? chunk_size(n, k, q.rank) : n;
  else if (q.op == Collective::AllReduce) floats = size_t(k - 1) * n;
  else if (q.op == Collective::ReduceScatter) floats = n - chunk_size(n, k, 0);
  else floats = size_t(k - 2) * n + chunk_size(n, k, 0);  // sum over p of n - |chunk p|
  return uint64_t(floats) * sizeof(float);
}

}  // namespace dpb
