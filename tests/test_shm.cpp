// Tests of collectives/shm.h: the shared arena, mapping it from another process, and the process
// barrier (with fork()ed processes, as the MPI transport's ranks of one node).
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <new>
#include <thread>

#include <gtest/gtest.h>

#include "collectives/shm.h"
#include "src/core/check.h"

namespace dpb {
namespace {

// Runs body in a child process; returns its exit status (0: body returned true).
template <class F>
pid_t fork_child(F body) {
  const pid_t pid = fork();
  if (pid == 0) {
    bool ok = false;
    try {
      ok = body();
    } catch (...) {
    }
    _exit(ok ? 0 : 1);
  }
  return pid;
}

int wait_exit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(ShmArena, AllocationsArePageAlignedZeroedAndReused) {
  ShmArena a(8 << 20);
  float* p = a.alloc(1000, "p");
  float* q = a.alloc(5, "q");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 4096, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(q) % 4096, 0u);
  EXPECT_GE(a.offset_of(p), int64_t(ShmArena::kHeader));
  EXPECT_EQ(a.offset_of(q) - a.offset_of(p), 4096);  // 4000 bytes take one page
  EXPECT_EQ(a.offset_of(&p[999]) - a.offset_of(p), 999 * 4);
  int x = 0;
  EXPECT_EQ(a.offset_of(&x), -1);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(p[i], 0.0f);
  for (int i = 0; i < 1000; ++i) p[i] = 1.0f;
  a.release(p);
  float* r = a.alloc(1000, "r");  // the freed range again, zero-filled
  EXPECT_EQ(r, p);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(r[i], 0.0f);
  a.release(q);
  a.release(r);
  // Freed neighbours merge: the whole arena (but the header) is one range again.
  float* all = a.alloc((a.bytes() - ShmArena::kHeader) / 4, "all");
  EXPECT_EQ(a.offset_of(all), int64_t(ShmArena::kHeader));
  a.release(all);
}

TEST(ShmArena, ErrorsNameTheBuffer) {
  ShmArena a(1 << 20);
  try {
    a.alloc(1 << 20, "gradients");
    FAIL() << "4 MiB fitted in a 1 MiB arena";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gradients"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("DPB_SHM_ARENA_MB"), std::string::npos) << e.what();
  }
  float x = 0;
  EXPECT_THROW(a.release(&x), Error);
  a.release(nullptr);  // as free(nullptr)
}

TEST(ShmMapping, AnotherProcessWritesIntoTheArena) {
  ShmArena a(4 << 20);
  float* buf = a.alloc(1024, "buf");
  const int64_t off = a.offset_of(buf);
  const pid_t parent = getpid();
  const int fd = a.fd();
  const size_t bytes = a.bytes();
  // The child maps the parent's arena by pid and fd, as a peer rank does, and writes into it.
  const pid_t child = fork_child([&] {
    ShmMapping m(parent, fd, bytes);
    float* peer = reinterpret_cast<float*>(m.base() + off);
    for (int i = 0; i < 1024; ++i) peer[i] = float(i) + 0.5f;
    return true;
  });
  ASSERT_EQ(wait_exit(child), 0);
  for (int i = 0; i < 1024; ++i) ASSERT_EQ(buf[i], float(i) + 0.5f) << i;
  a.release(buf);
}

TEST(ShmMapping, MissingProcessIsNamed) {
  try {
    ShmMapping m(999999999, 3, 4096);
    FAIL() << "mapped a process that does not exist";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("999999999"), std::string::npos) << e.what();
  }
}

// Three processes (this one and two children) pass a barrier 2000 times; between barriers each
// writes its round into its slot and checks everyone's: a rank that ran ahead would show.
TEST(ShmBarrier, ProcessesStayInStep) {
  ShmArena a(1 << 20);
  auto* bar = new (a.header()) ShmBarrier();
  auto* slots = reinterpret_cast<std::atomic<int>*>(a.alloc(16, "slots"));
  const int k = 3, rounds = 2000;
  std::vector<pid_t> pids(k, getpid());  // every process alive: the children are checked below
  auto run = [&](int me, long spin) {
    for (int i = 0; i < rounds; ++i) {
      slots[me].store(i);
      bar->arrive_and_wait(k, spin, pids, me);
      for (int p = 0; p < k; ++p)
        if (slots[p].load() != i) return false;
      bar->arrive_and_wait(k, spin, pids, me);
    }
    return true;
  };
  const pid_t c1 = fork_child([&] { return run(1, 0); });        // sleeps at once
  const pid_t c2 = fork_child([&] { return run(2, 100000); });   // polls first
  EXPECT_TRUE(run(0, 20000));
  EXPECT_EQ(wait_exit(c1), 0);
  EXPECT_EQ(wait_exit(c2), 0);
}

TEST(ShmBarrier, DeadPeerIsNamedWithinASecond) {
  ShmArena a(1 << 20);
  auto* bar = new (a.header()) ShmBarrier();
  const pid_t child = fork_child([] { return true; });  // ends without arriving
  const std::vector<pid_t> pids{getpid(), child};
  const auto t0 = std::chrono::steady_clock::now();
  try {
    bar->arrive_and_wait(2, 0, pids, 0);
    FAIL() << "the barrier passed without rank 1";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("rank 1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("is gone"), std::string::npos) << msg;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  EXPECT_TRUE(bar->aborted());  // and the others see it too
  wait_exit(child);
}

// A sub-group's barrier (an MPI sub-transport's, made by Transport::split) names its ranks by
// their numbers in the whole group, the ranks the user launched: here world ranks 2 and 3 as
// sub-group ranks 0 and 1, and world rank 3's process is the one that is gone.
TEST(ShmBarrier, SubGroupDeadPeerIsNamedByItsWholeGroupRank) {
  EXPECT_EQ(group_rank_words(1, {}), "rank 1");
  EXPECT_EQ(group_rank_words(1, {0, 1, 2}), "rank 1");  // the whole group: no sub-group number
  EXPECT_EQ(group_rank_words(1, {2, 3}), "rank 3 (sub-group rank 1)");
  EXPECT_EQ(group_rank_words(0, {2, 3}, "pid 42"), "rank 2 (pid 42, sub-group rank 0)");
  EXPECT_EQ(group_rank_words(1, {0, 1}, "pid 42"), "rank 1 (pid 42)");
  ShmArena a(1 << 20);
  auto* bar = new (a.header()) ShmBarrier();
  const pid_t child = fork_child([] { return true; });  // ends without arriving
  const std::vector<pid_t> pids{getpid(), child};
  try {
    bar->arrive_and_wait(2, 0, pids, 0, nullptr, {2, 3});
    FAIL() << "the barrier passed without world rank 3";
  } catch (const Error& e) {
    const std::string msg = e.what();
    const std::string want = "rank 2: rank 3 (pid " + std::to_string(child) +
                             ", sub-group rank 1) is gone";
    EXPECT_EQ(msg.rfind(want, 0), 0u) << msg;
  }
  try {
    bar->arrive_and_wait(2, 0, pids, 0, nullptr, {2, 3});
    FAIL() << "an aborted barrier passed";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "rank 2: process barrier aborted");
  }
  wait_exit(child);
}

TEST(ShmBarrier, AbortWakesAWaiter) {
  ShmArena a(1 << 20);
  auto* bar = new (a.header()) ShmBarrier();
  const std::vector<pid_t> pids{getpid(), getpid()};
  std::atomic<bool> threw{false};
  std::thread waiter([&] {
    try {
      bar->arrive_and_wait(2, 0, pids, 0);
    } catch (const Error&) {
      threw = true;
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  bar->abort();
  waiter.join();
  EXPECT_TRUE(threw.load());
  EXPECT_THROW(bar->arrive_and_wait(2, 0, pids, 1), Error);  // aborted stays aborted
}

}  // namespace
}  // namespace dpb
