// dense_cublas.cu: fully connected layer y (n, out) = x (n, in) . w (in, out) + b (out) through
// cuBLAS, row-major buffers as in the CPU twin.
//
// cuBLAS is column-major; a row-major (r, c) buffer is the column-major (c, r) matrix, its
// transpose. So every product is computed transposed, with the operands swapped:
//   forward:  y^T (out, n)  = w^T (out, in) . x^T (in, n)        gemm(N, N)
//   dx:       dx^T (in, n)  = w   (in, out) . dy^T (out, n)      gemm(T, N)
//   dw:       dw^T (out, in) = dy^T (out, n) . x (n, in)          gemm(N, T)
// Compute type CUBLAS_COMPUTE_32F (true float32), or CUBLAS_COMPUTE_32F_FAST_TF32 with tf32.
#include "kernels/cuda/cuda_device.h"

namespace dpb {

namespace {

// C (m, n) = op(A) (m, k) . op(B) (k, n), column-major, beta = 0.
void gemm(cublasHandle_t h, bool tf32, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
          int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc) {
  const float one = 1.f, zero = 0.f;
  cublasComputeType_t compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  CUBLAS_CHECK(cublasGemmEx(h, ta, tb, m, n, k, &one, a, CUDA_R_32F, lda, b, CUDA_R_32F, ldb,
                            &zero, c, CUDA_R_32F, ldc, compute, CUBLAS_GEMM_DEFAULT));
}

}  // namespace

void CudaDevice::dense_forward(int n, int in, int out, const float* x, const float* w,
                               const float* b, float* y) {
  DPB_CHECK(n > 0 && in > 0 && out > 0,
            "dense_forward: invalid shape n " << n << " in " << in << " out " << out);
  bind();
  gemm(cublas_, tf32_, CUBLAS_OP_N, CUBLAS_OP_N, out, n, in, w, out, x, in, y, out);
  if (b) cuda_kernels::add_bias(y, b, size_t(n) * out, 1, out, compute_);
  op_done("dense_forward", compute_);
}

void CudaDevice::dense_backward(int n, int in, int out, const float* x, const float* w,
                                const float* dy, float* dx, float* dw, float* db) {
  DPB_CHECK(n > 0 && in > 0 && out > 0,
            "dense_backward: invalid shape n " << n << " in " << in << " out " << out);
  bind();
  if (dx) gemm(cublas_, tf32_, CUBLAS_OP_T, CUBLAS_OP_N, in, n, out, w, out, dy, out, dx, in);
  if (dw) gemm(cublas_, tf32_, CUBLAS_OP_N, CUBLAS_OP_T, out, in, n, dy, out, x, in, dw, out);
  if (db) {
    const size_t scr = cuda_kernels::channel_sum_scratch(n, out, 1);
    float* scratch = scr ? static_cast<float*>(workspace(scr * sizeof(float))) : nullptr;
    cuda_kernels::channel_sum(dy, db, n, out, 1, scratch, compute_);
  }
  op_done("dense_backward", compute_);
}

}  // namespace dpb
