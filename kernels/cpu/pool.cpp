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
    if (win == 2 && st == 2) {  // the common LeNet/ResNet case, one pass per output row
      for (int i = 0; i < oh; ++i) {
        const float* r0 = xp + size_t(2 * i) * s.w;
        const float* r1 = r0 + s.w;
        float* yr = yp + size_t(i) * ow;
        for (int j = 0; j < ow; ++j)
          yr[j] = 0.25f * ((r0[2 * j] + r0[2 * j + 1]) + (r1[2 * j] + r1[2 * j + 1]));
      }
      continue;
    }
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
    if (win == 2 && st == 2) {  // non-overlapping: write every covered entry once
      for (int i = 0; i < oh; ++i) {
        float* r0 = xp + size_t(2 * i) * s.w;
        float* r1 = r0 + s.w;
        const float* yr = yp + size_t(i) * ow;
        for (int j = 0; j < ow; ++j) {
          const float g = 0.25f * yr[j];
          r0[2 * j] = r0[2 * j + 1] = r1[2 * j] = r1[2 * j + 1] = g;
        }
        for (int j = 2 * ow; j < s.w; ++j) r0[j] = r1[j] = 0.0f;  // odd width: last column
      }
      for (size_t i = size_t(2 * oh) * s.w; i < size_t(s.h) * s.w; ++i) xp[i] = 0.0f;
      continue;
    }
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
