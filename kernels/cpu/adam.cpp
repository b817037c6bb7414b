// adam.cpp: CpuDevice adam_step, the Adam update of torch.optim.Adam / optax.adam (device.h) as
// one OpenMP SIMD loop over the flat parameters, moments updated in place (parallel above
// cpu::kParallelMin elements, like the other elementwise ops).
#include <cmath>

#include "kernels/cpu/cpu_device.h"
#include "src/core/check.h"

namespace dpb {

void CpuDevice::adam_step(float* w, const float* g, float* m, float* v, size_t n,
                          const AdamStep& s) {
  enter();
  DPB_CHECK(s.t >= 1, "adam_step: the step count t must be >= 1 (1-based), got " << s.t);
  const AdamStep::Coeffs c = s.coeffs();
#pragma omp parallel for simd num_threads(threads_) if (n >= cpu::kParallelMin)
  for (size_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float mi = c.b1 * m[i] + c.one_minus_b1 * gi;
    const float vi = c.b2 * v[i] + c.one_minus_b2 * (gi * gi);
    m[i] = mi;
    v[i] = vi;
    w[i] -= c.step_size * mi / (std::sqrt(vi) / c.bc2_sqrt + c.eps);
  }
}

}  // namespace dpb
