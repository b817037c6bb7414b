// cpu_device.cpp: CpuDevice construction, memory ops (64-byte aligned, zero-filled buffers in host
// memory), data loading, communication ops (stateless single-threaded loops, safe to run on a comm
// thread beside compute ops) and the make_cpu_device factory. Compute ops live in the sibling
// files.
#include "kernels/cpu/cpu_device.h"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "src/core/check.h"

namespace dpb {

std::ostream& operator<<(std::ostream& os, const ConvShape& s) {
  return os << "conv(n=" << s.n << " c=" << s.c << " h=" << s.h << " w=" << s.w << " k=" << s.k
            << " r=" << s.r << " s=" << s.s << " pad=" << s.pad << " stride=" << s.stride << ")";
}
std::ostream& operator<<(std::ostream& os, const PoolShape& s) {
  return os << "pool(n=" << s.n << " c=" << s.c << " h=" << s.h << " w=" << s.w << " win=" << s.win
            << " stride=" << s.stride << ")";
}
std::ostream& operator<<(std::ostream& os, const BnShape& s) {
  return os << "bn(n=" << s.n << " c=" << s.c << " hw=" << s.hw << ")";
}

CpuDevice::CpuDevice(int rank, int threads)
    : rank_(rank), threads_(threads), ledger_("cpu:" + std::to_string(rank)),
      eng_(dnnl::engine::kind::cpu, 0), strm_(eng_) {
  DPB_CHECK(threads >= 1, "cpu:" << rank << ": threads must be >= 1, got " << threads);
}

CpuDevice::~CpuDevice() = default;

std::string CpuDevice::name() const {
  const dnnl_version_t* v = dnnl_version();
  std::ostringstream os;
  os << "cpu:" << rank_ << " (" << threads_ << (threads_ == 1 ? " thread" : " threads")
     << ", oneDNN " << v->major << "." << v->minor << ")";
  return os.str();
}

void CpuDevice::enter() const {
  // omp_get_max_threads reads the calling thread's nthreads ICV: cheap, and robust to other code
  // (or another device used from the same thread) having changed it.
  if (omp_get_max_threads() != threads_) omp_set_num_threads(threads_);
}

// ---- memory ----

float* CpuDevice::alloc(size_t n, MemCategory cat, const char* what) {
  DPB_CHECK(n <= SIZE_MAX / sizeof(float) - 64, "cpu:" << rank_ << ": allocation of "
                                                       << (what ? what : "?") << " too large (" << n
                                                       << " floats)");
  size_t bytes = (n * sizeof(float) + 63) / 64 * 64;  // aligned_alloc wants a multiple of 64
  if (bytes == 0) bytes = 64;                         // distinct non-null pointer for n == 0
  ledger_.reserve(bytes, cat, what);  // throws past the capacity (--device-mem)
  void* p = std::aligned_alloc(64, bytes);
  if (!p) ledger_.fail(bytes, cat, what, "the host heap refused it" + address_limit_note());
  std::memset(p, 0, bytes);
  ledger_.track(p, bytes, cat);
  {
    std::lock_guard<std::mutex> lk(heap_mu_);
    heap_[p] = bytes;
  }
  return static_cast<float*>(p);
}

void CpuDevice::release(float* p) {
  if (!p) return;
  ledger_.release(p);
  {
    std::lock_guard<std::mutex> lk(heap_mu_);
    heap_.erase(p);
  }
  std::free(p);
}

size_t CpuDevice::heap_bytes() const {
  size_t b = 0;
  for (const cpu::HostBuf& w : ws_) b += w.bytes();
  std::lock_guard<std::mutex> lk(heap_mu_);
  for (const auto& [p, n] : heap_) b += n;
  return b;
}

void CpuDevice::upload(float* dst, const float* host, size_t n) {
  if (n) std::memcpy(dst, host, n * sizeof(float));
}

void CpuDevice::download(float* host, const float* src, size_t n) {
  if (n) std::memcpy(host, src, n * sizeof(float));
}

void CpuDevice::fill(float* dst, float value, size_t n) {
  enter();
#pragma omp parallel for simd num_threads(threads_) if (n >= 4 * cpu::kParallelMin)
  for (size_t i = 0; i < n; ++i) dst[i] = value;
}

void CpuDevice::copy(float* dst, const float* src, size_t n) {
  if (n && dst != src) std::memcpy(dst, src, n * sizeof(float));
}

void CpuDevice::load_images(float* dst, const uint8_t* host, size_t n) {
  enter();
#pragma omp parallel for simd num_threads(threads_) if (n >= 4 * cpu::kParallelMin)
  for (size_t i = 0; i < n; ++i) dst[i] = float(host[i]) / 255.0f;
}

void CpuDevice::load_labels(float* dst, const uint8_t* host, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = float(host[i]);
}

// ---- communication: no OpenMP and no device state, so safe beside compute ops ----

// In blocks of 256 KB: glibc copies a block larger than its rep-movsb cut-off (AMD: the L2 size)
// with vector loads, which read lines that another core has just written (the peer's buffer, an
// all-reduce's every copy) at a third of the rate of the small blocks' rep movsb (a 2 MB copy,
// two ranks on two cores: 295 us vs 105 us; docs/decisions.md, "Cross-core copies").
void CpuDevice::comm_copy(float* dst, const float* src, size_t n) {
  if (n == 0 || dst == src) return;
  constexpr size_t kBlock = (size_t(256) << 10) / sizeof(float);
  for (size_t i = 0; i < n; i += kBlock)
    std::memcpy(dst + i, src + i, std::min(kBlock, n - i) * sizeof(float));
}

void CpuDevice::comm_reduce(float* dst, const float* src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] += src[i];
}

std::unique_ptr<Device> make_cpu_device(int rank, int threads) {
  return std::make_unique<CpuDevice>(rank, threads);
}

}  // namespace dpb
