// shm.h: memory that the processes of one node share, for the MPI transport's direct path
// (collectives/mpi/mpi_transport.h): ranks of one node read and write each other's collective buffers in
// place, as the threads transport does, instead of sending messages (MPI_Allreduce through Open
// MPI's shared-memory BTL copies every message once more: see docs/decisions.md).
//
//   ShmArena arena(16 << 30);                    // this process: a sparse memfd, mapped
//   float* g = arena.alloc(n, "gradients");      // collective buffers come from it
//   ShmMapping peer(pid, fd, bytes);             // a peer's arena, through /proc/<pid>/fd/<fd>
//   ShmBarrier* b = new (place) ShmBarrier;      // in memory every process maps
//   b->arrive_and_wait(k, spin_ns, pids, me);    // a process barrier that sees dead peers
//
// Linux only (memfd_create, futex). Tested by tests/test_shm.cpp (fork()ed processes).
#pragma once
#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "src/core/device.h"
#include "src/core/watchdog.h"

namespace dpb {

// A process's shared arena: `reserve` bytes of a memfd (sparse: pages cost memory once touched),
// mapped MAP_SHARED. The first kShmHeader bytes are the owner's control block (what it publishes
// to peers); allocations come after, page-aligned and zero-filled. Throws dpb::Error naming the
// request when the arena is full. Thread-safe.
class ShmArena final : public MemoryOwner {
 public:
  static constexpr size_t kHeader = 4096;
  explicit ShmArena(size_t reserve);
  ~ShmArena();
  ShmArena(const ShmArena&) = delete;
  ShmArena& operator=(const ShmArena&) = delete;

  float* alloc(size_t n, const char* what);
  void release(float* p) override;
  int fd() const { return fd_; }
  size_t bytes() const { return bytes_; }
  char* base() const { return base_; }
  void* header() const { return base_; }
  // Byte offset of p in the arena, or -1 when p is not inside it.
  int64_t offset_of(const void* p) const;

 private:
  int fd_ = -1;
  size_t bytes_ = 0;
  char* base_ = nullptr;
  std::mutex mu_;
  std::map<size_t, size_t> free_;  // offset -> bytes
  std::map<size_t, size_t> used_;  // offset -> bytes
};

// Another process's arena mapped into this one (read and write), by its pid and fd. Throws
// dpb::Error naming the pid when /proc/<pid>/fd/<fd> cannot be opened or mapped.
class ShmMapping {
 public:
  ShmMapping(pid_t pid, int fd, size_t bytes);
  ~ShmMapping();
  ShmMapping(const ShmMapping&) = delete;
  ShmMapping& operator=(const ShmMapping&) = delete;
  char* base() const { return base_; }

 private:
  char* base_ = nullptr;
  size_t bytes_ = 0;
};

// true while process pid exists and is not a zombie.
bool process_alive(pid_t pid);

// Rank r of a group as messages name it: "rank W", W its number in the whole group (whole[r];
// whole empty: r), which is the number the user launched it as; a sub-group's rank (a split of
// the MPI transport, MPI_Comm_split) whose own number r differs adds "(sub-group rank r)".
// detail, when given, goes first in the parentheses: "rank 3 (pid 42, sub-group rank 1)".
std::string group_rank_words(int r, const std::vector<int>& whole, const std::string& detail = "");

// A barrier of k processes in shared memory (placement-new it into memory all of them map; all
// zero bytes is its initial state). A waiter polls for spin_ns, then sleeps on a futex, waking
// every 100 ms to look for dead peers: arrive_and_wait throws dpb::Error naming the first rank in
// pids (index = rank) whose process is gone, and throws once abort() was called anywhere.
class ShmBarrier {
 public:
  // slot: the waiting rank's (src/core/watchdog.h), marked while it sleeps (not while it polls).
  // whole: the ranks' numbers in the whole group (a sub-group's barrier), as its messages name
  // them (group_rank_words); empty: pids' indices are those numbers.
  void arrive_and_wait(int k, long spin_ns, const std::vector<pid_t>& pids, int me,
                       WatchSlot* slot = nullptr, const std::vector<int>& whole = {});
  void abort();
  bool aborted() const { return aborted_.load() != 0; }

 private:
  alignas(64) std::atomic<uint32_t> count_{0};
  alignas(64) std::atomic<uint32_t> gen_{0};
  std::atomic<uint32_t> aborted_{0};
};
static_assert(sizeof(std::atomic<uint32_t>) == 4 && std::atomic<uint32_t>::is_always_lock_free,
              "the process barrier needs lock-free 32-bit atomics (futex words)");

}  // namespace dpb
