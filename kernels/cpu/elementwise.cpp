// elementwise.cpp: CpuDevice relu forward/backward, axpy and sgd_step as OpenMP SIMD loops
// (parallel only above cpu::kParallelMin elements, where a fork pays off).
#include "kernels/cpu/cpu_device.h"

namespace dpb {

void CpuDevice::relu_forward(const float* x, float* y, size_t n) {
  enter();
#pragma omp parallel for simd num_threads(threads_) if (n >= cpu::kParallelMin)
  for (size_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void CpuDevice::relu_backward(const float* y, const float* dy, float* dx, size_t n) {
  enter();
#pragma omp parallel for simd num_threads(threads_) if (n >= cpu::kParallelMin)
  for (size_t i = 0; i < n; ++i) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

void CpuDevice::axpy(float a, const float* x, float* y, size_t n) {
  enter();
#pragma omp parallel for simd num_threads(threads_) if (n >= cpu::kParallelMin)
  for (size_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void CpuDevice::sgd_step(float* w, const float* g, float lr, size_t n) {
  enter();
#pragma omp parallel for simd num_threads(threads_) if (n >= cpu::kParallelMin)
  for (size_t i = 0; i < n; ++i) w[i] -= lr * g[i];
}

}  // namespace dpb
