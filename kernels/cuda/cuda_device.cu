// cuda_device.cu: CudaDevice construction, memory (device, and pinned host staging), data loading
// staging, stream/event ordering and the communication primitives (comm_copy, comm_reduce, the
// comm-stream staging copies), plus the CUDA factory functions.
// Built with -DDPB_CUDA=ON; tested by tests/test_op_table.cpp and tests/test_cuda_*.cpp.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <shared_mutex>
#include <thread>

#include "collectives/allreduce.h"  // nccl_version, nccl_async_error (NCCL is optional)
#include "kernels/cuda/cuda_device.h"

namespace dpb {

namespace {

constexpr double kMB = 1024.0 * 1024.0;

// Throws naming what was being allocated, its size and this GPU's free/total memory.
[[noreturn]] void fail_alloc(cudaError_t e, const char* what, size_t bytes, int gpu) {
  (void)cudaGetLastError();  // clear the allocation error
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) (void)cudaGetLastError();
  DPB_CHECK(false, "cannot allocate " << what << ": " << bytes / kMB << " MB on cuda:" << gpu
                                      << " (" << free_b / kMB << " MB free of " << total_b / kMB
                                      << " MB): " << cudaGetErrorString(e));
}

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

// Every buffer CudaDevice::alloc made, process-wide: base -> (bytes, gpu). comm_reduce looks
// pointers up here instead of calling cudaPointerGetAttributes twice per call.
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

// Work on one stream timed by CUDA events: intervals are harvested as their end events complete
// (cudaEventQuery), so events are recycled and the host never blocks until seconds().
class CudaStreamTimer final : public StreamTimer {
 public:
  CudaStreamTimer(CudaDevice& dev, cudaStream_t st) : dev_(dev), st_(st) {}
  ~CudaStreamTimer() override {
    if (cudaSetDevice(dev_.gpu()) != cudaSuccess) (void)cudaGetLastError();
    for (auto& [a, b] : pending_) free_.push_back(a), free_.push_back(b);
    if (open_) free_.push_back(open_);
    for (cudaEvent_t e : free_) (void)cudaEventDestroy(e);
  }
  void begin() override {
    CUDA_CHECK(cudaSetDevice(dev_.gpu()));
    if (!open_) open_ = take();
    CUDA_CHECK(cudaEventRecord(open_, st_));
  }
  void end() override {
    DPB_CHECK(open_, "stream timer on " << dev_.name() << ": end() without begin()");
    CUDA_CHECK(cudaSetDevice(dev_.gpu()));
    cudaEvent_t e = take();
    CUDA_CHECK(cudaEventRecord(e, st_));
    pending_.emplace_back(open_, e);
    open_ = nullptr;
    harvest(false);
  }
  double seconds() override {
    harvest(true);
    return total_;
  }
  void reset() override {
    harvest(true);
    total_ = 0;
  }

 private:
  cudaEvent_t take() {
    if (!free_.empty()) {
      cudaEvent_t e = free_.back();
      free_.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    CUDA_CHECK(cudaEventCreate(&e));  // with timing
    return e;
  }
  void harvest(bool wait) {
    CUDA_CHECK(cudaSetDevice(dev_.gpu()));
    while (!pending_.empty()) {
      auto [a, b] = pending_.front();
      if (wait) {
        dev_.wait_event(b, "stream timer");
      } else {
        const cudaError_t q = cudaEventQuery(b);
        if (q == cudaErrorNotReady) break;
        CUDA_CHECK(q);
      }
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
      total_ += double(ms) * 1e-3;
      pending_.pop_front();
      free_.push_back(a);
      free_.push_back(b);
    }
  }

  CudaDevice& dev_;
  cudaStream_t st_;
  cudaEvent_t open_ = nullptr;
  std::deque<std::pair<cudaEvent_t, cudaEvent_t>> pending_;
  std::vector<cudaEvent_t> free_;
  double total_ = 0;
};

}  // namespace

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
  for (void* p : {static_cast<void*>(ws_), static_cast<void*>(scratch_)})
    if (p) (void)cudaFree(p);
  for (cudaStream_t st : {compute_, comm_})
    if (st) (void)cudaStreamDestroy(st);
  cudnn_ = nullptr;
  cublas_ = nullptr;
  ws_ = nullptr;
  scratch_ = nullptr;
  compute_ = comm_ = nullptr;
  (void)cudaGetLastError();
}

void CudaDevice::bind() const { CUDA_CHECK(cudaSetDevice(gpu_)); }

// ---- memory ----

float* CudaDevice::alloc(size_t n, const char* what) {
  bind();
  DPB_CHECK(n <= std::numeric_limits<size_t>::max() / sizeof(float),
            "cannot allocate " << what << ": " << n << " floats overflows size_t");
  size_t bytes = (n ? n : 1) * sizeof(float);  // a distinct non-null pointer even for n == 0
  float* p = nullptr;
  cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) fail_alloc(e, what, bytes, gpu_);
  // Zero on the compute stream and wait, so the comm stream (and peers) also see zeros.
  try {
    CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, compute_));
    wait_stream(compute_, "alloc");
  } catch (...) {
    (void)cudaFree(p);
    throw;
  }
  allocations().add(p, bytes, gpu_);
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
  allocations().remove(p);
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

void CudaDevice::synchronize() {
  bind();
  wait_stream(compute_, "synchronize (compute stream)");
  wait_stream(comm_, "synchronize (comm stream)");
}

void CudaDevice::poll(const std::function<cudaError_t()>& query, const char* what) {
  const auto t0 = std::chrono::steady_clock::now();
  for (unsigned i = 0;; ++i) {
    const cudaError_t e = query();
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) {
      (void)cudaGetLastError();
      DPB_CHECK(false, name_ << ": " << what << ": " << cudaGetErrorName(e) << ": "
                             << cudaGetErrorString(e));
    }
    if (cancelled_.load()) {
      std::lock_guard<std::mutex> lk(cancel_mu_);
      DPB_CHECK(false, name_ << ": " << what << " abandoned because " << cancel_why_);
    }
    if (ncclComm_t c = nccl_comm_.load(); c && i % 64 == 0) {
      const std::string nccl = nccl_async_error(c);
      DPB_CHECK(nccl.empty(), name_ << ": " << what << ": " << nccl);
    }
    // Yield for the first ~50 us (short kernels), then sleep in 20 us steps.
    if (std::chrono::steady_clock::now() - t0 < std::chrono::microseconds(50))
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

void CudaDevice::wait_event(cudaEvent_t ev, const char* what) {
  poll([ev] { return cudaEventQuery(ev); }, what);
}

void CudaDevice::wait_stream(cudaStream_t st, const char* what) {
  poll([st] { return cudaStreamQuery(st); }, what);
}

void CudaDevice::cancel_waits(const std::string& why) {
  {
    std::lock_guard<std::mutex> lk(cancel_mu_);
    if (cancel_why_.empty()) cancel_why_ = why;
  }
  cancelled_.store(true);
}

std::unique_ptr<StreamTimer> CudaDevice::make_timer(StreamKind s) {
  return std::make_unique<CudaStreamTimer>(*this, s == StreamKind::Comm ? comm_ : compute_);
}

void* CudaDevice::workspace(size_t bytes) {
  if (bytes > ws_bytes_) {
    wait_stream(compute_, "growing the cuDNN workspace");  // the old one may still be in use
    if (ws_) CUDA_CHECK(cudaFree(ws_));
    ws_ = nullptr;
    ws_bytes_ = 0;
    cudaError_t e = cudaMalloc(&ws_, bytes);
    if (e != cudaSuccess) fail_alloc(e, "cuDNN workspace", bytes, gpu_);
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
    if (st.dev) CUDA_CHECK(cudaFree(st.dev));
    st.pinned = st.dev = nullptr;
    st.bytes = 0;
    cudaError_t e = cudaHostAlloc(reinterpret_cast<void**>(&st.pinned), n, cudaHostAllocDefault);
    if (e != cudaSuccess) fail_alloc(e, "pinned host staging for data loading", n, gpu_);
    e = cudaMalloc(reinterpret_cast<void**>(&st.dev), n);
    if (e != cudaSuccess) fail_alloc(e, "device staging for data loading", n, gpu_);
    st.bytes = n;
  }
  std::memcpy(st.pinned, host, n);
  CUDA_CHECK(cudaMemcpyAsync(st.dev, st.pinned, n, cudaMemcpyHostToDevice, compute_));
  CUDA_CHECK(cudaEventRecord(st.ev, compute_));
  st.used = true;
  return st.dev;
}

// ---- communication ----

bool CudaDevice::accessible(const void* p) const {
  if (const int g = allocations().gpu_of(p); g >= 0)
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
    if (scratch_) CUDA_CHECK(cudaFree(scratch_));
    scratch_ = nullptr;
    scratch_n_ = 0;
    cudaError_t e = cudaMalloc(&scratch_, n * sizeof(float));
    if (e != cudaSuccess) fail_alloc(e, "comm staging buffer (no peer access)", n * 4, gpu_);
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

void CudaDevice::comm_wait_compute() {
  bind();
  CUDA_CHECK(cudaEventRecord(ev_compute_, compute_));
  CUDA_CHECK(cudaStreamWaitEvent(comm_, ev_compute_, 0));
}

int CudaDevice::compute_mark() {
  bind();
  const int token = int(next_mark_.fetch_add(1) % unsigned(kMarks));
  CUDA_CHECK(cudaEventRecord(marks_[token], compute_));
  return token;
}

void CudaDevice::comm_wait_mark(int token) {
  if (token < 0 || token >= kMarks) return comm_wait_compute();
  bind();
  CUDA_CHECK(cudaStreamWaitEvent(comm_, marks_[token], 0));
}

void CudaDevice::compute_wait_comm() {
  bind();
  CUDA_CHECK(cudaEventRecord(ev_comm_, comm_));
  CUDA_CHECK(cudaStreamWaitEvent(compute_, ev_comm_, 0));
}

void CudaDevice::comm_record() {
  bind();
  CUDA_CHECK(cudaEventRecord(ev_peer_, comm_));
}

void CudaDevice::comm_wait_peer(Device& peer) {
  auto* p = dynamic_cast<CudaDevice*>(&peer);
  DPB_CHECK(p, "comm_wait_peer on " << name_ << ": peer rank " << peer.rank()
                                    << " is not a CUDA device");
  if (p == this) return;  // own comm stream is already in order
  bind();
  // Waits for the peer's most recent comm_record(); the event may belong to another GPU.
  CUDA_CHECK(cudaStreamWaitEvent(comm_, p->ev_peer_, 0));
}

void CudaDevice::comm_synchronize() {
  bind();
  wait_stream(comm_, "comm_synchronize");
}

// ---- factories ----

std::unique_ptr<Device> make_cuda_device(int rank, int gpu, bool tf32) {
  return std::make_unique<CudaDevice>(rank, gpu, tf32);
}

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

std::string cuda_unavailable_reason() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return std::string("cudaGetDeviceCount: ") + cudaGetErrorName(e) + ": " +
           cudaGetErrorString(e);
  }
  return n > 0 ? "" : "cudaGetDeviceCount found 0 GPUs";
}

std::string cuda_library_versions() {
  auto dotted = [](int v, int major_div, int minor_div) {  // e.g. 13000 -> "13.0"
    return std::to_string(v / major_div) + "." + std::to_string(v % major_div / minor_div);
  };
  std::string out;
  int v = 0;
  out += "driver " + (cudaDriverGetVersion(&v) == cudaSuccess ? dotted(v, 1000, 10) : "?");
  out += ", runtime " + (cudaRuntimeGetVersion(&v) == cudaSuccess ? dotted(v, 1000, 10) : "?");
  int ma = 0, mi = 0, pa = 0;
  if (cublasGetProperty(MAJOR_VERSION, &ma) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(MINOR_VERSION, &mi) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(PATCH_LEVEL, &pa) == CUBLAS_STATUS_SUCCESS)
    out += ", cuBLAS " + std::to_string(ma) + "." + std::to_string(mi) + "." + std::to_string(pa);
  size_t dnn = cudnnGetVersion();  // 9.19.0 -> 91900
  out += ", cuDNN " + std::to_string(dnn / 10000) + "." + std::to_string(dnn % 10000 / 100) + "." +
         std::to_string(dnn % 100);
  const std::string nccl = nccl_version();
  out += nccl.empty() ? ", no NCCL (not built)" : ", NCCL " + nccl;
  (void)cudaGetLastError();
  return out;
}

bool cuda_built() { return true; }

}  // namespace dpb
