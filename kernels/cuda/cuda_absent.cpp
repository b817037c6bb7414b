// cuda_absent.cpp: the CUDA factory functions (cuda_backend.h) when dpbench is built without the
// CUDA backend (DPB_CUDA=OFF, or AUTO without nvcc or cuDNN); CMake builds it instead of
// kernels/cuda/*.cu. Asking for a CUDA device then is a clear error, not a crash.
#include "kernels/cuda/cuda_backend.h"
#include "src/core/check.h"
#include "src/core/optional_deps.h"

namespace dpb {
std::unique_ptr<Device> make_cuda_device(int, int, bool) {
  DPB_CHECK(false, "--backend cuda: " << cuda_unavailable_reason());
}
int cuda_device_count() { return 0; }
bool cuda_built() { return false; }
std::string cuda_unavailable_reason() {
  return built_without("the CUDA backend",
                       "reconfigure with -DDPB_CUDA=ON on a machine with the CUDA toolkit");
}
nlohmann::ordered_json cuda_info() { return nlohmann::ordered_json::object(); }
}  // namespace dpb
