// cuda_absent.cpp: the CUDA factory functions when dpbench is built without the CUDA backend
// (DPB_CUDA=OFF or no nvcc). Asking for a CUDA device then is a clear error, not a crash.
#ifndef DPB_HAVE_CUDA
#include "src/core/check.h"
#include "src/core/device.h"
#include "src/core/machine_info.h"

namespace dpb {
std::unique_ptr<Device> make_cuda_device(int, int, bool) {
  DPB_CHECK(false, "--backend cuda: this dpbench was built without the CUDA backend "
                   "(reconfigure with -DDPB_CUDA=ON on a machine with the CUDA toolkit)");
}
int cuda_device_count() { return 0; }
bool cuda_built() { return false; }
nlohmann::ordered_json cuda_info() { return nlohmann::ordered_json::object(); }
}  // namespace dpb
#endif
