// nccl_absent.cpp: the nccl all-reduce's (and reduce-scatter's, all-gather's) functions (collectives/allreduce.h, and nccl_version of
// src/core/optional_deps.h) in a build without NCCL: CMake picks this file instead of
// nccl_allreduce.cu when the CUDA backend is not built or NCCL was not found
// (cmake/cuda_deps.cmake). --allreduce nccl is then refused, saying why.
#include <memory>
#include <string>

#include "collectives/allreduce.h"
#include "collectives/shard.h"
#include "src/core/check.h"
#include "src/core/optional_deps.h"

namespace dpb {
namespace {
std::string no_nccl() {
  return "--allreduce nccl: " +
         built_without("NCCL", "install it, e.g. apt-get install libnccl-dev from NVIDIA's CUDA "
                               "repository or pip install nvidia-nccl-cu13, or set NCCL_ROOT, "
                               "and reconfigure") +
         "; use --allreduce ring or naive";
}
}  // namespace

std::string nccl_refuse_ranks(int, int) { return no_nccl(); }
int nccl_max_ranks_per_gpu() { return 1; }  // NCCL's default (no NCCL here to ask)
std::unique_ptr<AllReduce> make_nccl_allreduce(CommGroup&) { throw Error(no_nccl()); }
std::unique_ptr<AllReduce> make_nccl_collective(CommGroup&, Collective) { throw Error(no_nccl()); }
std::string nccl_version() { return ""; }

}  // namespace dpb
