// reduce.cuh: warp and block sum reductions shared by the CUDA kernels (device code only).
#pragma once
#include <cuda_runtime.h>

namespace dpb::cuda_kernels {

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;  // complete in lane 0
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); the result is valid in thread 0.
// Every thread of the block must call it.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float partial[32];
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  int nwarps = blockDim.x >> 5;
  v = threadIdx.x < nwarps ? partial[threadIdx.x] : 0.f;
  if (warp == 0) v = warp_sum(v);
  __syncthreads();  // partial may be reused by a following call
  return v;
}

}  // namespace dpb::cuda_kernels
