// cuda_backend.h: what the rest of dpbench may ask of the CUDA backend without the CUDA headers.
// Defined by kernels/cuda/*.cu when the backend is built, else by kernels/cuda/cuda_absent.cpp
// (CMake picks one), where each says this dpbench was built without CUDA.
#pragma once
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "src/core/device.h"

namespace dpb {

// Rank `rank`'s device on CUDA ordinal `gpu` (rank mod GPU count). Throws when CUDA is not built.
std::unique_ptr<Device> make_cuda_device(int rank, int gpu, bool tf32);
int cuda_device_count();  // 0 when not built with CUDA or no GPU/driver
bool cuda_built();
// Why no CUDA GPU can be used here ("" when cuda_device_count() > 0); for test skips and messages.
std::string cuda_unavailable_reason();
// The CUDA facts of `dpbench info` (driver, runtime, libraries, GPUs); {} without CUDA.
nlohmann::ordered_json cuda_info();

}  // namespace dpb
