// pool.cu: average pooling (window win x win, stride, no padding; windows may overlap) and global
// average pooling, forward and backward, as own CUDA kernels on the compute stream.
//   avgpool forward: one thread per output; backward: one thread per input, gathering from every
//   window that covers it (no atomics, deterministic, dx fully overwritten).
//   gap forward: one warp per (n, c) row; backward: one thread per input.
#include <algorithm>

#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/reduce.cuh"

namespace dpb {

namespace {

constexpr int kBlock = 256;

__global__ void avgpool_forward_kernel(const float* x, float* y, size_t total, int h, int w,
                                       int oh, int ow, int win, int stride) {
  const float inv = 1.f / float(win * win);
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += size_t(gridDim.x) * blockDim.x) {
    int ox = int(i % ow), oy = int((i / ow) % oh);
    size_t plane = i / (size_t(ow) * oh);
    const float* xp = x + plane * h * w + size_t(oy) * stride * w + size_t(ox) * stride;
    float acc = 0.f;
    for (int r = 0; r < win; ++r)
      for (int s = 0; s < win; ++s) acc += xp[r * w + s];
    y[i] = acc * inv;
  }
}

__global__ void avgpool_backward_kernel(const float* dy, float* dx, size_t total, int h, int w,
                                        int oh, int ow, int win, int stride) {
  const float inv = 1.f / float(win * win);
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += size_t(gridDim.x) * blockDim.x) {
    int ix = int(i % w), iy = int((i / w) % h);
    size_t plane = i / (size_t(w) * h);
    // Windows oy with oy*stride <= iy < oy*stride + win, clipped to [0, oh).
    int oy0 = iy >= win ? (iy - win) / stride + 1 : 0, oy1 = min(iy / stride, oh - 1);
    int ox0 = ix >= win ? (ix - win) / stride + 1 : 0, ox1 = min(ix / stride, ow - 1);
    const float* dyp = dy + plane * oh * ow;
    float acc = 0.f;
    for (int oy = oy0; oy <= oy1; ++oy)
      for (int ox = ox0; ox <= ox1; ++ox) acc += dyp[oy * ow + ox];
    dx[i] = acc * inv;
  }
}

// One warp per row of hw values: y[row] = mean(x[row, :]).
__global__ void gap_forward_kernel(const float* x, float* y, size_t rows, int hw) {
  size_t row = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const float* xr = x + row * hw;
  float acc = 0.f;
  for (int j = lane; j < hw; j += 32) acc += xr[j];
  acc = cuda_kernels::warp_sum(acc);
  if (lane == 0) y[row] = acc / float(hw);
}

__global__ void gap_backward_kernel(const float* dy, float* dx, size_t total, int hw) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += size_t(gridDim.x) * blockDim.x)
    dx[i] = dy[i / hw] / float(hw);
}

void check_pool(const PoolShape& s, const char* op) {
  DPB_CHECK(s.n > 0 && s.c > 0 && s.win > 0 && s.stride > 0 && s.h >= s.win && s.w >= s.win,
            op << ": invalid pooling shape (" << s.n << "," << s.c << "," << s.h << "," << s.w
               << ") window " << s.win << " stride " << s.stride);
}

}  // namespace

void CudaDevice::avgpool_forward(const PoolShape& s, const float* x, float* y) {
  check_pool(s, "avgpool_forward");
  bind();
  size_t total = s.y_size();
  avgpool_forward_kernel<<<cuda_kernels::grid_for(total, kBlock), kBlock, 0, compute_>>>(
      x, y, total, s.h, s.w, s.oh(), s.ow(), s.win, s.stride);
  CUDA_CHECK_LAUNCH("avgpool_forward_kernel");
  op_done("avgpool_forward", compute_);
}

void CudaDevice::avgpool_backward(const PoolShape& s, const float* dy, float* dx) {
  check_pool(s, "avgpool_backward");
  bind();
  size_t total = s.x_size();
  avgpool_backward_kernel<<<cuda_kernels::grid_for(total, kBlock), kBlock, 0, compute_>>>(
      dy, dx, total, s.h, s.w, s.oh(), s.ow(), s.win, s.stride);
  CUDA_CHECK_LAUNCH("avgpool_backward_kernel");
  op_done("avgpool_backward", compute_);
}

void CudaDevice::gap_forward(int n, int c, int hw, const float* x, float* y) {
  DPB_CHECK(n > 0 && c > 0 && hw > 0, "gap_forward: invalid shape " << n << "x" << c << "x" << hw);
  bind();
  size_t rows = size_t(n) * c;
  size_t blocks = (rows * 32 + kBlock - 1) / kBlock;
  gap_forward_kernel<<<unsigned(blocks), kBlock, 0, compute_>>>(x, y, rows, hw);
  CUDA_CHECK_LAUNCH("gap_forward_kernel");
  op_done("gap_forward", compute_);
}

void CudaDevice::gap_backward(int n, int c, int hw, const float* dy, float* dx) {
  DPB_CHECK(n > 0 && c > 0 && hw > 0, "gap_backward: invalid shape " << n << "x" << c << "x" << hw);
  bind();
  size_t total = size_t(n) * c * hw;
  gap_backward_kernel<<<cuda_kernels::grid_for(total, kBlock), kBlock, 0, compute_>>>(dy, dx,
                                                                                     total, hw);
  CUDA_CHECK_LAUNCH("gap_backward_kernel");
  op_done("gap_backward", compute_);
}

}  // namespace dpb
