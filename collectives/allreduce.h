// allreduce.h: sum all-reduce across the k ranks of a CommGroup, written once over Device's comm
// primitives so the CPU and CUDA backends run the same schedule.
//
// Every rank calls run() concurrently (one thread per rank) with its own buffer of n floats on its
// own device; on return (after dev.comm_synchronize() for CUDA) every buffer holds the elementwise
// sum. Calls are collective: all ranks must make the same sequence of calls with the same n.
//
//   naive: d2l's textbook version: device 0 copies every replica's buffer to itself, sums, and
//          copies the result back to every replica.
//   ring:  reduce-scatter then all-gather over k chunks (sizes differ by at most one), 2(k-1)
//          steps, each rank reducing its own chunk with loads from its left neighbour.
//   nccl:  ncclAllReduce (CUDA backend only; collectives/nccl_allreduce.cu).
#pragma once
#include <barrier>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "src/core/device.h"

namespace dpb {

// Shared by the k ranks: a barrier and a table of published pointers.
class CommGroup {
 public:
  CommGroup(int k, std::vector<Device*> devices);
  int size() const { return k_; }
  Device& device(int rank) const { return *devs_[rank]; }
  // Publish this rank's buffer and wait until every rank has published (ends with barrier()).
  void exchange(int rank, float* buf);
  float* peer(int rank) const { return ptrs_[rank]; }
  // Device-ordered barrier: when it returns on every rank, comm work issued by every rank before
  // the barrier is ordered before comm work issued after it on any rank.
  void barrier(int rank);

 private:
  int k_;
  std::vector<Device*> devs_;
  std::vector<float*> ptrs_;
  std::barrier<> host_barrier_;
};

class AllReduce {
 public:
  virtual ~AllReduce() = default;
  virtual std::string name() const = 0;
  virtual void run(int rank, float* buf, size_t n) = 0;
};

// algorithm: "naive" | "ring" | "nccl". Throws dpb::Error naming the algorithm when unknown or
// not available on this group's backend.
std::unique_ptr<AllReduce> make_allreduce(const std::string& algorithm, CommGroup& group);

// Chunk c of n floats split into k chunks whose sizes differ by at most one.
inline size_t chunk_begin(size_t n, int k, int c) {
  size_t base = n / k, rem = n % k;
  return c * base + (size_t(c) < rem ? c : rem);
}
inline size_t chunk_size(size_t n, int k, int c) { return n / k + (size_t(c) < n % k ? 1 : 0); }

}  // namespace dpb
