// cuda_info.cpp: the CUDA backend's facts for `dpbench info` and the benchmark context (see
// kernels/machine_info.h): driver, runtime, cuDNN, NCCL and cuBLAS versions and every GPU.
// Host API only, so a plain C++ file; compiled only with the CUDA backend.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <library_types.h>

#include <cmath>
#include <string>

#include "collectives/allreduce.h"
#include "src/core/device.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/machine_info.h"

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
  return j;
}

}  // namespace dpb
