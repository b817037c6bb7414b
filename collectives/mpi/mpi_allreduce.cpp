// mpi_allreduce.cpp: the MPI library's own collectives in place, the peers our schedules (naive,
// ring, ...) are measured against in the same run: `--allreduce mpi` (MPI_Allreduce), and the
// reduce-scatter and all-gather tables' mpi (shard.h): MPI_Reduce_scatter_block and MPI_Allgather
// (MPI_Reduce_scatter and MPI_Allgatherv when k does not divide n: shards of unequal size). Runs
// only with one process per rank (registry.cpp says so). Built by make_collective(c, "mpi", group).
// Built in every build: without MPI, mpi_absent.cpp's functions say this build has no MPI.
// Bytes sent: the library moves the data itself, so each call adds to the group's count
// (CommGroup::count_sent) the nominal count, the ring's (comm_volume.h, nccl-tests' convention:
// 2(k-1)/k of the buffer for the all-reduce, (k-1)/k for the others), not a count measured
// inside MPI (whose algorithm may send more or less).
#include <memory>

#include "collectives/allreduce.h"
#include "collectives/comm_volume.h"
#include "collectives/mpi/mpi_transport.h"
#include "collectives/shard.h"

namespace dpb {
namespace {

class MpiCollective final : public AllReduce {
 public:
  MpiCollective(CommGroup& group, Collective op) : group_(group), op_(op) {}
  std::string name() const override { return "mpi"; }
  void run(int rank, float* buf, size_t n) override {
    if (group_.size() == 1 || n == 0) return;
    switch (op_) {
      case Collective::ReduceScatter: mpi_reduce_scatter_sum(group_.transport(), rank, buf, n); break;
      case Collective::AllGather: mpi_allgather(group_.transport(), rank, buf, n); break;
      default: mpi_allreduce_sum(group_.transport(), rank, buf, n);
    }
    group_.count_sent(rank, library_sent_bytes(op_, n, group_.size(), rank));
  }

 private:
  CommGroup& group_;
  Collective op_;
};

}  // namespace

std::unique_ptr<AllReduce> make_mpi_collective(CommGroup& group, Collective c) {
  return std::make_unique<MpiCollective>(group, c);
}

std::unique_ptr<AllReduce> make_mpi_allreduce(CommGroup& group) {
  return make_mpi_collective(group, Collective::AllReduce);
}

}  // namespace dpb
