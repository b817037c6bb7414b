// mpi_absent.cpp: mpi_transport.h's functions in a build without MPI (CMake found none): CMake
// builds it instead of mpi_transport.cpp and mpi_messages.cpp, and each says so.
#include <cstdio>
#include <cstdlib>

#include "collectives/mpi/mpi_transport.h"
#include "src/core/check.h"
#include "src/core/launcher.h"
#include "src/core/optional_deps.h"

namespace dpb {
namespace {
std::string no_mpi() {
  return built_without("MPI", "install libopenmpi-dev, e.g. scripts/setup.sh, and reconfigure") +
         ", so it cannot run one rank per process";
}
}  // namespace

bool mpi_built() { return false; }
MpiSession::MpiSession() { throw Error(no_mpi()); }
MpiSession::~MpiSession() = default;
std::unique_ptr<Transport> make_mpi_transport(Device&, int, int, const LinkSpec&) {
  throw Error(no_mpi());
}
void mpi_allreduce_sum(Transport&, int, float*, size_t) { throw Error(no_mpi()); }
void mpi_reduce_scatter_sum(Transport&, int, float*, size_t) { throw Error(no_mpi()); }
void mpi_allgather(Transport&, int, float*, size_t) { throw Error(no_mpi()); }
bool mpi_direct_path(Transport&) { return false; }
void mpi_abort_job(int rank, const std::string& msg, int code) {
  std::fprintf(stderr, "dpbench: %s\n", rank_error_message(rank, msg).c_str());  // no "rank R: " twice
  std::exit(code);
}

}  // namespace dpb
