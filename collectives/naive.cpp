// naive.cpp: d2l's textbook all-reduce. Step 1: rank 0 receives every other rank's buffer and
// adds it into its own; step 2: rank 0 puts the sum into every other rank's buffer. All the
// traffic goes through one rank, so it scales poorly: it is the baseline the ring is measured
// against. Written over the transport's steps (transport.h), so it runs across threads and
// processes; step 1 is unfenced (the peers only wait for the put), so the threads transport
// needs two barriers a call, as the textbook's "copy to device 0, sum, copy back" does.
// Built by make_allreduce("naive", group); tested by tests/test_allreduce.cpp.
#include <memory>
#include <vector>

#include "collectives/allreduce.h"
#include "collectives/link.h"

namespace dpb {
namespace {

class NaiveAllReduce final : public AllReduce {
 public:
  explicit NaiveAllReduce(CommGroup& group) : group_(group) {}
  std::string name() const override { return "naive"; }

  void run(int rank, float* buf, size_t n) override {
    const int k = group_.size();
    if (k == 1 || n == 0) return;  // same decision on every rank: n is collective
    group_.begin(rank, buf);
    std::vector<SendOp> sends;
    std::vector<RecvOp> recvs;
    if (rank == 0)
      for (int p = 1; p < k; ++p) recvs.push_back({p, 0, buf, n, RecvOp::Reduce});
    else
      sends.push_back({0, 0, n});
    // Unfenced: a peer's buffer is next written by rank 0's put, after rank 0 has read it.
    group_.step(rank, sends, recvs, /*fence=*/false);  // rank 0 holds the sum
    sends.clear();
    recvs.clear();
    if (rank == 0)
      for (int p = 1; p < k; ++p) sends.push_back({p, 0, n, /*put_off=*/0});
    else
      recvs.push_back({0, 0, buf, n, RecvOp::Put});
    group_.step(rank, sends, recvs);  // every replica holds the sum; nobody reads buf any more
  }

 private:
  CommGroup& group_;
};

}  // namespace

std::unique_ptr<AllReduce> make_naive_allreduce(CommGroup& group) {
  return std::make_unique<NaiveAllReduce>(group);
}

// Its alpha-beta cost on an emulated link (link.h; its registry entry carries it): rank 0 pulls
// and adds the k-1 peers one after another ((k-1) (L + n/G)), then puts the sum into them one
// after another (the same): 2(k-1) (L + n/G).
double naive_link_cost(const LinkCostQuery& q) {
  return q.k <= 1 ? 0.0 : 2.0 * (q.k - 1) * q.link.transfer_s(q.bytes);
}

}  // namespace dpb
