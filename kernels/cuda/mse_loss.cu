// mse_loss.cu: mean squared error of predictions (n, classes) against one-hot float class labels
// (n), the CUDA twin of kernels/cpu/mse_loss.cpp. One warp per row: argmax (first index on ties),
// loss = mean over classes of (pred - onehot)^2, dpred = scale * 2 (pred - onehot) / classes when
// dpred is not null. Per block the losses and correct counts are summed in shared memory, then
// added to the 2-float device buffer stats with one atomicAdd each (as softmax_xent.cu). A label
// outside [0, classes) gives a NaN loss.
#include <cmath>

#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/reduce.cuh"

namespace dpb {

namespace {

constexpr int kBlock = 256;
constexpr int kRowsPerBlock = kBlock / 32;

__global__ void mse_loss_kernel(int n, int classes, const float* __restrict__ pred,
                                const float* __restrict__ labels, float scale, float coef,
                                float* __restrict__ dpred, float* __restrict__ stats) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int row = blockIdx.x * kRowsPerBlock + warp;
  float loss = 0.f, correct = 0.f;
  if (row < n) {
    const float* p = pred + size_t(row) * classes;
    const float label = labels[row];
    const bool valid = label >= 0.f && label < float(classes);
    const int lab = valid ? int(label) : -1;
    float m = -INFINITY, sq = 0.f;
    int am = classes;  // lane-local first maximum (j increases)
    for (int j = lane; j < classes; j += 32) {
      const float v = p[j];
      if (v > m) { m = v; am = j; }
      const float d = v - (j == lab ? 1.f : 0.f);
      sq += d * d;
    }
    for (int o = 16; o > 0; o >>= 1) {  // combine lanes: larger value, then smaller index
      const float om = __shfl_xor_sync(0xffffffffu, m, o);
      const int oa = __shfl_xor_sync(0xffffffffu, am, o);
      if (om > m || (om == m && oa < am)) { m = om; am = oa; }
      sq += __shfl_xor_sync(0xffffffffu, sq, o);
    }
    loss = valid ? sq / float(classes) : NAN;
    correct = (valid && am == lab) ? 1.f : 0.f;
    if (dpred) {
      float* d = dpred + size_t(row) * classes;
      for (int j = lane; j < classes; j += 32) d[j] = coef * (p[j] - (j == lab ? 1.f : 0.f));
    }
  }
  cuda_kernels::block_add_row_stats<kRowsPerBlock>(loss, correct, scale, stats);
}

}  // namespace

void CudaDevice::mse_loss(int n, int classes, const float* pred, const float* labels, float scale,
                          float* dpred, float* stats) {
  DPB_CHECK(n >= 0 && classes > 0, "mse_loss: invalid shape n " << n << " classes " << classes);
  DPB_CHECK(stats, "mse_loss: stats buffer is null");
  if (n == 0) return;
  bind();
  const float coef = 2.0f * scale / float(classes);  // as the CPU twin computes it
  const int blocks = (n + kRowsPerBlock - 1) / kRowsPerBlock;
  mse_loss_kernel<<<blocks, kBlock, 0, compute_>>>(n, classes, pred, labels, scale, coef, dpred,
                                                   stats);
  CUDA_CHECK_LAUNCH("mse_loss_kernel");
  op_done("mse_loss", compute_);
}

}  // namespace dpb
