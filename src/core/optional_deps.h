// optional_deps.h: what the floors share about the optional dependencies (CUDA with cuDNN, NCCL,
// MPI). Each lives in its own files; when it is missing CMake builds its <dep>_absent.cpp instead
// (kernels/cuda/cuda_absent.cpp, collectives/cuda/nccl_absent.cpp, collectives/mpi/mpi_absent.cpp),
// which defines the same functions and says so in the one wording of built_without().
#pragma once
#include <string>

namespace dpb {

// "this dpbench was built without <what> (<how to get it>)": every _absent file's message.
inline std::string built_without(const std::string& what, const std::string& how) {
  return "this dpbench was built without " + what + " (" + how + ")";
}

// The NCCL this dpbench runs with, e.g. "2.28.9" ("unknown" when NCCL cannot say); "" when built
// without NCCL. Defined by collectives/cuda/nccl_allreduce.cu or nccl_absent.cpp (CMake links
// one); declared here so that the CUDA backend's facts (kernels/cuda/cuda_info.cpp, `dpbench
// info`) name it without including collectives/, a floor they may not see.
std::string nccl_version();

}  // namespace dpb
