// shm.cpp: the node-shared arena, peer mappings and the process barrier (see shm.h).
#include "collectives/shm.h"

#include <fcntl.h>
#include <sched.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

#include "src/core/check.h"
#include "src/core/cpu_relax.h"

namespace dpb {
namespace {

constexpr size_t kPage = 4096;

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

std::string errno_text() { return std::strerror(errno); }

}  // namespace

// ---------------------------------------------------------------- ShmArena

ShmArena::ShmArena(size_t reserve) {
  bytes_ = round_up(std::max(reserve, 2 * kHeader), kPage);
  fd_ = int(syscall(SYS_memfd_create, "dpbench-arena", 0));
  DPB_CHECK(fd_ >= 0, "shared arena: memfd_create failed: " << errno_text());
  if (ftruncate(fd_, off_t(bytes_)) != 0) {
    const std::string why = errno_text();
    close(fd_);
    throw Error("shared arena: ftruncate to " + std::to_string(bytes_) + " bytes failed: " + why);
  }
  void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd_, 0);
  if (p == MAP_FAILED) {
    const std::string why = errno_text();
    close(fd_);
    throw Error("shared arena: mmap of " + std::to_string(bytes_) + " bytes failed: " + why);
  }
  base_ = static_cast<char*>(p);
  free_[kHeader] = bytes_ - kHeader;
}

ShmArena::~ShmArena() {
  if (base_) munmap(base_, bytes_);
  if (fd_ >= 0) close(fd_);
}

float* ShmArena::alloc(size_t n, const char* what) {
  const size_t want = round_up(std::max<size_t>(n * sizeof(float), 1), kPage);
  std::lock_guard<std::mutex> lk(mu_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < want) continue;
    const size_t off = it->first, left = it->second - want;
    free_.erase(it);
    if (left > 0) free_[off + want] = left;
    used_[off] = want;
    std::memset(base_ + off, 0, want);  // zero-filled, as Device::alloc
    return reinterpret_cast<float*>(base_ + off);
  }
  throw Error(std::string("shared arena: no room for ") + what + " (" + std::to_string(n) +
              " floats) in " + std::to_string(bytes_ >> 20) +
              " MiB; raise DPB_SHM_ARENA_MB or set DPB_SHM=0 (MPI messages instead)");
}

void ShmArena::release(float* p) {
  if (!p) return;
  const int64_t off = offset_of(p);
  std::lock_guard<std::mutex> lk(mu_);
  auto it = off < 0 ? used_.end() : used_.find(size_t(off));
  DPB_CHECK(it != used_.end(), "shared arena: release of " << static_cast<void*>(p)
                                                           << ", which it did not allocate");
  size_t start = it->first, len = it->second;
  used_.erase(it);
  // The pages go back to the system (a hole reads as zeros), then the range joins its neighbours.
  fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off_t(start), off_t(len));
  auto next = free_.lower_bound(start);
  if (next != free_.end() && start + len == next->first) {
    len += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      prev->second += len;
      return;
    }
  }
  free_[start] = len;
}

int64_t ShmArena::offset_of(const void* p) const {
  const char* c = static_cast<const char*>(p);
  if (c < base_ + kHeader || c >= base_ + bytes_) return -1;
  return int64_t(c - base_);
}

// ---------------------------------------------------------------- ShmMapping

ShmMapping::ShmMapping(pid_t pid, int fd, size_t bytes) : bytes_(bytes) {
  const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  const int f = open(path.c_str(), O_RDWR);
  DPB_CHECK(f >= 0, "shared memory of process " << pid << ": cannot open " << path << ": "
                                                << errno_text());
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, f, 0);
  const std::string why = errno_text();
  close(f);  // the mapping keeps the memory
  DPB_CHECK(p != MAP_FAILED, "shared memory of process " << pid << ": mmap of " << bytes
                                                         << " bytes failed: " << why);
  base_ = static_cast<char*>(p);
}

ShmMapping::~ShmMapping() {
  if (base_) munmap(base_, bytes_);
}

bool process_alive(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!f || !std::getline(f, line)) return false;
  const size_t paren = line.rfind(')');  // the name may hold spaces and parentheses
  if (paren == std::string::npos || paren + 2 >= line.size()) return false;
  const char state = line[paren + 2];
  return state != 'Z' && state != 'X';
}

std::string group_rank_words(int r, const std::vector<int>& whole, const std::string& detail) {
  const int w = size_t(r) < whole.size() ? whole[size_t(r)] : r;
  std::string more = detail;
  if (w != r) more += std::string(more.empty() ? "" : ", ") + "sub-group rank " + std::to_string(r);
  return "rank " + std::to_string(w) + (more.empty() ? "" : " (" + more + ")");
}

// ---------------------------------------------------------------- ShmBarrier

namespace {

// Shared (not FUTEX_PRIVATE) futex calls: the word lives in memory of several processes.
void futex_wait(std::atomic<uint32_t>* w, uint32_t expect, long ns) {
  timespec ts{ns / 1000000000L, ns % 1000000000L};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(w), FUTEX_WAIT, expect, &ts, nullptr, 0);
}
void futex_wake_all(std::atomic<uint32_t>* w) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(w), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

}  // namespace

void ShmBarrier::arrive_and_wait(int k, long spin_ns, const std::vector<pid_t>& pids, int me,
                                 WatchSlot* slot, const std::vector<int>& whole) {
  // "rank W: ", this rank by its number in the whole group: the prefix rank_error_message
  // (src/core/launcher.h) takes for the rank's own. Made only on a failure (a hot path).
  const auto prefix = [&] {
    return "rank " + std::to_string(size_t(me) < whole.size() ? whole[size_t(me)] : me) + ": ";
  };
  if (aborted()) throw Error(prefix() + "process barrier aborted");
  const uint32_t g = gen_.load();
  if (count_.fetch_add(1) == uint32_t(k - 1)) {
    count_.store(0);  // before the release: a waiter may re-enter at once
    gen_.fetch_add(1);
    futex_wake_all(&gen_);
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  // Polling yields the core now and then: with more processes than cores (mpirun
  // --oversubscribe) the peer we wait for may need it (Open MPI yields when oversubscribed too).
  if (spin_ns > 0)
    for (unsigned i = 1; gen_.load() == g && !aborted(); ++i) {
      cpu_relax();
      if (i % 64 != 0) continue;
      if (std::chrono::steady_clock::now() - t0 > std::chrono::nanoseconds(spin_ns)) break;
      sched_yield();
    }
  WaitScope watched(slot, WaitKind::Barrier, -1, g);  // asleep: the watchdog may look (watchdog.h)
  while (gen_.load() == g && !aborted()) {
    futex_wait(&gen_, g, 100'000'000L);
    if (gen_.load() != g || aborted()) break;
    for (size_t r = 0; r < pids.size(); ++r)
      if (int(r) != me && !process_alive(pids[r])) {
        abort();
        throw Error(prefix() +
                    group_rank_words(int(r), whole, "pid " + std::to_string(pids[r])) +
                    " is gone: its process ended while the others waited for it in a barrier");
      }
  }
  if (aborted()) throw Error(prefix() + "process barrier aborted");
}

void ShmBarrier::abort() {
  aborted_.store(1);
  futex_wake_all(&gen_);  // sleepers wake and see the flag (a late sleeper within 100 ms)
}

}  // namespace dpb
