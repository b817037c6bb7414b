// mse_loss.cpp: CpuDevice mean squared error over predictions (n, classes) against one-hot float
// class-id labels (the sharding notebook's loss, device.h): per row the mean over classes of
// (pred - onehot)^2; stats[0] += scale * sum of the rows' losses, stats[1] += rows whose argmax
// (first maximum) equals the label; dpred, when non-null, = scale * 2 (pred - onehot) / classes.
#include <cmath>

#include "kernels/cpu/cpu_device.h"
#include "src/core/check.h"

namespace dpb {

void CpuDevice::mse_loss(int n, int classes, const float* pred, const float* labels, float scale,
                         float* dpred, float* stats) {
  enter();
  DPB_CHECK(classes > 0 || n == 0, "mse_loss: classes must be > 0, got " << classes);
  for (int i = 0; i < n; ++i) {  // validate first: no exceptions may leave an OpenMP region
    const float l = labels[i];
    DPB_CHECK(l >= 0.0f && l < float(classes) && l == std::floor(l),
              "mse_loss: label " << l << " of row " << i << " is not a class id in [0, " << classes
                                 << ")");
  }
  const float coef = 2.0f * scale / float(classes);  // d(mean)/d(pred), times scale
  double loss_sum = 0.0;
  long correct = 0;
#pragma omp parallel for num_threads(threads_) reduction(+ : loss_sum, correct) \
    if (size_t(n) * classes >= cpu::kParallelMin / 4)
  for (int i = 0; i < n; ++i) {
    const float* p = pred + size_t(i) * classes;
    const int label = int(labels[i]);
    int arg = 0;
    float sq = 0.0f;
    for (int j = 0; j < classes; ++j) {
      if (p[j] > p[arg]) arg = j;
      const float d = p[j] - (j == label ? 1.0f : 0.0f);
      sq += d * d;
    }
    loss_sum += double(sq / float(classes));
    correct += arg == label;
    if (dpred) {
      float* d = dpred + size_t(i) * classes;
      for (int j = 0; j < classes; ++j) d[j] = coef * (p[j] - (j == label ? 1.0f : 0.0f));
    }
  }
  stats[0] += float(double(scale) * loss_sum);
  stats[1] += float(correct);
}

}  // namespace dpb
