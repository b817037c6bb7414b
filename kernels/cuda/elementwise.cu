// elementwise.cu: CUDA kernels for the elementwise ops (fill, relu, axpy, sgd_step), data loading
// (uint8 -> float on the device), bias add and the per-channel sum used for bias gradients.
// All run on the device's compute stream; every launch is checked.
#include <algorithm>

#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/reduce.cuh"

namespace dpb {

namespace cuda_kernels {

namespace {

constexpr int kBlock = 256;

#define DPB_GRID_STRIDE(i, n)                                                         \
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);             \
       i += size_t(gridDim.x) * blockDim.x)

__global__ void fill_kernel(float* dst, float value, size_t n) {
  DPB_GRID_STRIDE(i, n) dst[i] = value;
}

__global__ void bytes_to_float_kernel(float* dst, const uint8_t* src, float divisor, size_t n) {
  DPB_GRID_STRIDE(i, n) dst[i] = float(src[i]) / divisor;  // exact division, as on the CPU
}

__global__ void relu_forward_kernel(const float* x, float* y, size_t n) {
  DPB_GRID_STRIDE(i, n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}

__global__ void relu_backward_kernel(const float* y, const float* dy, float* dx, size_t n) {
  DPB_GRID_STRIDE(i, n) dx[i] = y[i] > 0.f ? dy[i] : 0.f;
}

__global__ void axpy_kernel(float a, const float* x, float* y, size_t n) {
  DPB_GRID_STRIDE(i, n) y[i] += a * x[i];
}

__global__ void sgd_kernel(float* w, const float* g, float lr, size_t n) {
  DPB_GRID_STRIDE(i, n) w[i] -= lr * g[i];
}

__global__ void add_bias_kernel(float* y, const float* b, size_t total, int inner, int channels) {
  DPB_GRID_STRIDE(i, total) y[i] += b[(i / inner) % channels];
}

// Block (s, c) sums slice s of channel c's outer * inner values: db[c] directly when there is one
// slice, else partial[c * slices + s]. Threads stride over the flattened (o, j). Fixed order, no
// atomics: deterministic.
__global__ void channel_sum_kernel(const float* dy, float* out, int outer, int channels, int inner,
                                   size_t slice) {
  const int s = blockIdx.x, c = blockIdx.y;
  const size_t count = size_t(outer) * inner;
  const size_t lo = size_t(s) * slice, hi = lo + slice < count ? lo + slice : count;
  float acc = 0.f;
  for (size_t idx = lo + threadIdx.x; idx < hi; idx += blockDim.x) {
    size_t o = idx / inner, j = idx - o * inner;
    acc += dy[(o * channels + c) * inner + j];
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) out[size_t(c) * gridDim.x + s] = acc;
}

// Second pass: db[c] = sum of channel c's `slices` partial sums (one block per channel).
__global__ void sum_slices_kernel(const float* partial, float* db, int slices) {
  const int c = blockIdx.x;
  float acc = 0.f;
  for (int s = threadIdx.x; s < slices; s += blockDim.x) acc += partial[size_t(c) * slices + s];
  acc = block_sum(acc);
  if (threadIdx.x == 0) db[c] = acc;
}

// Slices per channel: one per 16K values, at most 64 (a single pass below 32K values).
int channel_slices(int outer, int inner) {
  const size_t count = size_t(outer) * inner;
  return int(std::clamp<size_t>(count / 16384, 1, 64));
}

}  // namespace

int grid_for(size_t n, int block) {
  size_t blocks = (n + block - 1) / block;
  return int(std::clamp<size_t>(blocks, 1, 8192));  // grid-stride loops cover the rest
}

void fill(float* dst, float value, size_t n, cudaStream_t st) {
  if (n == 0) return;
  fill_kernel<<<grid_for(n, kBlock), kBlock, 0, st>>>(dst, value, n);
  CUDA_CHECK_LAUNCH("fill_kernel");
}

void add_bias(float* y, const float* b, size_t total, int inner, int channels, cudaStream_t st) {
  if (total == 0) return;
  add_bias_kernel<<<grid_for(total, kBlock), kBlock, 0, st>>>(y, b, total, inner, channels);
  CUDA_CHECK_LAUNCH("add_bias_kernel");
}

size_t channel_sum_scratch(int outer, int channels, int inner) {
  const int slices = channel_slices(outer, inner);
  return slices > 1 ? size_t(channels) * slices : 0;
}

void channel_sum(const float* dy, float* db, int outer, int channels, int inner, float* scratch,
                 cudaStream_t st) {
  if (channels <= 0) return;
  const int slices = channel_slices(outer, inner);
  const size_t count = size_t(outer) * inner, slice = (count + slices - 1) / slices;
  if (slices == 1) {
    channel_sum_kernel<<<dim3(1, channels), kBlock, 0, st>>>(dy, db, outer, channels, inner, slice);
    CUDA_CHECK_LAUNCH("channel_sum_kernel");
    return;
  }
  DPB_CHECK(scratch, "channel_sum: " << slices << " slices need scratch");
  channel_sum_kernel<<<dim3(slices, channels), kBlock, 0, st>>>(dy, scratch, outer, channels,
                                                                inner, slice);
  CUDA_CHECK_LAUNCH("channel_sum_kernel (slices)");
  sum_slices_kernel<<<channels, 64, 0, st>>>(scratch, db, slices);
  CUDA_CHECK_LAUNCH("sum_slices_kernel");
}

}  // namespace cuda_kernels

using cuda_kernels::grid_for;
using cuda_kernels::kBlock;

void CudaDevice::load_images(float* dst, const uint8_t* host, size_t n) {
  if (n == 0) return;
  bind();
  const uint8_t* bytes = stage_bytes(host, n);
  cuda_kernels::bytes_to_float_kernel<<<grid_for(n, kBlock), kBlock, 0, compute_>>>(dst, bytes,
                                                                                   255.f, n);
  CUDA_CHECK_LAUNCH("bytes_to_float_kernel (load_images)");
  op_done("load_images", compute_);
}

void CudaDevice::load_labels(float* dst, const uint8_t* host, size_t n) {
  if (n == 0) return;
  bind();
  const uint8_t* bytes = stage_bytes(host, n);
  cuda_kernels::bytes_to_float_kernel<<<grid_for(n, kBlock), kBlock, 0, compute_>>>(dst, bytes,
                                                                                   1.f, n);
  CUDA_CHECK_LAUNCH("bytes_to_float_kernel (load_labels)");
  op_done("load_labels", compute_);
}

void CudaDevice::relu_forward(const float* x, float* y, size_t n) {
  if (n == 0) return;
  bind();
  cuda_kernels::relu_forward_kernel<<<grid_for(n, kBlock), kBlock, 0, compute_>>>(x, y, n);
  CUDA_CHECK_LAUNCH("relu_forward_kernel");
  op_done("relu_forward", compute_);
}

void CudaDevice::relu_backward(const float* y, const float* dy, float* dx, size_t n) {
  if (n == 0) return;
  bind();
  cuda_kernels::relu_backward_kernel<<<grid_for(n, kBlock), kBlock, 0, compute_>>>(y, dy, dx, n);
  CUDA_CHECK_LAUNCH("relu_backward_kernel");
  op_done("relu_backward", compute_);
}

void CudaDevice::axpy(float a, const float* x, float* y, size_t n) {
  if (n == 0) return;
  bind();
  cuda_kernels::axpy_kernel<<<grid_for(n, kBlock), kBlock, 0, compute_>>>(a, x, y, n);
  CUDA_CHECK_LAUNCH("axpy_kernel");
  op_done("axpy", compute_);
}

void CudaDevice::sgd_step(float* w, const float* g, float lr, size_t n) {
  if (n == 0) return;
  bind();
  cuda_kernels::sgd_kernel<<<grid_for(n, kBlock), kBlock, 0, compute_>>>(w, g, lr, n);
  CUDA_CHECK_LAUNCH("sgd_kernel");
  op_done("sgd_step", compute_);
}

}  // namespace dpb
