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

// The loss kernels' epilogue (one row per warp, kWarps warps a block): lane 0 of each warp passes
// its row's loss and correct count; thread 0 adds the block's sums to stats[0] (times scale) and
// stats[1], one atomicAdd each. Every thread of the block must call it.
template <int kWarps>
__device__ __forceinline__ void block_add_row_stats(float loss, float correct, float scale,
                                                    float* stats) {
  __shared__ float s_loss[kWarps], s_correct[kWarps];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    s_loss[warp] = loss;
    s_correct[warp] = correct;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float l = 0.f, c = 0.f;
    for (int w = 0; w < kWarps; ++w) {
      l += s_loss[w];
      c += s_correct[w];
    }
    atomicAdd(stats, scale * l);
    atomicAdd(stats + 1, c);
  }
}

}  // namespace dpb::cuda_kernels
