// batchnorm_cudnn.cu: batch normalization over (n, c, hw), statistics per channel, through cuDNN
// in CUDNN_BATCHNORM_SPATIAL mode (x viewed as NCHW (n, c, hw, 1); gamma, beta and the statistics
// as (1, c, 1, 1)). Dense layers use hw = 1.
// cuDNN conventions, which the CPU twin must share for the tests to agree:
//   running = (1 - momentum) * running + momentum * batch, with cuDNN's exponentialAverageFactor =
//   momentum; the running variance takes the unbiased batch variance (times m / (m - 1), m = n*hw),
//   as PyTorch does; save_invstd = 1 / sqrt(biased batch variance + eps).
#include "kernels/cuda/cuda_device.h"

namespace dpb {

CudaDevice::BnDescs::BnDescs(const BnShape& s) {
  try {
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&x));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&stats));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, s.n, s.c, s.hw,
                                           1));
    CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(stats, x, CUDNN_BATCHNORM_SPATIAL));
  } catch (...) {  // the destructor does not run for a constructor that throws
    if (x) cudnnDestroyTensorDescriptor(x);
    if (stats) cudnnDestroyTensorDescriptor(stats);
    throw;
  }
}

CudaDevice::BnDescs::~BnDescs() {
  if (x) cudnnDestroyTensorDescriptor(x);
  if (stats) cudnnDestroyTensorDescriptor(stats);
}

CudaDevice::BnDescs& CudaDevice::bn_descs(const BnShape& s) {
  DPB_CHECK(s.n > 0 && s.c > 0 && s.hw > 0 && s.eps >= CUDNN_BN_MIN_EPSILON,
            "batchnorm: invalid shape (" << s.n << "," << s.c << "," << s.hw << ") eps " << s.eps);
  std::unique_ptr<BnDescs>& d = bn_descs_[{s.n, s.c, s.hw}];
  if (!d) d = std::make_unique<BnDescs>(s);
  return *d;
}

void CudaDevice::batchnorm_forward_train(const BnShape& s, const float* x, const float* gamma,
                                         const float* beta, float* y, float* running_mean,
                                         float* running_var, float* save_mean,
                                         float* save_invstd) {
  bind();
  BnDescs& d = bn_descs(s);
  const float one = 1.f, zero = 0.f;
  CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
      cudnn_, CUDNN_BATCHNORM_SPATIAL, &one, &zero, d.x, x, d.x, y, d.stats, gamma, beta,
      double(s.momentum), running_mean, running_var, double(s.eps), save_mean, save_invstd));
  op_done("batchnorm_forward_train", compute_);
}

void CudaDevice::batchnorm_forward_infer(const BnShape& s, const float* x, const float* gamma,
                                         const float* beta, const float* running_mean,
                                         const float* running_var, float* y) {
  bind();
  BnDescs& d = bn_descs(s);
  const float one = 1.f, zero = 0.f;
  CUDNN_CHECK(cudnnBatchNormalizationForwardInference(cudnn_, CUDNN_BATCHNORM_SPATIAL, &one, &zero,
                                                      d.x, x, d.x, y, d.stats, gamma, beta,
                                                      running_mean, running_var, double(s.eps)));
  op_done("batchnorm_forward_infer", compute_);
}

void CudaDevice::batchnorm_backward(const BnShape& s, const float* x, const float* dy,
                                    const float* gamma, const float* save_mean,
                                    const float* save_invstd, float* dx, float* dgamma,
                                    float* dbeta) {
  bind();
  BnDescs& d = bn_descs(s);
  const float one = 1.f, zero = 0.f;
  // beta = 0 for both data and parameter gradients: dx, dgamma and dbeta are overwritten.
  CUDNN_CHECK(cudnnBatchNormalizationBackward(cudnn_, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one,
                                              &zero, d.x, x, d.x, dy, d.x, dx, d.stats, gamma,
                                              dgamma, dbeta, double(s.eps), save_mean,
                                              save_invstd));
  op_done("batchnorm_backward", compute_);
}

}  // namespace dpb
