// mpi_absent.cpp: mpi.h's functions in a build without MPI (CMake found none): each says so.
#include <cstdio>
#include <cstdlib>

#include "collectives/mpi/mpi_transport.h"
#include "src/core/check.h"

namespace dpb {
namespace {
const char* kNoMpi =
    "this dpbench was built without MPI (install libopenmpi-dev, e.g. scripts/setup.sh, and "
    "reconfigure), so it cannot run one rank per process";
}

bool mpi_built() { return false; }
MpiSession::MpiSession() { throw Error(kNoMpi); }
MpiSession::~MpiSession() = default;
std::unique_ptr<Transport> make_mpi_transport(Device&, int, int, const LinkSpec&) {
  throw Error(kNoMpi);
}
void mpi_allreduce_sum(Transport&, int, float*, size_t) { throw Error(kNoMpi); }
void mpi_abort_job(int rank, const std::string& msg) {
  std::fprintf(stderr, "dpbench: rank %d: error: %s\n", rank, msg.c_str());
  std::exit(2);
}

}  // namespace dpb
