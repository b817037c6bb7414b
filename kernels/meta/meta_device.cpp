// meta_device.cpp: MetaDevice (see meta_device.h): the address range, alloc / release charged as
// CpuDevice::alloc charges, the conv workspaces through kernels/cpu/conv_workspace.h, and the
// make_meta_device factory. Every other op is an empty override in the header.
#include "kernels/meta/meta_device.h"

#include <omp.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <sstream>

#include "kernels/cpu/cpu_device.h"  // operator<< for shapes
#include "src/core/check.h"

namespace dpb {
namespace meta {

AddressRange::AddressRange() {
  // Down to 64 MiB: the trainer's validation sizes a model on a meta device (model_input_size),
  // which must not fail for want of address space under a tight ulimit -v.
  for (size_t want = size_t(1) << 40; want >= (size_t(64) << 20); want /= 2) {
    void* p = mmap(nullptr, want, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) continue;  // a smaller address space (ulimit -v, a sanitizer's layout)
    base_ = static_cast<char*>(p);
    bytes_ = want;
    free_[0] = want;
    return;
  }
  // No address space left is running out of memory (exit 3), as a refused allocation is.
  throw OutOfMemory("out of memory: meta: cannot reserve 64 MiB of address space for planning" +
                        address_limit_note(),
                    size_t(64) << 20, 0);
}

AddressRange::~AddressRange() {
  if (base_) munmap(base_, bytes_);
}

void* AddressRange::take(size_t bytes) {
  std::lock_guard<std::mutex> lk(mu_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < bytes) continue;
    const size_t off = it->first, left = it->second - bytes;
    free_.erase(it);
    if (left) free_[off + bytes] = left;
    used_[off] = bytes;
    return base_ + off;
  }
  return nullptr;
}

void AddressRange::give(void* p) {
  std::lock_guard<std::mutex> lk(mu_);
  auto u = used_.find(size_t(static_cast<char*>(p) - base_));
  if (u == used_.end()) return;
  size_t off = u->first, bytes = u->second;
  used_.erase(u);
  auto next = free_.lower_bound(off);
  if (next != free_.end() && next->first == off + bytes) {  // merge with the run after
    bytes += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {  // and with the run before
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      prev->second += bytes;
      return;
    }
  }
  free_[off] = bytes;
}

}  // namespace meta

MetaDevice::MetaDevice(int rank, int threads)
    : rank_(rank), threads_(threads), ledger_("meta:" + std::to_string(rank)),
      eng_(dnnl::engine::kind::cpu, 0) {
  DPB_CHECK(threads >= 1, "meta:" << rank << ": threads must be >= 1, got " << threads);
}

MetaDevice::~MetaDevice() = default;

std::string MetaDevice::name() const {
  std::ostringstream os;
  os << "meta:" << rank_ << " (plans the cpu backend's memory with " << threads_
     << (threads_ == 1 ? " thread" : " threads") << "; runs no math)";
  return os.str();
}

// As CpuDevice::alloc: the same bytes, the same checks, the same ledger calls.
float* MetaDevice::alloc(size_t n, MemCategory cat, const char* what) {
  DPB_CHECK(n <= SIZE_MAX / sizeof(float) - 64, "meta:" << rank_ << ": allocation of "
                                                        << (what ? what : "?") << " too large ("
                                                        << n << " floats)");
  size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
  if (bytes == 0) bytes = 64;
  ledger_.reserve(bytes, cat, what);  // throws past the capacity (--device-mem)
  void* p = addresses_.take(bytes);
  if (!p)
    ledger_.fail(bytes, cat, what,
                 "the meta backend's address range (" + format_mem_bytes(addresses_.bytes()) +
                     " per device) is full");
  ledger_.track(p, bytes, cat);
  return static_cast<float*>(p);
}

void MetaDevice::release(float* p) {
  if (!p) return;
  ledger_.release(p);
  addresses_.give(p);
}

void MetaDevice::download(float* host, const float*, size_t n) {
  if (n) std::memset(host, 0, n * sizeof(float));
}

const cpu::ConvWorkspace& MetaDevice::conv_plan(const ConvShape& s) {
  const std::array<int, 9> key{s.n, s.c, s.h, s.w, s.k, s.r, s.s, s.pad, s.stride};
  auto it = conv_plans_.find(key);
  if (it != conv_plans_.end()) return it->second;
  DPB_CHECK(s.n > 0 && s.c > 0 && s.k > 0 && s.r > 0 && s.s > 0 && s.stride > 0 && s.pad >= 0 &&
                s.oh() > 0 && s.ow() > 0,
            "meta:" << rank_ << ": conv2d: invalid shape " << s);
  // oneDNN sizes its scratchpads (and may pick layouts) by the calling thread's OpenMP thread
  // count: the CPU device's, which sets it before it makes its primitives (CpuDevice::enter).
  if (omp_get_max_threads() != threads_) omp_set_num_threads(threads_);
  try {
    const cpu::ConvUserDescs u = cpu::conv_user_descs(s);
    const cpu::ConvFwdPd fwd = cpu::conv_forward_pd(s, eng_);
    cpu::ConvWorkspace ws =
        cpu::conv_workspace(u, fwd, cpu::conv_backward_weights_pd(s, eng_, fwd));
    ws.backward_data = cpu::conv_backward_data_workspace(u, cpu::conv_backward_data_pd(s, eng_, fwd));
    return conv_plans_.emplace(key, std::move(ws)).first->second;
  } catch (const dnnl::error& e) {
    DPB_CHECK(false, "meta:" << rank_ << ": conv2d " << s << ": oneDNN error: " << e.what());
  }
}

void MetaDevice::conv2d_forward(const ConvShape& s, const float*, const float*, const float*,
                                float*) {
  cpu::reserve_workspace(ws_, conv_plan(s).forward, ledger_);
}

void MetaDevice::conv2d_backward(const ConvShape& s, const float*, const float*, const float*,
                                 float* dx, float*, float*) {
  const cpu::ConvWorkspace& ws = conv_plan(s);
  if (dx) cpu::reserve_workspace(ws_, ws.backward_data, ledger_);
  cpu::reserve_workspace(ws_, ws.backward_weights, ledger_);
}

std::unique_ptr<Device> make_meta_device(int rank, int threads) {
  return std::make_unique<MetaDevice>(rank, threads);
}

}  // namespace dpb
