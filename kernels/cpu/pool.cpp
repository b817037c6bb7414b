// pool.cpp: CpuDevice average pooling (win x win window, given stride, no padding) and global
// average pooling, forward and backward; OpenMP over the (n, c) planes.
#include "kernels/cpu/cpu_device.h"
#include "src/core/check.h"

namespace dpb {

void CpuDevice::avgpool_forward(const PoolShape& s, const float* x, float* y) {
  enter();
  DPB_CHECK(s.win > 0 && s.stride > 0 && s.oh() > 0 && s.ow() > 0, "avgpool_forward: bad " << s);
  const int oh = s.oh(), ow = s.ow(), win = s.win, st = s.stride;
  const long planes = long(s.n) * s.c;
  const float inv = 1.0f / float(win * win);
#pragma omp parallel for num_threads(threads_) if (s.x_size() >= cpu::kParallelMin)
  for (long pl = 0; pl < planes; ++pl) {
    const float* xp = x + size_t(pl) * s.h * s.w;
    float* yp = y + size_t(pl) * oh * ow;
    for (int i = 0; i < oh; ++i) {
      float* yr = yp + size_t(i) * ow;
      for (int j = 0; j < ow; ++j) yr[j] = 0.0f;
      for (int u = 0; u < win; ++u) {
        const float* xr = xp + size_t(i * st + u) * s.w;
        for (int v = 0; v < win; ++v)
          for (int j = 0; j < ow; ++j) yr[j] += xr[j * st + v];
      }
      for (int j = 0; j < ow; ++j) yr[j] *= inv;
    }
  }
}

void CpuDevice::avgpool_backward(const PoolShape& s, const float* dy, float* dx) {
  enter();
  DPB_CHECK(s.win > 0 && s.stride > 0 && s.oh() > 0 && s.ow() > 0, "avgpool_backward: bad " << s);
  const int oh = s.oh(), ow = s.ow(), win = s.win, st = s.stride;
  const long planes = long(s.n) * s.c;
  const float inv = 1.0f / float(win * win);
#pragma omp parallel for num_threads(threads_) if (s.x_size() >= cpu::kParallelMin)
  for (long pl = 0; pl < planes; ++pl) {
    float* xp = dx + size_t(pl) * s.h * s.w;
    const float* yp = dy + size_t(pl) * oh * ow;
    // Zero first: rows/columns not covered by any window (and overlaps) are handled uniformly.
    for (size_t i = 0; i < size_t(s.h) * s.w; ++i) xp[i] = 0.0f;
    for (int i = 0; i < oh; ++i) {
      const float* yr = yp + size_t(i) * ow;
      for (int u = 0; u < win; ++u) {
        float* xr = xp + size_t(i * st + u) * s.w;
        for (int v = 0; v < win; ++v)
          for (int j = 0; j < ow; ++j) xr[j * st + v] += yr[j] * inv;
      }
    }
  }
}

void CpuDevice::gap_forward(int n, int c, int hw, const float* x, float* y) {
  enter();
  const long planes = long(n) * c;
  const float inv = hw > 0 ? 1.0f / float(hw) : 0.0f;
#pragma omp parallel for num_threads(threads_) if (size_t(planes) * hw >= cpu::kParallelMin)
  for (long pl = 0; pl < planes; ++pl) {
    const float* xp = x + size_t(pl) * hw;
    float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
    for (int i = 0; i < hw; ++i) acc += xp[i];
    y[pl] = acc * inv;
  }
}

void CpuDevice::gap_backward(int n, int c, int hw, const float* dy, float* dx) {
  enter();
  const long planes = long(n) * c;
  const float inv = hw > 0 ? 1.0f / float(hw) : 0.0f;
#pragma omp parallel for num_threads(threads_) if (size_t(planes) * hw >= cpu::kParallelMin)
  for (long pl = 0; pl < planes; ++pl) {
    float* xp = dx + size_t(pl) * hw;
    const float g = dy[pl] * inv;
#pragma omp simd
    for (int i = 0; i < hw; ++i) xp[i] = g;
  }
}

}  // namespace dpb
