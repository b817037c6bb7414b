// test_comm_bytes.cpp: bytes sent per rank (issue 22, comm_bytes): every algorithm of the
// all-reduce, reduce-scatter and all-gather tables that runs with threads on the CPU backend
// (naive, ring, direct, rhd where k is a power of two, auto) makes one call on every rank, and
// the group's measured count (CommGroup::sent_bytes, allreduce.h) must rise by exactly the
// schedule's count (schedule_sent_bytes, collectives/comm_volume.h) on each rank; k = 2, 3, 4,
// n = 1, 7, 1000, 65539. Plus the counts' closed forms against nccl-tests' volumes, count_sent,
// and the refusals. Process mode: MpiShard.ExactUnderMpirun (tests/test_shard_collectives.cpp,
// ctest mpi_shard) checks the same equality over the MPI transport, mpi's nominal count included.
//   ./dpb_tests --gtest_filter='CommBytes.*'
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "collectives/comm_volume.h"
#include "collectives/registry.h"
#include "src/core/check.h"
#include "tests/cpu_ranks.h"
#include "tests/rank_threads.h"

namespace dpb {
namespace {

const size_t kSizes[] = {1, 7, 1000, (size_t(1) << 16) + 3};

// One call of `alg` on every rank of `group`; rank r's measured bytes must equal the schedule's.
void check_call(CommGroup& group, Collective c, const std::string& name, AllReduce& alg, size_t n) {
  const int k = group.size();
  std::vector<uint64_t> before(static_cast<size_t>(k)), after(static_cast<size_t>(k));
  on_ranks(k, [&](int r) {
    Device& dev = group.device(r);
    Buffer buf(dev, n, MemCategory::Temporaries, "comm bytes test buffer");
    std::vector<float> host(n, float(r + 1));
    dev.upload(buf.get(), host.data(), n);
    dev.comm_wait_compute();
    before[size_t(r)] = group.sent_bytes(r);
    alg.run(r, buf.get(), n);
    dev.compute_wait_comm();
    after[size_t(r)] = group.sent_bytes(r);
  });
  for (int r = 0; r < k; ++r)
    EXPECT_EQ(after[size_t(r)] - before[size_t(r)], schedule_sent_bytes(c, name, n, k, r))
        << collective_name(c) << " " << name << " k=" << k << " n=" << n << " rank " << r;
}

TEST(CommBytes, MeasuredEqualsScheduleEveryAlgorithmCpuThreads) {
  int checked = 0;
  for (int k = 2; k <= 4; ++k) {
    CpuRanks ranks(k);
    CommGroup& group = ranks.group;
    for (Collective c : kCollectives)
      for (const AllReduceEntry& e : collective_algorithms(c)) {
        if (!allreduce_refusal(e, k, BackendKind::Cpu, Launcher::Threads).empty()) continue;
        ASSERT_TRUE(e.sent_bytes) << collective_name(c) << " " << e.name << " has no count";
        auto alg = make_collective(c, e.name, group);
        for (size_t n : kSizes) check_call(group, c, e.name, *alg, n);
        ++checked;
      }
  }
  // naive, ring, direct, auto x 3 k + rhd at k = 2, 4, and the halves' naive, ring, direct x 3 k
  // + rhd x 2 k, twice; hier (one node here) in each of the three tables x 3 k.
  EXPECT_EQ(checked, 4 * 3 + 2 + 2 * (3 * 3 + 2) + 3 * 3);
}

// The pipelined ring (pieces of one float, and more pieces than a chunk has floats) sends the
// same bytes as the plain one: pipelining cuts chunks, it does not add to them.
TEST(CommBytes, PipelinedRingSendsTheSame) {
  const int k = 3;
  CpuRanks ranks(k);
  CommGroup& group = ranks.group;
  for (Collective c : kCollectives) {
    auto ring = make_ring_collective(group, c, /*piece_floats=*/1);
    for (size_t n : {size_t(7), size_t(1000)}) check_call(group, c, "ring", *ring, n);
  }
}

// The counts against nccl-tests' volumes where k divides n: all-reduce 2(k-1)/k n, reduce-scatter
// and all-gather (k-1)/k n per rank (ring, direct, rhd, nccl, mpi); naive's rank 0 carries it all.
TEST(CommBytes, ScheduleCountsMatchTheTextbookVolumes) {
  const size_t n = 1 << 12;
  for (int k : {2, 4}) {
    const uint64_t half = uint64_t(n) * 4 * (k - 1) / k;
    for (const char* alg : {"ring", "direct", "rhd", "nccl", "mpi"})
      for (int r = 0; r < k; ++r) {
        EXPECT_EQ(schedule_sent_bytes(Collective::AllReduce, alg, n, k, r), 2 * half) << alg;
        EXPECT_EQ(schedule_sent_bytes(Collective::ReduceScatter, alg, n, k, r), half) << alg;
        EXPECT_EQ(schedule_sent_bytes(Collective::AllGather, alg, n, k, r), half) << alg;
      }
    EXPECT_EQ(schedule_sent_bytes(Collective::AllReduce, "naive", n, k, 0), uint64_t(k - 1) * n * 4);
    EXPECT_EQ(schedule_sent_bytes(Collective::AllReduce, "naive", n, k, 1), uint64_t(n) * 4);
  }
  // Uneven chunks: n = 7 over k = 3 splits 3, 2, 2; the ring's reduce-scatter sends all but its own.
  EXPECT_EQ(schedule_sent_bytes(Collective::ReduceScatter, "ring", 7, 3, 0), 4u * 4);
  EXPECT_EQ(schedule_sent_bytes(Collective::ReduceScatter, "ring", 7, 3, 1), 5u * 4);
  // k = 1 and n = 0 send nothing.
  for (Collective c : kCollectives)
    for (const char* alg : {"naive", "ring", "direct", "rhd", "nccl", "mpi"}) {
      EXPECT_EQ(schedule_sent_bytes(c, alg, 1000, 1, 0), 0u) << alg;
      EXPECT_EQ(schedule_sent_bytes(c, alg, 0, 4, 3), 0u) << alg;
    }
}

TEST(CommBytes, CountSentAddsAndRefusals) {
  CpuRanks ranks(2);
  CommGroup& group = ranks.group;
  EXPECT_EQ(group.sent_bytes(0), 0u);
  group.count_sent(1, 40);
  group.count_sent(1, 2);
  EXPECT_EQ(group.sent_bytes(0), 0u);
  EXPECT_EQ(group.sent_bytes(1), 42u);
  // Host control traffic is not counted.
  on_ranks(2, [&](int r) {
    int v = r;
    group.broadcast_host(r, &v, sizeof v, 0);
  });
  EXPECT_EQ(group.sent_bytes(0), 0u);
  EXPECT_THROW(schedule_sent_bytes(Collective::AllGather, "bogus", 8, 2, 0), Error);
  EXPECT_THROW(schedule_sent_bytes(Collective::AllReduce, "ring", 8, 2, 2), Error);
}

}  // namespace
}  // namespace dpb
