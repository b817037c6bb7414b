// test_allreduce.cpp: CommGroup and every all-reduce algorithm of the table
// (collectives/registry.h) that runs on every backend, on the CPU backend (one thread per rank),
// every element checked on every rank against an exactly representable sum; the CUDA-style event
// handshake of the barrier, checked with a recording device; make_allreduce's errors and rank
// count refusals; abort on failure. Run: ./dpb_tests --gtest_filter='AllReduce*:CommGroup*'
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <functional>
#include <thread>
#include <vector>

#include "tests/cpu_ranks.h"
#include "tests/rank_threads.h"
#include "collectives/allreduce.h"
#include "collectives/registry.h"
#include "src/core/check.h"
#include "src/core/forwarding_device.h"
#include "src/core/registry.h"
#include "kernels/cpu/cpu_device.h"

namespace dpb {
namespace {


// Buffer r holds (r+1)*(i%7+1): every partial sum is a small integer, so float sums are exact
// in any order, and the result is (i%7+1)*k(k+1)/2.
void check_allreduce(AllReduce& ar, CommGroup& group, size_t n, int rounds) {
  const int k = group.size();
  on_ranks(k, [&](int r) {
    Device& dev = group.device(r);
    std::vector<float> host(n);
    for (size_t i = 0; i < n; ++i) host[i] = float((r + 1) * int(i % 7 + 1));
    Buffer buf(dev, n, MemCategory::Temporaries, "test buffer");
    dev.upload(buf.get(), host.data(), n);
    float scale = 1;
    for (int round = 0; round < rounds; ++round) {  // round 2 reduces the reduced buffers
      ar.run(r, buf.get(), n);
      scale *= round == 0 ? float(k * (k + 1) / 2) : float(k);
    }
    dev.synchronize();
    dev.download(host.data(), buf.get(), n);
    size_t wrong = 0, first = n;
    for (size_t i = 0; i < n; ++i)
      if (host[i] != scale * float(i % 7 + 1)) { ++wrong; if (first == n) first = i; }
    EXPECT_EQ(wrong, 0u) << ar.name() << " k=" << k << " n=" << n << " rank " << r
                         << ": first wrong element " << first << " = "
                         << (first < n ? host[first] : 0) << ", want "
                         << scale * float(first % 7 + 1);
  });
}

// The algorithms written over Device's primitives (they run on every backend) that accept k ranks.
std::vector<std::string> portable_algorithms(int k) {
  std::vector<std::string> names;
  for (const AllReduceEntry& e : allreduce_algorithms())
    if (e.runs_on.empty() && allreduce_refusal(e, k, BackendKind::Cpu).empty())
      names.push_back(e.name);
  return names;
}

// Under a sanitizer (most of this test's minute under TSan) the 4 MB buffer runs at k = 2 and 3
// only; PipelinedRingExactSums covers the pipelined schedule it takes at the other k.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int kLargestBufferUpToK = 3;
#else
constexpr int kLargestBufferUpToK = 8;
#endif

TEST(AllReduce, ExactSumsEveryRankEveryElement) {
  for (int k = 1; k <= 8; ++k) {
    CpuRanks ranks(k);
    CommGroup& group = ranks.group;
    for (const std::string& algo : portable_algorithms(k)) {
      auto ar = make_allreduce(algo, group);
      EXPECT_EQ(ar->name(), algo);
      // One group and one object for all sizes: repeated calls, growing and shrinking.
      for (size_t n : {size_t(0), size_t(1), size_t(2), size_t(3), size_t(k - 1), size_t(k),
                       size_t(k + 1), size_t(1000), size_t(1048577), size_t(129000), size_t(5)})
        if (n != 1048577 || k <= kLargestBufferUpToK)
          check_allreduce(*ar, group, n, n == 1000 ? 2 : 1);
    }
  }
}

TEST(AllReduce, PipelinedRingExactSums) {
  // Force the pipelined schedule (which the CPU default uses only above 8 MB) at small sizes,
  // including pieces of one float and chunks shorter than the piece count.
  for (int k : {2, 3, 4, 8}) {
    CpuRanks ranks(k);
    CommGroup& group = ranks.group;
    for (size_t piece : {size_t(1), size_t(3), size_t(1000)}) {
      auto ar = make_ring_allreduce(group, piece);
      for (size_t n : {size_t(1), size_t(k + 1), size_t(1000), size_t(10007)})
        check_allreduce(*ar, group, n, 2);
    }
  }
  // The CPU default: large enough to pipeline (k * n * 4 bytes above 8 MB).
  CpuRanks ranks(3);
  CommGroup& group = ranks.group;
  check_allreduce(*make_allreduce("ring", group), group, 3000001, 1);
}

TEST(AllReduce, ChunksCoverTheBuffer) {
  for (int k : {1, 2, 3, 8})
    for (size_t n : {size_t(0), size_t(1), size_t(7), size_t(8), size_t(1001)}) {
      size_t next = 0;
      for (int c = 0; c < k; ++c) {
        EXPECT_EQ(chunk_begin(n, k, c), next);
        EXPECT_LE(chunk_size(n, k, c), n / k + 1);
        EXPECT_GE(chunk_size(n, k, c), n / k);
        next += chunk_size(n, k, c);
      }
      EXPECT_EQ(next, n);
    }
}

TEST(AllReduce, FactoryErrors) {
  CpuRanks ranks(2);
  CommGroup& group = ranks.group;
  try {
    make_allreduce("tree", group);
    FAIL() << "no error for an unknown algorithm";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'tree'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(entry_names(allreduce_algorithms())), std::string::npos)
        << e.what();
  }
  try {
    make_allreduce("nccl", group);
    FAIL() << "nccl accepted on the CPU backend";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--backend cuda"), std::string::npos) << e.what();
  }
#ifndef DPB_HAVE_CUDA
  EXPECT_THROW(make_nccl_allreduce(group), Error);
#endif
  EXPECT_THROW(CommGroup(0, {}), Error);
  EXPECT_THROW(CommGroup(2, {ranks.raw[0]}), Error);
}

// An algorithm that refuses a rank count does so when it is made, naming itself and k; every
// algorithm accepts some k in 2..8.
TEST(AllReduce, RefusedRankCountsNameTheAlgorithmAndK) {
  for (const AllReduceEntry& e : allreduce_algorithms()) {
    if (!e.runs_on.empty() || !(e.launchers & AllReduceEntry::kThreads)) continue;
    int accepted = 0;
    for (int k = 1; k <= 9; ++k) {
      const std::string why = allreduce_refusal(e, k, BackendKind::Cpu);
      if (why.empty()) {
        accepted += k >= 2;
        continue;
      }
      EXPECT_NE(why.find(e.name), std::string::npos) << why;
      EXPECT_NE(why.find(std::to_string(k)), std::string::npos) << why;
      CpuRanks ranks(k);
      CommGroup& group = ranks.group;
      EXPECT_THROW(make_allreduce(e.name, group), Error) << e.name << " k=" << k;
    }
    EXPECT_GT(accepted, 0) << e.name;
  }
}

// Process-only algorithms (mpi) refuse threads, saying how to start processes; the others run
// with either.
TEST(AllReduce, LaunchersOfTheTable) {
  int process_only = 0;
  for (const AllReduceEntry& e : allreduce_algorithms()) {
    const std::string threads = allreduce_refusal(e, 2, BackendKind::Cpu, Launcher::Threads);
    const std::string procs = allreduce_refusal(e, 2, BackendKind::Cpu, Launcher::Mpi);
    if (e.launchers == AllReduceEntry::kProcesses) {
      ++process_only;
      EXPECT_NE(threads.find("mpirun"), std::string::npos) << e.name << ": " << threads;
      EXPECT_EQ(procs, "") << e.name;
      CpuRanks ranks(2);
      CommGroup& group = ranks.group;
      EXPECT_THROW(make_allreduce(e.name, group), Error) << e.name;
    } else if (e.launchers == AllReduceEntry::kThreads) {  // hier: threads only (for now)
      EXPECT_EQ(threads, "") << e.name;
      EXPECT_NE(procs.find("threads"), std::string::npos) << e.name << ": " << procs;
    } else if (e.runs_on.empty() && e.name != "rhd") {
      EXPECT_EQ(threads, "") << e.name;
      EXPECT_EQ(procs, "") << e.name;
    }
  }
  EXPECT_EQ(process_only, 1);  // mpi
  EXPECT_EQ(find_allreduce("mpi").launchers, AllReduceEntry::kProcesses);
}

TEST(AllReduce, FormatBytes) {
  EXPECT_EQ(format_bytes(129000 * 4.0), "516.0 KB");
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(999), "999 B");
  EXPECT_EQ(format_bytes(11200000 * 4.0), "44.8 MB");
  EXPECT_EQ(format_bytes(2.5e9), "2.5 GB");
}

TEST(CommGroup, AbortWakesWaitingRanks) {
  for (int k : {2, 3}) {
    CpuRanks ranks(k);
    CommGroup& group = ranks.group;
    std::atomic<int> threw{0};
    on_ranks(k, [&](int r) {
      if (r == k - 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let the others block
        group.abort(r, "rank failed on purpose");
        return;
      }
      try {
        group.barrier(r);
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("rank failed on purpose"), std::string::npos);
        ++threw;
      }
    });
    EXPECT_EQ(threw.load(), k - 1);
    EXPECT_TRUE(group.aborted());
    EXPECT_THROW(group.barrier(0), Error);  // stays aborted
  }
}

// Both waiting modes: a barrier that releases early or late shows up as a rank seeing a counter
// of another phase; abort wakes pollers and sleepers alike.
TEST(HostBarrier, PollingAndSleepingWaitersStayInStep) {
  for (long spin_ns : {0L, 100000L}) {
    for (int k : {2, 3, 5}) {  // k > cores polls on an oversubscribed machine: slow but correct
      HostBarrier bar(k, spin_ns);
      std::atomic<int> arrived{0}, bad{0};
      const int kRounds = spin_ns > 0 && k > 2 ? 200 : 2000;
      on_ranks(k, [&](int) {
        for (int i = 0; i < kRounds; ++i) {
          ++arrived;
          ASSERT_TRUE(bar.arrive_and_wait());
          if (arrived.load() < (i + 1) * k) ++bad;  // released before everyone arrived
          ASSERT_TRUE(bar.arrive_and_wait());       // nobody starts round i+1 before all checked
        }
      });
      EXPECT_EQ(bad.load(), 0) << "k=" << k << " spin_ns=" << spin_ns;
      EXPECT_EQ(arrived.load(), kRounds * k);
    }
    HostBarrier bar(3, spin_ns);
    std::atomic<int> woke{0};
    on_ranks(3, [&](int r) {
      if (r == 2) {
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        bar.abort();
      } else if (!bar.arrive_and_wait()) {
        ++woke;
      }
    });
    EXPECT_EQ(woke.load(), 2) << "spin_ns=" << spin_ns;
  }
}

TEST(CommGroup, BarrierSpinDefaultAndOverride) {
  const unsigned hw = std::thread::hardware_concurrency();
  RankDevices two(2);
  {
    unsetenv("DPB_SPIN_US");
    CommGroup group(2, two.raw);
    EXPECT_EQ(group.barrier_spin_ns(), hw >= 2 ? 100000 : 0);
  }
  if (hw > 0) {
    const int k = int(hw) + 1;  // more ranks than hardware threads: waiters sleep at once
    CpuRanks many(k);
    CommGroup& group = many.group;
    EXPECT_EQ(group.barrier_spin_ns(), 0);
  }
  if (hw > 0) {
    EXPECT_EQ(default_barrier_spin_ns(int(hw)), 100000);
    EXPECT_EQ(default_barrier_spin_ns(int(hw) + 1), 0);  // e.g. k ranks + k comm threads > cores
    CommGroup group(2, two.raw);
    group.set_barrier_spin_ns(0);
    EXPECT_EQ(group.barrier_spin_ns(), 0);
  }
  setenv("DPB_SPIN_US", "2.5", 1);
  EXPECT_EQ(CommGroup(2, two.raw).barrier_spin_ns(), 2500);
  EXPECT_EQ(default_barrier_spin_ns(1000000), 2500);  // the override wins over the count
  for (const char* bad : {"", "fast", "-1", "1e9", "5us", "nan"}) {
    setenv("DPB_SPIN_US", bad, 1);
    try {
      CommGroup group(2, two.raw);
      ADD_FAILURE() << "DPB_SPIN_US='" << bad << "' was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("DPB_SPIN_US"), std::string::npos) << e.what();
    }
  }
  unsetenv("DPB_SPIN_US");
}

// ---- a forwarding device that can pretend to be CUDA (to run the event handshake) and fail ----

struct Shared {  // the recording devices of one group
  std::vector<std::atomic<long>> records;
  std::atomic<long> violations{0}, waits{0};
  explicit Shared(int k) : records(k) {}
};

// Compute ops, memory and the other comm ops go to a CPU device (ForwardingDevice).
class RecordingDevice final : public ForwardingDevice {
 public:
  RecordingDevice(int rank, Shared& sh, bool pretend_cuda)
      : ForwardingDevice(make_cpu_device(rank, 1)), sh_(sh), cuda_(pretend_cuda) {}
  int fail_reduce_after = -1;  // comm_reduce throws on its call number fail_reduce_after
  std::vector<long> seen;      // per peer: the record count this device last waited on

  BackendKind kind() const override { return cuda_ ? BackendKind::Cuda : BackendKind::Cpu; }
  std::string name() const override { return "recording " + in_->name(); }
  void comm_reduce(float* d, const float* s, size_t n) override {
    if (reduces_++ == fail_reduce_after) throw Error("injected comm_reduce failure");
    in_->comm_reduce(d, s, n);
  }
  void comm_record() override { ++sh_.records[rank()]; }
  // A peer must not record again before every rank has waited on its previous record: each
  // wait must see a record count one higher than the one it waited on last time.
  void comm_wait_peer(Device& peer) override {
    if (seen.empty()) seen.assign(sh_.records.size(), 0);
    const long now = sh_.records[peer.rank()].load();
    if (now != seen[peer.rank()] + 1) ++sh_.violations;
    seen[peer.rank()] = now;
    ++sh_.waits;
  }

 private:
  Shared& sh_;
  bool cuda_;
  int reduces_ = 0;
};

TEST(CommGroup, EventHandshakeWhenDevicesAreNotCpu) {
  for (int k : {2, 3, 4}) {
    Shared sh(k);
    std::vector<std::unique_ptr<RecordingDevice>> devs;
    std::vector<Device*> raw;
    for (int r = 0; r < k; ++r) {
      devs.push_back(std::make_unique<RecordingDevice>(r, sh, /*pretend_cuda=*/true));
      raw.push_back(devs.back().get());
    }
    CommGroup group(k, raw);
    for (const std::string& algo : portable_algorithms(k)) {
      auto ar = make_allreduce(algo, group);
      for (size_t n : {size_t(1), size_t(k + 1), size_t(100003)}) check_allreduce(*ar, group, n, 2);
    }
    auto pipelined = make_ring_allreduce(group, 7);
    for (size_t n : {size_t(1), size_t(100)}) check_allreduce(*pipelined, group, n, 2);
    EXPECT_EQ(sh.violations.load(), 0) << "k=" << k;
    EXPECT_GT(sh.waits.load(), 0);
#ifndef DPB_HAVE_CUDA
    EXPECT_THROW(make_allreduce("nccl", group), Error);  // CUDA devices, but no NCCL built
#endif
  }
}

TEST(AllReduce, FailureOnOneRankAbortsTheOthers) {
  for (const AllReduceEntry& e : allreduce_algorithms()) {
    if (!e.runs_on.empty() || !(e.launchers & AllReduceEntry::kThreads)) continue;
    int k = 3;  // the first k >= 3 the algorithm accepts
    while (!allreduce_refusal(e, k, BackendKind::Cpu).empty()) ++k;
    const std::string algo = e.name;
    Shared sh(k);
    std::vector<std::unique_ptr<RecordingDevice>> devs;
    std::vector<Device*> raw;
    for (int r = 0; r < k; ++r) {
      devs.push_back(std::make_unique<RecordingDevice>(r, sh, false));
      raw.push_back(devs.back().get());
    }
    // Fail on rank 0's second reduce (naive reduces on rank 0 only, the others on every rank).
    devs[0]->fail_reduce_after = 1;
    CommGroup group(k, raw);
    auto ar = make_allreduce(algo, group);
    std::atomic<int> threw{0};
    on_ranks(k, [&](int r) {
      Buffer buf(*raw[r], 1000, MemCategory::Temporaries, "b");
      try {
        for (int i = 0; i < 3; ++i) ar->run(r, buf.get(), 1000);
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("injected comm_reduce failure"), std::string::npos)
            << e.what();
        ++threw;
      }
    });
    EXPECT_EQ(threw.load(), k) << algo;
  }
}

}  // namespace
}  // namespace dpb
