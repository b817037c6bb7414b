// naive.cpp: d2l's textbook all-reduce. After the pointer exchange, rank 0 copies every other
// rank's buffer into a staging area on its own device, sums them into its own buffer, and copies
// the result back to every replica; the other ranks only take part in the two barriers. All the
// traffic goes through one device, so it scales poorly: it is the baseline the ring is measured
// against. Built by make_allreduce("naive", group); tested by tests/test_allreduce.cpp.
#include <memory>

#include "collectives/allreduce.h"

namespace dpb {
namespace {

class NaiveAllReduce final : public AllReduce {
 public:
  explicit NaiveAllReduce(CommGroup& group) : group_(group) {}
  std::string name() const override { return "naive"; }

  void reserve(int rank, size_t n) override {
    if (rank == 0) grow(n);  // only rank 0 touches staging_
  }

  void run(int rank, float* buf, size_t n) override {
    const int k = group_.size();
    if (k == 1 || n == 0) return;  // same decision on every rank: n is collective
    group_.exchange(rank, buf);
    if (rank == 0) {
      Device& dev = group_.device(0);
      grow(n);
      float* stage = staging_.get();
      for (int p = 1; p < k; ++p) dev.comm_copy(stage + size_t(p - 1) * n, group_.peer(p), n);
      for (int p = 1; p < k; ++p) dev.comm_reduce(buf, stage + size_t(p - 1) * n, n);
      for (int p = 1; p < k; ++p) dev.comm_copy(group_.peer(p), buf, n);
    }
    group_.barrier(rank);  // every replica holds the sum; rank 0 is done reading peers
  }

 private:
  void grow(size_t n) {
    const size_t need = size_t(group_.size() - 1) * n;
    if (need == 0 || staging_.size() >= need) return;
    staging_.reset();
    staging_ = Buffer(group_.device(0), need, "naive all-reduce staging");
  }

  CommGroup& group_;
  Buffer staging_;  // (k-1) * n floats on rank 0's device, grown as needed
};

}  // namespace

std::unique_ptr<AllReduce> make_naive_allreduce(CommGroup& group) {
  return std::make_unique<NaiveAllReduce>(group);
}

}  // namespace dpb
