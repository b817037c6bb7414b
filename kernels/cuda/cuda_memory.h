// cuda_memory.h: the allocation bookkeeping that the CUDA backend's files share (internal to
// kernels/cuda). Every buffer CudaDevice::alloc makes is recorded process-wide with its GPU, so
// that comm ops can tell whether this GPU's kernels may dereference a pointer without calling
// cudaPointerGetAttributes twice per call. Defined in cuda_device.cpp.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

namespace dpb {

void track_cuda_alloc(const void* p, size_t bytes, int gpu);
void untrack_cuda_alloc(const void* p);
int cuda_alloc_gpu(const void* p);  // the GPU holding p; -1: not from CudaDevice::alloc
// Throws naming what was being allocated, its size and the GPU's free/total memory.
[[noreturn]] void fail_cuda_alloc(cudaError_t e, const char* what, size_t bytes, int gpu);

}  // namespace dpb
