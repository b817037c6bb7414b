// memory.h: device memory accounting. Every allocation a run makes through a Device names its
// category (MemCategory); the device's MemoryLedger counts the bytes in use per category, the peak
// and the breakdown at the peak, and enforces an optional capacity (--device-mem): an allocation
// that would pass it throws OutOfMemory, as cudaMalloc fails on a GPU of that size. The counting
// lives here, once: every backend's alloc/release (and its internal workspaces) go through
// reserve/track/release, so the CPU, async and CUDA backends count alike.
#pragma once
#include <cstddef>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "src/core/check.h"

namespace dpb {

// What an allocation holds. Parameters also hold the model's other state (batch-norm running
// statistics); activations are outputs saved for backward; temporaries live within one op or
// step (gradient scratch, loss accumulators); workspace is the kernels' own (oneDNN scratchpads
// and copies, cuDNN/cuBLAS workspaces); comm is communication buffers (staging, NCCL's own);
// data is the input batch and its staging.
enum class MemCategory {
  Parameters,
  Gradients,
  OptimizerState,
  Activations,
  Temporaries,
  Workspace,
  Comm,
  Data
};
inline constexpr int kMemCategories = 8;
inline constexpr MemCategory kMemCategoryList[kMemCategories] = {
    MemCategory::Parameters,  MemCategory::Gradients,   MemCategory::OptimizerState,
    MemCategory::Activations, MemCategory::Temporaries, MemCategory::Workspace,
    MemCategory::Comm,        MemCategory::Data};
// "parameters", "gradients", "optimizer_state", "activations", "temporaries", "workspace",
// "comm", "data": the CSV's column suffixes and the printed breakdown's words.
const char* mem_category_name(MemCategory c);

// Bytes in use per category.
struct MemoryUsage {
  size_t bytes[kMemCategories] = {};
  size_t& operator[](MemCategory c) { return bytes[int(c)]; }
  size_t operator[](MemCategory c) const { return bytes[int(c)]; }
  size_t total() const;
  // "parameters 1.2 MiB, gradients 1.2 MiB, ..." (categories in use only; "nothing" when empty).
  std::string breakdown() const;
};

// "512 B", "1.5 KiB", "24 MiB", "3.25 GiB".
std::string format_mem_bytes(size_t bytes);
// Parses a size: a number with an optional unit B, KB, MB, GB, TB (powers of 1000) or KiB, MiB,
// GiB, TiB (powers of 1024), case-insensitive: "24GiB", "80GB", "512MiB", "1e9". Returns false
// (out untouched) for anything else, zero or a value past 2^62.
bool parse_bytes(const std::string& text, size_t& out);

// The process's address-space limit (RLIMIT_AS, `ulimit -v`) in bytes; 0 when there is none.
size_t address_space_limit();
// "; the process's address space is limited to 1.05 GiB (ulimit -v 1100000)" when such a limit
// is set, else "": appended to the messages of allocations the host refused.
std::string address_limit_note();
// Under an address-space limit (no-op without one): caps glibc's malloc arenas at 2 (each
// reserves 64 MiB of address space per thread that allocates), and turns the crashes of
// libraries that do not check every allocation (oneDNN's JIT code buffers: SIGSEGV; libgcc_s not
// loadable: SIGABRT; std::bad_alloc escaping a library's thread: std::terminate) into exit 3 with
// a message naming the signal and the limit. `prog` names the program in the message.
void exit_3_on_crash_under_address_limit(const char* prog);

// An allocation that did not fit: past the ledger's capacity, or refused by the device itself
// (cudaErrorMemoryAllocation). what() is the one message: device, what was allocated and its
// size and category, the breakdown in use, the capacity.
class OutOfMemory : public Error {  // a dpb::Error: callers that catch Error see it too
 public:
  OutOfMemory(const std::string& message, size_t bytes, size_t capacity)
      : Error(message), bytes_(bytes), capacity_(capacity) {}
  size_t bytes() const { return bytes_; }        // the allocation that failed
  size_t capacity() const { return capacity_; }  // 0: the device's own limit (real OOM)

 private:
  size_t bytes_, capacity_;
};

// One device's accounting; thread-safe (a rank's communication thread may allocate staging).
class MemoryLedger {
 public:
  explicit MemoryLedger(std::string device = "") : device_(std::move(device)) {}
  MemoryLedger(const MemoryLedger&) = delete;
  MemoryLedger& operator=(const MemoryLedger&) = delete;

  void set_device(const std::string& name);  // named in OutOfMemory's message
  // The capacity in bytes (0: unlimited, the default); applies to allocations from now on.
  void set_capacity(size_t bytes);
  size_t capacity() const;

  // Before the backend allocates: charges bytes to c, or throws OutOfMemory when they would take
  // the total past the capacity (nothing charged then).
  void reserve(size_t bytes, MemCategory c, const char* what);
  void unreserve(size_t bytes, MemCategory c);  // gives back a reservation (or a freed one)
  // After the backend allocated p for a reservation: release(p) gives it back by pointer.
  void track(const void* p, size_t bytes, MemCategory c);
  // reserve + track, for memory already allocated (a device wrapper adopting it).
  void add(const void* p, size_t bytes, MemCategory c, const char* what) {
    reserve(bytes, c, what);
    track(p, bytes, c);
  }
  // Gives back p's bytes; false when p is not tracked (nothing changes).
  bool release(const void* p);
  // The device refused an allocation it had reserved room for (cudaErrorMemoryAllocation):
  // unreserve it and throw OutOfMemory naming the cause.
  [[noreturn]] void fail(size_t bytes, MemCategory c, const char* what, const std::string& cause);

  MemoryUsage current() const;
  MemoryUsage peak() const;  // the usage when the total was highest
  size_t tracked() const;    // allocations tracked by pointer (for tests)

 private:
  [[noreturn]] void throw_oom(size_t bytes, MemCategory c, const char* what,
                              const std::string& cause) const;  // with mu_ held
  mutable std::mutex mu_;
  std::string device_;
  size_t capacity_ = 0;
  MemoryUsage cur_, peak_;
  size_t cur_total_ = 0, peak_total_ = 0;
  struct Entry {
    size_t bytes;
    MemCategory cat;
  };
  std::unordered_map<const void*, Entry> live_;
};

}  // namespace dpb
