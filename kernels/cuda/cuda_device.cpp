// cuda_device.cpp: CudaDevice construction and teardown, memory (device buffers, pinned host
// staging, upload/download, fill/copy), the cuDNN workspace and data-loading staging, and the
// process-wide allocation map (cuda_memory.h). Streams, events and waits are in cuda_streams.cpp,
// the communication primitives in cuda_comm.cu, the factory functions in cuda_backend.cpp.
// Host code only. Built with -DDPB_CUDA=ON; tested by tests/test_op_table.cpp and
// tests/test_cuda_*.cpp.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <thread>

#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_memory.h"

namespace dpb {

namespace {

constexpr double kMB = 1024.0 * 1024.0;

// Every buffer CudaDevice::alloc made, process-wide: base -> (bytes, gpu) (see cuda_memory.h).
class AllocMap {
 public:
  void add(const void* p, size_t bytes, int gpu) {
    std::unique_lock lk(mu_);
    m_[uintptr_t(p)] = {bytes, gpu};
  }
  void remove(const void* p) {
    std::unique_lock lk(mu_);
    m_.erase(uintptr_t(p));
  }
  int gpu_of(const void* p) const {  // -1: not ours
    std::shared_lock lk(mu_);
    auto it = m_.upper_bound(uintptr_t(p));
    if (it == m_.begin()) return -1;
    --it;
    return uintptr_t(p) < it->first + it->second.first ? it->second.second : -1;
  }

 private:
  mutable std::shared_mutex mu_;
  std::map<uintptr_t, std::pair<size_t, int>> m_;
};
AllocMap& allocations() {
  static AllocMap m;
  return m;
}


// Throws naming what was being allocated, its size and this GPU's free/total memory.
}  // namespace

[[noreturn]] void fail_cuda_alloc(cudaError_t e, const char* what, size_t bytes, int gpu) {
  (void)cudaGetLastError();  // clear the allocation error
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) (void)cudaGetLastError();
  DPB_CHECK(false, "cannot allocate " << what << ": " << bytes / kMB << " MB on cuda:" << gpu
                                      << " (" << free_b / kMB << " MB free of " << total_b / kMB
                                      << " MB): " << cudaGetErrorString(e));
}


void track_cuda_alloc(const void* p, size_t bytes, int gpu) { allocations().add(p, bytes, gpu); }
void untrack_cuda_alloc(const void* p) { allocations().remove(p); }
int cuda_alloc_gpu(const void* p) { return allocations().gpu_of(p); }

CudaDevice::CudaDevice(int rank, int gpu, bool tf32) : rank_(rank), gpu_(gpu), tf32_(tf32) {
  int count = 0;
  CUDA_CHECK(cudaGetDeviceCount(&count));
  DPB_CHECK(gpu >= 0 && gpu < count,
            "rank " << rank << ": CUDA GPU " << gpu << " does not exist (" << count << " GPUs)");
  const char* sync_env = std::getenv("DPB_CUDA_SYNC");
  sync_each_op_ = sync_env && std::string(sync_env) == "1";
  try {
    bind();
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, gpu));
    name_ = "cuda:" + std::to_string(gpu) + " " + prop.name + (tf32 ? " (tf32)" : "");
    ledger_.set_device(name_);
    peer_ok_.assign(count, false);
    peer_ok_[gpu] = true;
    for (int g = 0; g < count; ++g) {
      if (g == gpu) continue;
      int can = 0;
      CUDA_CHECK(cudaDeviceCanAccessPeer(&can, gpu, g));
      if (!can) continue;
      // Enabled once per GPU pair for the process; a second rank on this GPU finds it enabled.
      cudaError_t e = cudaDeviceEnablePeerAccess(g, 0);
      if (e == cudaSuccess || e == cudaErrorPeerAccessAlreadyEnabled) peer_ok_[g] = true;
      // Clear the error; on failure (e.g. too many peers) comm_reduce stages through scratch.
      if (e != cudaSuccess) (void)cudaGetLastError();
    }
    CUDA_CHECK(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&comm_, cudaStreamNonBlocking));
    for (cudaEvent_t* ev : {&ev_compute_, &ev_comm_, &ev_peer_})
      CUDA_CHECK(cudaEventCreateWithFlags(ev, cudaEventDisableTiming));
    for (Stage& st : stages_) CUDA_CHECK(cudaEventCreateWithFlags(&st.ev, cudaEventDisableTiming));
    for (cudaEvent_t& ev : marks_) CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    CUBLAS_CHECK(cublasCreate(&cublas_));
    CUBLAS_CHECK(cublasSetStream(cublas_, compute_));
    // dense_cublas.cu passes the compute type (32F or 32F_FAST_TF32) to every GEMM; the handle's
    // math mode agrees with it.
    CUBLAS_CHECK(cublasSetMathMode(cublas_, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    // cuBLAS's workspace is ours, so that the ledger counts it (left to itself cuBLAS allocates
    // its own out of sight): the size its guide recommends, 32 MiB on Hopper and newer, 4 MiB
    // before (cublasSetWorkspace).
    int major = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, gpu_));
    cublas_ws_bytes_ = size_t(major >= 9 ? 32 : 4) << 20;
    cublas_ws_ = dev_malloc(cublas_ws_bytes_, MemCategory::Workspace, "cuBLAS workspace");
    CUBLAS_CHECK(cublasSetWorkspace(cublas_, cublas_ws_, cublas_ws_bytes_));
    CUDNN_CHECK(cudnnCreate(&cudnn_));
    CUDNN_CHECK(cudnnSetStream(cudnn_, compute_));
  } catch (...) {
    teardown();
    throw;
  }
}

CudaDevice::~CudaDevice() { teardown(); }

// Frees everything that was created; never throws (destructor and failed constructor).
void CudaDevice::teardown() noexcept {
  if (cudaSetDevice(gpu_) != cudaSuccess) (void)cudaGetLastError();
  // After cancel_waits a stream may hold a collective that never finishes: wait a bounded time,
  // then leak this device's resources rather than hang in cudaFree's implicit synchronization.
  const auto t0 = std::chrono::steady_clock::now();
  for (cudaStream_t st : {compute_, comm_}) {
    if (!st) continue;
    cudaError_t e;
    while ((e = cudaStreamQuery(st)) == cudaErrorNotReady) {
      if (cancelled_.load() && std::chrono::steady_clock::now() - t0 > std::chrono::seconds(10)) {
        std::fprintf(stderr, "dpbench: warning: %s still has work in flight 10 s after another "
                             "rank failed; leaving its memory allocated\n", name_.c_str());
        return;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    if (e != cudaSuccess) (void)cudaGetLastError();
  }
  destroy_conv_plans();
  bn_descs_.clear();
  if (cudnn_) cudnnDestroy(cudnn_);
  if (cublas_) cublasDestroy(cublas_);
  for (cudaEvent_t ev : {ev_compute_, ev_comm_, ev_peer_})
    if (ev) (void)cudaEventDestroy(ev);
  for (Stage& st : stages_) {
    if (st.ev) (void)cudaEventDestroy(st.ev);
    if (st.dev) (void)cudaFree(st.dev);
    if (st.pinned) (void)cudaFreeHost(st.pinned);
    st = Stage{};
  }
  for (cudaEvent_t& ev : marks_)
    if (ev) (void)cudaEventDestroy(ev), ev = nullptr;
  for (void* p : {static_cast<void*>(ws_), static_cast<void*>(scratch_), cublas_ws_})
    if (p) (void)cudaFree(p);
  for (cudaStream_t st : {compute_, comm_})
    if (st) (void)cudaStreamDestroy(st);
  cudnn_ = nullptr;
  cublas_ = nullptr;
  ws_ = nullptr;
  scratch_ = nullptr;
  cublas_ws_ = nullptr;
  compute_ = comm_ = nullptr;
  (void)cudaGetLastError();
}

void CudaDevice::bind() const { CUDA_CHECK(cudaSetDevice(gpu_)); }

// ---- memory ----

void* CudaDevice::dev_malloc(size_t bytes, MemCategory cat, const char* what) {
  ledger_.reserve(bytes, cat, what);  // throws past --device-mem
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) (void)cudaGetLastError();
    ledger_.fail(bytes, cat, what,
                 std::string(cudaGetErrorString(e)) + " (" + format_mem_bytes(free_b) + " free of " +
                     format_mem_bytes(total_b) + ")");
  }
  if (e != cudaSuccess) {
    ledger_.unreserve(bytes, cat);
    fail_cuda_alloc(e, what, bytes, gpu_);
  }
  return p;
}

void CudaDevice::dev_free_charged(void* p, size_t bytes, MemCategory cat) {
  if (!p) return;
  ledger_.unreserve(bytes, cat);
  CUDA_CHECK(cudaFree(p));
}

float* CudaDevice::alloc(size_t n, MemCategory cat, const char* what) {
  bind();
  DPB_CHECK(n <= std::numeric_limits<size_t>::max() / sizeof(float),
            "cannot allocate " << what << ": " << n << " floats overflows size_t");
  size_t bytes = (n ? n : 1) * sizeof(float);  // a distinct non-null pointer even for n == 0
  float* p = static_cast<float*>(dev_malloc(bytes, cat, what));
  // Zero on the compute stream and wait, so the comm stream (and peers) also see zeros.
  try {
    CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, compute_));
    wait_stream(compute_, "alloc");
  } catch (...) {
    ledger_.unreserve(bytes, cat);
    (void)cudaFree(p);
    throw;
  }
  ledger_.track(p, bytes, cat);
  track_cuda_alloc(p, bytes, gpu_);
  return p;
}

// Before freeing memory the streams may use (release, free_host; never throws): waits for both
// streams and returns true, or returns false, leaving the memory allocated, when they cannot be
// waited for: after cancel_waits with work still in flight (warn_leak: one warning per device),
// or when a wait fails (reported, naming `kind`).
bool CudaDevice::streams_idle_for_free(const char* op, const char* kind, bool warn_leak) {
  try {
    if (cancelled_.load() &&
        (cudaStreamQuery(compute_) != cudaSuccess || cudaStreamQuery(comm_) != cudaSuccess)) {
      (void)cudaGetLastError();
      if (warn_leak && !leak_warned_.exchange(true))
        std::fprintf(stderr, "dpbench: warning: %s: buffers left allocated: work still in flight "
                             "after another rank failed\n", name_.c_str());
      return false;
    }
    wait_stream(compute_, op);
    wait_stream(comm_, op);
    return true;
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "dpbench: warning: %s: %s left allocated: %s\n", name_.c_str(), kind,
                 ex.what());
    return false;
  }
}

void CudaDevice::release(float* p) {
  if (!p) return;
  // Called from Buffer's destructor: report, never throw. Own streams first, in case this
  // buffer is still in use there (cudaFree itself also waits for the device in practice).
  // After cancel_waits a stream may hold a collective that never finishes: the buffer is then
  // left allocated (cudaFree would wait for it), with one warning per device.
  cudaError_t e = cudaSetDevice(gpu_);
  if (!streams_idle_for_free("release", "buffer", true)) return;
  untrack_cuda_alloc(p);
  ledger_.release(p);
  if (e == cudaSuccess) e = cudaFree(p);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    std::fprintf(stderr, "dpbench: warning: freeing memory on cuda:%d failed: %s\n", gpu_,
                 cudaGetErrorString(e));
  }
}

float* CudaDevice::alloc_host(size_t n, const char* what) {
  bind();
  DPB_CHECK(n <= std::numeric_limits<size_t>::max() / sizeof(float),
            "cannot allocate " << what << ": " << n << " floats overflows size_t");
  const size_t bytes = (n ? n : 1) * sizeof(float);
  float* p = nullptr;
  const cudaError_t e = cudaHostAlloc(reinterpret_cast<void**>(&p), bytes, cudaHostAllocDefault);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    DPB_CHECK(false, "cannot allocate " << what << ": " << bytes / kMB << " MB of pinned host "
                                        << "memory for cuda:" << gpu_ << ": "
                                        << cudaGetErrorString(e)
                                        << " (page-locked memory is limited by ulimit -l)");
  }
  std::memset(p, 0, bytes);
  return p;
}

void CudaDevice::free_host(float* p) {
  if (!p) return;
  // As release(): never throws; own streams first (a staging copy may still use p), and after
  // cancel_waits a stream that may never finish leaves p allocated.
  cudaError_t e = cudaSetDevice(gpu_);
  if (!streams_idle_for_free("free_host", "pinned host buffer", false)) return;
  if (e == cudaSuccess) e = cudaFreeHost(p);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    std::fprintf(stderr, "dpbench: warning: freeing pinned host memory of cuda:%d failed: %s\n",
                 gpu_, cudaGetErrorString(e));
  }
}

// upload/download are ordered after the compute stream's work only (as on the CPU backend, where
// the rank thread does not wait for its communication thread); call compute_wait_comm() or
// comm_synchronize() first for buffers written by comm ops.
void CudaDevice::upload(float* dst, const float* host, size_t n) {
  if (n == 0) return;
  bind();
  CUDA_CHECK(cudaMemcpyAsync(dst, host, n * sizeof(float), cudaMemcpyDefault, compute_));
  wait_stream(compute_, "upload");
}

void CudaDevice::download(float* host, const float* src, size_t n) {
  if (n == 0) return;
  bind();
  CUDA_CHECK(cudaMemcpyAsync(host, src, n * sizeof(float), cudaMemcpyDefault, compute_));
  wait_stream(compute_, "download");
}

void CudaDevice::fill(float* dst, float value, size_t n) {
  bind();
  cuda_kernels::fill(dst, value, n, compute_);
  op_done("fill", compute_);
}

void CudaDevice::copy(float* dst, const float* src, size_t n) {
  if (n == 0 || dst == src) return;
  bind();
  CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDefault, compute_));
  op_done("copy", compute_);
}

void* CudaDevice::workspace(size_t bytes) {
  if (bytes > ws_bytes_) {
    wait_stream(compute_, "growing the cuDNN workspace");  // the old one may still be in use
    dev_free_charged(ws_, ws_bytes_, MemCategory::Workspace);
    ws_ = nullptr;
    ws_bytes_ = 0;
    ws_ = dev_malloc(bytes, MemCategory::Workspace, "cuDNN workspace");
    ws_bytes_ = bytes;
  }
  return ws_;
}

// host bytes -> pinned staging -> device bytes on the compute stream, through the next slot of
// the staging ring. A slot is reused once the copy out of its pinned buffer has completed (its
// event, recorded kStages loads ago); its device buffer is read by kernels issued on the same
// stream before the new copy, so stream order protects it.
const uint8_t* CudaDevice::stage_bytes(const uint8_t* host, size_t n) {
  Stage& st = stages_[next_stage_];
  next_stage_ = (next_stage_ + 1) % kStages;
  if (st.used) wait_event(st.ev, "data loading (staging slot)");
  if (n > st.bytes) {
    wait_stream(compute_, "data loading");  // kernels may still read the old device buffer
    if (st.pinned) CUDA_CHECK(cudaFreeHost(st.pinned));
    dev_free_charged(st.dev, st.bytes, MemCategory::Data);
    st.pinned = st.dev = nullptr;
    st.bytes = 0;
    cudaError_t e = cudaHostAlloc(reinterpret_cast<void**>(&st.pinned), n, cudaHostAllocDefault);
    if (e != cudaSuccess) fail_cuda_alloc(e, "pinned host staging for data loading", n, gpu_);
    st.dev = static_cast<uint8_t*>(dev_malloc(n, MemCategory::Data, "device staging for data loading"));
    st.bytes = n;
  }
  std::memcpy(st.pinned, host, n);
  CUDA_CHECK(cudaMemcpyAsync(st.dev, st.pinned, n, cudaMemcpyHostToDevice, compute_));
  CUDA_CHECK(cudaEventRecord(st.ev, compute_));
  st.used = true;
  return st.dev;
}

}  // namespace dpb
