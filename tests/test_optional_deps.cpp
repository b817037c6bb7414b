// test_optional_deps.cpp: every optional dependency this build lacks (CUDA, NCCL, MPI) says so in
// the one wording of src/core/optional_deps.h, through its <dep>_absent.cpp; a present one is
// skipped (a CPU-only configure, -DDPB_CUDA=OFF, checks the CUDA and NCCL ones).
// Run: dpb_tests --gtest_filter='OptionalDeps.*'
#include <gtest/gtest.h>

#include <string>

#include "collectives/allreduce.h"
#include "collectives/mpi/mpi_transport.h"
#include "kernels/backends.h"
#include "kernels/cuda/cuda_backend.h"
#include "src/core/check.h"
#include "src/core/optional_deps.h"

namespace dpb {
namespace {

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }
bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(OptionalDeps, OneWording) {
  EXPECT_EQ(built_without("NCCL", "install libnccl-dev"),
            "this dpbench was built without NCCL (install libnccl-dev)");
}

TEST(OptionalDeps, WithoutCudaTheBackendSaysSo) {
  if (cuda_built()) GTEST_SKIP() << "built with CUDA";
  const std::string why = cuda_unavailable_reason();
  EXPECT_TRUE(starts_with(why, "this dpbench was built without the CUDA backend (")) << why;
  EXPECT_EQ(backend_of_kind(BackendKind::Cuda).unavailable(), why);  // the backend table's words
  EXPECT_EQ(cuda_device_count(), 0);
  try {
    make_cuda_device(0, 0, false);
    ADD_FAILURE() << "make_cuda_device worked without CUDA";
  } catch (const Error& e) {
    EXPECT_TRUE(has(e.what(), why)) << e.what();
  }
}

TEST(OptionalDeps, WithoutNcclTheAlgorithmSaysSo) {
  if (!nccl_version().empty()) GTEST_SKIP() << "built with NCCL " << nccl_version();
  const std::string why = nccl_refuse_ranks(2, 2);
  EXPECT_TRUE(starts_with(why, "--allreduce nccl: this dpbench was built without NCCL (")) << why;
  EXPECT_TRUE(has(why, "; use --allreduce ring or naive")) << why;
}

TEST(OptionalDeps, WithoutMpiProcessesSaySo) {
  if (mpi_built()) GTEST_SKIP() << "built with MPI";
  try {
    MpiSession s;
    ADD_FAILURE() << "MpiSession started without MPI";
  } catch (const Error& e) {
    EXPECT_TRUE(starts_with(e.what(), "this dpbench was built without MPI (")) << e.what();
  }
}

}  // namespace
}  // namespace dpb
