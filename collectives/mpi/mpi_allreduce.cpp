// mpi_allreduce.cpp: `--allreduce mpi`: MPI_Allreduce in place, the MPI library's own algorithm,
// the peer our schedules (naive, ring, ...) are measured against in the same run. Runs only with
// one process per rank (registry.cpp says so). Built by make_allreduce("mpi", group). Built in
// every build: without MPI, mpi_absent.cpp's mpi_allreduce_sum says this build has no MPI.
#include <memory>

#include "collectives/allreduce.h"
#include "collectives/mpi/mpi_transport.h"

namespace dpb {
namespace {

class MpiAllReduce final : public AllReduce {
 public:
  explicit MpiAllReduce(CommGroup& group) : group_(group) {}
  std::string name() const override { return "mpi"; }
  void run(int rank, float* buf, size_t n) override {
    if (group_.size() == 1 || n == 0) return;
    mpi_allreduce_sum(group_.transport(), rank, buf, n);
  }

 private:
  CommGroup& group_;
};

}  // namespace

std::unique_ptr<AllReduce> make_mpi_allreduce(CommGroup& group) {
  return std::make_unique<MpiAllReduce>(group);
}

}  // namespace dpb
