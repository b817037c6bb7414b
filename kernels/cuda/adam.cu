// adam.cu: CudaDevice adam_step, the Adam update of torch.optim.Adam / optax.adam (device.h): one
// grid-stride loop over the flat parameters on the compute stream, moments updated in place. The
// coefficients (bias corrections included) come from AdamStep::coeffs() on the host, the same
// floats the CPU twin (kernels/cpu/adam.cpp) applies; the launch is checked.
#include "kernels/cuda/cuda_device.h"

namespace dpb {

namespace {

constexpr int kBlock = 256;

__global__ void adam_kernel(float* __restrict__ w, const float* __restrict__ g,
                            float* __restrict__ m, float* __restrict__ v, size_t n,
                            AdamStep::Coeffs c) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const float gi = g[i];
    const float mi = c.b1 * m[i] + c.one_minus_b1 * gi;
    const float vi = c.b2 * v[i] + c.one_minus_b2 * (gi * gi);
    m[i] = mi;
    v[i] = vi;
    w[i] -= c.step_size * mi / (sqrtf(vi) / c.bc2_sqrt + c.eps);  // IEEE sqrt and division
  }
}

}  // namespace

void CudaDevice::adam_step(float* w, const float* g, float* m, float* v, size_t n,
                           const AdamStep& s) {
  DPB_CHECK(s.t >= 1, "adam_step: the step count t must be >= 1 (1-based), got " << s.t);
  if (n == 0) return;
  bind();
  adam_kernel<<<cuda_kernels::grid_for(n, kBlock), kBlock, 0, compute_>>>(w, g, m, v, n,
                                                                          s.coeffs());
  CUDA_CHECK_LAUNCH("adam_kernel");
  op_done("adam_step", compute_);
}

}  // namespace dpb
