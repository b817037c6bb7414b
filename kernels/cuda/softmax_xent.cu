// softmax_xent.cu: softmax cross-entropy on logits (n, classes) with float class labels (n).
// One warp per row: max and argmax (first index on ties, like std::max_element), log-sum-exp,
// loss = lse - logit[label], dlogits = scale * (softmax - onehot) when dlogits is not null.
// Per block the losses and correct counts are summed in shared memory, then added to the 2-float
// device buffer stats with one atomicAdd each (so stats[0] and [1] accumulate across calls).
// A label outside [0, classes) gives a NaN loss rather than an out-of-bounds read.
#include <cmath>

#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/reduce.cuh"

namespace dpb {

namespace {

constexpr int kBlock = 256;
constexpr int kRowsPerBlock = kBlock / 32;

__device__ __forceinline__ float warp_allsum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__global__ void softmax_xent_kernel(int n, int classes, const float* logits,
                                    const float* __restrict__ labels, float scale,
                                    float* dlogits, float* __restrict__ stats) {
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int row = blockIdx.x * kRowsPerBlock + warp;
  float loss = 0.f, correct = 0.f;
  if (row < n) {
    const float* z = logits + size_t(row) * classes;
    float m = -INFINITY;
    int am = classes;  // lane-local first maximum (j increases)
    for (int j = lane; j < classes; j += 32) {
      float v = z[j];
      if (v > m) { m = v; am = j; }
    }
    for (int o = 16; o > 0; o >>= 1) {  // combine lanes: larger value, then smaller index
      float om = __shfl_xor_sync(0xffffffffu, m, o);
      int oa = __shfl_xor_sync(0xffffffffu, am, o);
      if (om > m || (om == m && oa < am)) { m = om; am = oa; }
    }
    float sum = 0.f;
    for (int j = lane; j < classes; j += 32) sum += expf(z[j] - m);
    sum = warp_allsum(sum);
    float label = labels[row];
    bool valid = label >= 0.f && label < float(classes);
    int lab = valid ? int(label) : -1;
    float lse = logf(sum) + m;
    loss = valid ? lse - z[lab] : NAN;
    correct = (valid && am == lab) ? 1.f : 0.f;
    if (dlogits) {
      float* d = dlogits + size_t(row) * classes;
      float inv = 1.f / sum;
      for (int j = lane; j < classes; j += 32)
        d[j] = scale * (expf(z[j] - m) * inv - (j == lab ? 1.f : 0.f));
    }
  }
  cuda_kernels::block_add_row_stats<kRowsPerBlock>(loss, correct, scale, stats);
}

}  // namespace

void CudaDevice::softmax_xent(int n, int classes, const float* logits, const float* labels,
                              float scale, float* dlogits, float* stats) {
  DPB_CHECK(n > 0 && classes > 0, "softmax_xent: invalid shape n " << n << " classes " << classes);
  DPB_CHECK(stats, "softmax_xent: stats buffer is null");
  bind();
  int blocks = (n + kRowsPerBlock - 1) / kRowsPerBlock;
  softmax_xent_kernel<<<blocks, kBlock, 0, compute_>>>(n, classes, logits, labels, scale, dlogits,
                                                       stats);
  CUDA_CHECK_LAUNCH("softmax_xent_kernel");
  op_done("softmax_xent", compute_);
}

}  // namespace dpb
