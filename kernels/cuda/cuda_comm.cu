// cuda_comm.cu: CudaDevice's communication primitives on the comm stream: comm_copy, comm_reduce
// (its kernel, and staging through scratch when peer access is missing), and the staging copies
// comm_download / comm_upload. The ordering between streams and ranks is in cuda_streams.cpp.
// Built with -DDPB_CUDA=ON; tested by tests/test_cuda_device.cpp and tests/test_cuda_collectives.cpp.
#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_memory.h"

namespace dpb {

namespace {

// dst[i] += src[i]. [0, head) and the tail are scalar; the middle is float4 (dst + head and
// src + head are 16-byte aligned there). head == n means all scalar.
__global__ void reduce_add_kernel(float* __restrict__ dst, const float* __restrict__ src, size_t n,
                                  size_t head) {
  size_t tid = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t nvec = (n - head) / 4;
  float4* d4 = reinterpret_cast<float4*>(dst + head);
  const float4* s4 = reinterpret_cast<const float4*>(src + head);
  for (size_t i = tid; i < nvec; i += stride) {
    float4 a = d4[i];
    float4 b = s4[i];
    a.x += b.x; a.y += b.y; a.z += b.z; a.w += b.w;
    d4[i] = a;
  }
  for (size_t i = tid; i < head; i += stride) dst[i] += src[i];
  for (size_t i = head + nvec * 4 + tid; i < n; i += stride) dst[i] += src[i];
}

}  // namespace

bool CudaDevice::accessible(const void* p) const {
  if (const int g = cuda_alloc_gpu(p); g >= 0)
    return size_t(g) < peer_ok_.size() && peer_ok_[g];
  cudaPointerAttributes a{};  // not from CudaDevice::alloc: ask the driver
  CUDA_CHECK(cudaPointerGetAttributes(&a, p));
  DPB_CHECK(a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged,
            "comm op on cuda:" << gpu_ << " (rank " << rank_ << "): pointer " << p
                               << " is not CUDA device memory");
  if (a.type == cudaMemoryTypeManaged) return true;
  return a.device >= 0 && size_t(a.device) < peer_ok_.size() && peer_ok_[a.device];
}

float* CudaDevice::comm_scratch(size_t n) {
  if (n > scratch_n_) {
    wait_stream(comm_, "growing the comm staging buffer");  // the old one may still be in use
    dev_free_charged(scratch_, scratch_n_ * sizeof(float), MemCategory::Comm);
    scratch_ = nullptr;
    scratch_n_ = 0;
    scratch_ = static_cast<float*>(
        dev_malloc(n * sizeof(float), MemCategory::Comm, "comm staging buffer (no peer access)"));
    scratch_n_ = n;
  }
  return scratch_;
}

void CudaDevice::comm_copy(float* dst, const float* src, size_t n) {
  if (n == 0 || dst == src) return;
  bind();
  // UVA: same GPU, peer GPU over NVLink/PCIe, or staged by the driver when peers are not enabled.
  CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDefault, comm_));
  op_done("comm_copy", comm_);
}

// Staging copies on the comm stream: asynchronous DMA when `host` is pinned (alloc_host), so the
// compute stream goes on while a bucket is staged; the caller waits with comm_synchronize().
void CudaDevice::comm_download(float* host, const float* src, size_t n) {
  if (n == 0) return;
  bind();
  CUDA_CHECK(cudaMemcpyAsync(host, src, n * sizeof(float), cudaMemcpyDeviceToHost, comm_));
  op_done("comm_download", comm_);
}

void CudaDevice::comm_upload(float* dst, const float* host, size_t n) {
  if (n == 0) return;
  bind();
  CUDA_CHECK(cudaMemcpyAsync(dst, host, n * sizeof(float), cudaMemcpyHostToDevice, comm_));
  op_done("comm_upload", comm_);
}

void CudaDevice::comm_reduce(float* dst, const float* src, size_t n) {
  if (n == 0) return;
  bind();
  bool src_ok = accessible(src), dst_ok = accessible(dst);
  float* d = dst;
  const float* s = src;
  if (!src_ok || !dst_ok) {  // no peer access: bring the operands here, reduce, write back
    float* tmp = comm_scratch(2 * n);
    if (!src_ok) {
      CUDA_CHECK(cudaMemcpyAsync(tmp, src, n * sizeof(float), cudaMemcpyDefault, comm_));
      s = tmp;
    }
    if (!dst_ok) {
      CUDA_CHECK(cudaMemcpyAsync(tmp + n, dst, n * sizeof(float), cudaMemcpyDefault, comm_));
      d = tmp + n;
    }
  }
  uintptr_t da = reinterpret_cast<uintptr_t>(d), sa = reinterpret_cast<uintptr_t>(s);
  size_t head = n;  // all scalar unless both can reach 16-byte alignment together
  if ((da - sa) % 16 == 0) head = std::min(n, size_t((16 - da % 16) % 16 / sizeof(float)));
  constexpr int kBlock = 256;
  reduce_add_kernel<<<cuda_kernels::grid_for((n + 3) / 4, kBlock), kBlock, 0, comm_>>>(d, s, n,
                                                                                      head);
  CUDA_CHECK_LAUNCH("reduce_add_kernel (comm_reduce)");
  if (!dst_ok)
    CUDA_CHECK(cudaMemcpyAsync(dst, d, n * sizeof(float), cudaMemcpyDefault, comm_));
  op_done("comm_reduce", comm_);
}

}  // namespace dpb
