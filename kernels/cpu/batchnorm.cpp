// batchnorm.cpp: CpuDevice batch norm over (n, c, hw) with per-channel statistics.
//   train:    batch mean and biased variance normalize; running_mean/var updated with momentum,
//             running_var from the unbiased variance (as PyTorch); saves mean and 1/sqrt(var+eps)
//   infer:    normalizes with the running statistics
//   backward: dx = gamma*invstd/m * (m*dy - sum(dy) - xhat*sum(dy*xhat)), m = n*hw
// Channels are independent, so OpenMP runs over c; sums are accumulated in double.
#include <cmath>

#include "kernels/cpu/cpu_device.h"

namespace dpb {

void CpuDevice::batchnorm_forward_train(const BnShape& s, const float* x, const float* gamma,
                                        const float* beta, float* y, float* running_mean,
                                        float* running_var, float* save_mean, float* save_invstd) {
  enter();
  const size_t hw = size_t(s.hw), stride = size_t(s.c) * hw, m = size_t(s.n) * hw;
  if (m == 0) return;
#pragma omp parallel for num_threads(threads_) if (s.size() >= cpu::kParallelMin)
  for (int ch = 0; ch < s.c; ++ch) {
    double sum = 0.0;
    for (int i = 0; i < s.n; ++i) {
      const float* xp = x + i * stride + ch * hw;
      float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
      for (size_t j = 0; j < hw; ++j) acc += xp[j];
      sum += acc;
    }
    const double mean = sum / double(m);
    double sq = 0.0;
    for (int i = 0; i < s.n; ++i) {
      const float* xp = x + i * stride + ch * hw;
      const float mf = float(mean);
      float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
      for (size_t j = 0; j < hw; ++j) acc += (xp[j] - mf) * (xp[j] - mf);
      sq += acc;
    }
    const double var = sq / double(m);
    const float invstd = float(1.0 / std::sqrt(var + double(s.eps)));
    const float scale = gamma[ch] * invstd, shift = beta[ch] - float(mean) * scale;
    for (int i = 0; i < s.n; ++i) {
      const float* xp = x + i * stride + ch * hw;
      float* yp = y + i * stride + ch * hw;
#pragma omp simd
      for (size_t j = 0; j < hw; ++j) yp[j] = xp[j] * scale + shift;
    }
    const double unbiased = m > 1 ? sq / double(m - 1) : var;
    running_mean[ch] = float((1.0 - s.momentum) * running_mean[ch] + s.momentum * mean);
    running_var[ch] = float((1.0 - s.momentum) * running_var[ch] + s.momentum * unbiased);
    save_mean[ch] = float(mean);
    save_invstd[ch] = invstd;
  }
}

void CpuDevice::batchnorm_forward_infer(const BnShape& s, const float* x, const float* gamma,
                                        const float* beta, const float* running_mean,
                                        const float* running_var, float* y) {
  enter();
  const size_t hw = size_t(s.hw);
  const long planes = long(s.n) * s.c;
#pragma omp parallel for num_threads(threads_) if (s.size() >= cpu::kParallelMin)
  for (long pl = 0; pl < planes; ++pl) {
    const int ch = int(pl % s.c);
    const float scale = gamma[ch] / std::sqrt(running_var[ch] + s.eps);
    const float shift = beta[ch] - running_mean[ch] * scale;
    const float* xp = x + pl * hw;
    float* yp = y + pl * hw;
#pragma omp simd
    for (size_t j = 0; j < hw; ++j) yp[j] = xp[j] * scale + shift;
  }
}

void CpuDevice::batchnorm_backward(const BnShape& s, const float* x, const float* dy,
                                   const float* gamma, const float* save_mean,
                                   const float* save_invstd, float* dx, float* dgamma,
                                   float* dbeta) {
  enter();
  const size_t hw = size_t(s.hw), stride = size_t(s.c) * hw, m = size_t(s.n) * hw;
#pragma omp parallel for num_threads(threads_) if (s.size() >= cpu::kParallelMin)
  for (int ch = 0; ch < s.c; ++ch) {
    const float mean = save_mean[ch], invstd = save_invstd[ch];
    double sdy = 0.0, sdyx = 0.0;  // sum(dy), sum(dy * xhat)
    for (int i = 0; i < s.n; ++i) {
      const float* xp = x + i * stride + ch * hw;
      const float* gp = dy + i * stride + ch * hw;
      float a = 0.0f, b = 0.0f;
#pragma omp simd reduction(+ : a, b)
      for (size_t j = 0; j < hw; ++j) {
        a += gp[j];
        b += gp[j] * (xp[j] - mean);
      }
      sdy += a;
      sdyx += b;
    }
    sdyx *= invstd;
    dbeta[ch] = float(sdy);
    dgamma[ch] = float(sdyx);
    if (m == 0) continue;
    const float k = gamma[ch] * invstd;
    const float mdy = float(sdy / double(m)), mdyx = float(sdyx / double(m));
    for (int i = 0; i < s.n; ++i) {
      const float* xp = x + i * stride + ch * hw;
      const float* gp = dy + i * stride + ch * hw;
      float* dp = dx + i * stride + ch * hw;
#pragma omp simd
      for (size_t j = 0; j < hw; ++j) dp[j] = k * (gp[j] - mdy - (xp[j] - mean) * invstd * mdyx);
    }
  }
}

}  // namespace dpb
