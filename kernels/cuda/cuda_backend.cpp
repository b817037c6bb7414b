// cuda_backend.cpp: what the rest of dpbench asks of the CUDA backend (cuda_backend.h): the
// device factory, the GPU count, why no GPU can be used, and the CUDA facts of `dpbench info` and
// the benchmark context (kernels/machine_info.h): driver, runtime, cuDNN, NCCL and cuBLAS versions
// and every GPU. Host API only, so a plain C++ file; built with the CUDA backend, else
// cuda_absent.cpp defines the same functions.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <library_types.h>

#include <cmath>
#include <memory>
#include <string>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_device.h"
#include "src/core/optional_deps.h"

namespace dpb {
namespace {

std::string dotted(int v, int major_div, int minor_div) {  // 12040 -> "12.4"
  return std::to_string(v / major_div) + "." + std::to_string((v % major_div) / minor_div);
}

std::string three(long v) {  // major*10000 + minor*100 + patch -> "9.1.0"
  return std::to_string(v / 10000) + "." + std::to_string(v % 10000 / 100) + "." +
         std::to_string(v % 100);
}

}  // namespace

std::unique_ptr<Device> make_cuda_device(int rank, int gpu, bool tf32) {
  return std::make_unique<CudaDevice>(rank, gpu, tf32);
}

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

bool cuda_built() { return true; }

// In words a user can act on. A driver older than the runtime is the common case on a machine
// whose nvidia-smi lists GPUs.
std::string cuda_unavailable_reason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaSuccess) return n > 0 ? "" : "no CUDA GPU found (cudaGetDeviceCount found 0 GPUs)";
  (void)cudaGetLastError();  // not sticky, but leave nothing behind for the next call to find
  const std::string err = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
  if (e != cudaErrorInsufficientDriver) return "no CUDA GPU found (" + err + ")";
  int driver = 0, runtime = 0;  // the driver's version is 0 when no driver is loaded
  const bool have_driver = cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0;
  const bool have_runtime = cudaRuntimeGetVersion(&runtime) == cudaSuccess;
  const std::string rt = have_runtime ? dotted(runtime, 1000, 10) : "unknown";
  return "CUDA driver too old for this runtime: driver " +
         (have_driver ? dotted(driver, 1000, 10) : std::string("unknown")) + ", runtime " + rt +
         " (" + err + "); install an NVIDIA driver that supports CUDA " + rt +
         ", or build dpbench with a CUDA toolkit this driver supports";
}

nlohmann::ordered_json cuda_info() {
  nlohmann::ordered_json j;
  int v = 0;
  j["cuda_driver_version"] =
      cudaDriverGetVersion(&v) == cudaSuccess && v > 0 ? dotted(v, 1000, 10) : "unknown";
  j["cuda_runtime_version"] = cudaRuntimeGetVersion(&v) == cudaSuccess ? dotted(v, 1000, 10)
                                                                       : "unknown";
  j["cudnn_version"] = three(long(cudnnGetVersion()));  // 9.x: major*10000 + minor*100 + patch
  const std::string nccl = nccl_version();
  j["nccl_version"] = nccl.empty() ? "not built" : nccl;
  int maj = 0, min = 0, patch = 0;
  const bool blas = cublasGetProperty(MAJOR_VERSION, &maj) == CUBLAS_STATUS_SUCCESS &&
                    cublasGetProperty(MINOR_VERSION, &min) == CUBLAS_STATUS_SUCCESS &&
                    cublasGetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS;
  j["cublas_version"] = blas ? std::to_string(maj) + "." + std::to_string(min) + "." +
                                   std::to_string(patch)
                             : "unknown";
  nlohmann::ordered_json gpus = nlohmann::ordered_json::array();
  for (int g = 0; g < cuda_device_count(); ++g) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, g) != cudaSuccess) continue;
    gpus.push_back({{"name", prop.name},
                    {"memory_gib", std::round(double(prop.totalGlobalMem) / (1 << 30) * 10) / 10},
                    {"compute_capability",
                     std::to_string(prop.major) + "." + std::to_string(prop.minor)}});
  }
  j["gpus"] = gpus;
  (void)cudaGetLastError();  // a failed query above leaves nothing for the next call to find
  return j;
}

}  // namespace dpb
