// softmax_xent.cpp: CpuDevice softmax cross-entropy over logits (n, classes) with float class-id
// labels. Numerically stable (max-shifted log-sum-exp). stats[0] += scale * sum of losses,
// stats[1] += number of rows whose argmax (first maximum) equals the label; dlogits, when
// non-null, = scale * (softmax - onehot).
#include <cmath>

#include "kernels/cpu/cpu_device.h"
#include "src/core/check.h"

namespace dpb {

void CpuDevice::softmax_xent(int n, int classes, const float* logits, const float* labels,
                             float scale, float* dlogits, float* stats) {
  enter();
  DPB_CHECK(classes > 0 || n == 0, "softmax_xent: classes must be > 0, got " << classes);
  for (int i = 0; i < n; ++i) {  // validate first: no exceptions may leave an OpenMP region
    const float l = labels[i];
    DPB_CHECK(l >= 0.0f && l < float(classes) && l == std::floor(l),
              "softmax_xent: label " << l << " of row " << i << " is not a class id in [0, "
                                     << classes << ")");
  }
  double loss_sum = 0.0;
  long correct = 0;
#pragma omp parallel for num_threads(threads_) reduction(+ : loss_sum, correct) \
    if (size_t(n) * classes >= cpu::kParallelMin / 4)
  for (int i = 0; i < n; ++i) {
    const float* z = logits + size_t(i) * classes;
    const int label = int(labels[i]);
    int arg = 0;
    float mx = z[0];
    for (int j = 1; j < classes; ++j)
      if (z[j] > mx) {
        mx = z[j];
        arg = j;
      }
    float sum = 0.0f;
    for (int j = 0; j < classes; ++j) sum += std::exp(z[j] - mx);
    const float lse = std::log(sum);
    loss_sum += double(lse - (z[label] - mx));
    correct += arg == label;
    if (dlogits) {
      float* d = dlogits + size_t(i) * classes;
      const float inv = scale / sum;
      for (int j = 0; j < classes; ++j) d[j] = std::exp(z[j] - mx) * inv;
      d[label] -= scale;
    }
  }
  stats[0] += float(double(scale) * loss_sum);
  stats[1] += float(correct);
}

}  // namespace dpb
