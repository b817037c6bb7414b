// dense.cpp: CpuDevice dense (fully connected) layer, y (n, out) = x (n, in) . w (in, out) + b,
// with the GEMMs done by oneDNN's row-major dnnl_sgemm:
//   forward:  y = b (broadcast) then y += x . w
//   backward: dx = dy . w^T, dw = x^T . dy, db = column sums of dy
#include <sstream>

#include "kernels/cpu/cpu_device.h"
#include "src/core/check.h"
#include "src/core/memory.h"

namespace dpb {
namespace {

void sgemm(const char* op, int n, int in, int out, char ta, char tb, dnnl_dim_t m, dnnl_dim_t nn,
           dnnl_dim_t k, const float* a, dnnl_dim_t lda, const float* b, dnnl_dim_t ldb, float beta,
           float* c, dnnl_dim_t ldc) {
  dnnl_status_t st = dnnl_sgemm(ta, tb, m, nn, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
  if (st == dnnl_out_of_memory) {  // its packing buffers: exit 3 like any other refusal
    std::ostringstream os;
    os << "out of memory: " << op << "(n=" << n << " in=" << in << " out=" << out
       << "): oneDNN's sgemm could not allocate its buffers" << address_limit_note();
    throw OutOfMemory(os.str(), 0, 0);
  }
  DPB_CHECK(st == dnnl_success, op << "(n=" << n << " in=" << in << " out=" << out
                                   << "): dnnl_sgemm failed with status " << int(st));
}

}  // namespace

void CpuDevice::dense_forward(int n, int in, int out, const float* x, const float* w,
                              const float* b, float* y) {
  enter();
  if (n <= 0 || out <= 0) return;
#pragma omp parallel for num_threads(threads_) if (size_t(n) * out >= cpu::kParallelMin)
  for (int i = 0; i < n; ++i) {
    float* yi = y + size_t(i) * out;
#pragma omp simd
    for (int j = 0; j < out; ++j) yi[j] = b[j];
  }
  if (in > 0) sgemm("dense_forward", n, in, out, 'N', 'N', n, out, in, x, in, w, out, 1.0f, y, out);
}

void CpuDevice::dense_backward(int n, int in, int out, const float* x, const float* w,
                               const float* dy, float* dx, float* dw, float* db) {
  enter();
  if (dx && n > 0 && in > 0) {
    if (out > 0)
      sgemm("dense_backward(dx)", n, in, out, 'N', 'T', n, in, out, dy, out, w, out, 0.0f, dx, in);
    else
      fill(dx, 0.0f, size_t(n) * in);
  }
  if (in > 0 && out > 0) {
    if (n > 0)
      sgemm("dense_backward(dw)", n, in, out, 'T', 'N', in, out, n, x, in, dy, out, 0.0f, dw, out);
    else
      fill(dw, 0.0f, size_t(in) * out);
  }
  // db[j] = sum_i dy[i][j]: row-wise accumulation keeps the inner loop contiguous.
  for (int j = 0; j < out; ++j) db[j] = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float* dyi = dy + size_t(i) * out;
#pragma omp simd
    for (int j = 0; j < out; ++j) db[j] += dyi[j];
  }
}

}  // namespace dpb
