// test_shard_collectives.cpp: reduce-scatter and all-gather (collectives/shard.h), every algorithm
// of their tables (collectives/registry.h), checked exactly on inputs whose result is known:
// rank r holds (r+1)*(i%7+1), so every partial sum is a small integer, exact in float in any order.
//   - reduce-scatter: rank r's shard (chunk r) holds (i%7+1)*k(k+1)/2;
//   - all-gather: rank r's shard holds (r+1)*(i%7+1) and the rest NaN; afterwards every rank's
//     element i is (owner+1)*(i%7+1), owner the rank whose shard holds i;
//   - reduce-scatter then all-gather (what ZeRO runs): every element the all-reduce's sum.
// Threads on the CPU and on the asynchronous test device (kernels/async: a missing stream wait
// reads NaN or stale data), k = 1..4 (rhd: powers of two), odd and tiny sizes (n < k included),
// the pipelined ring in small pieces, the emulated link (exact, and no faster than its model);
// the refusals; the ring all-reduce, now its halves, summing in its original order bit for bit.
// MpiShard.* runs under mpirun (tests/mpi_shard_test.sh: 2 and 3 processes, shared memory and
// messages, CPU and async devices; each call's bytes sent equal to the schedule's count,
// comm_volume.h) and is skipped otherwise.
//   ./dpb_tests --gtest_filter='ShardCollectives*'
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "collectives/comm_volume.h"
#include "collectives/mpi/mpi_transport.h"
#include "collectives/registry.h"
#include "collectives/shard.h"
#include "kernels/async/async_device.h"
#include "kernels/cpu/cpu_device.h"
#include "src/core/check.h"
#include "src/core/launcher.h"
#include "tests/cpu_ranks.h"
#include "tests/rank_threads.h"

namespace dpb {
namespace {

std::unique_ptr<Device> make_test_device(BackendKind kind, int rank) {
  return kind == BackendKind::Async ? make_async_device(rank, async_options_from_env())
                                    : make_cpu_device(rank, 1);
}

// k ranks of `kind` (cpu_ranks.h) and their group.
struct Ranks : CpuRanks {
  Ranks(BackendKind kind, int k, const LinkSpec& link = {})
      : CpuRanks(k, link, [kind](int r) { return make_test_device(kind, r); }) {}
};

const char* op_label(Collective c) { return c == Collective::AllReduce ? "rs+ag" : collective_name(c); }

// One rank's part of a check: fills buf (n floats on rank r's device), runs `op` (reduce-scatter,
// all-gather, or AllReduce meaning reduce-scatter then all-gather), checks every element it
// defines. rs / ag: the objects (only the ones op uses). Stream-ordered as a trainer does it.
void check_rank(Collective op, AllReduce* rs, AllReduce* ag, Device& dev, int r, int k, float* buf,
                size_t n, const std::string& what) {
  std::vector<float> host(n);
  const size_t lo = shard_begin(n, k, r), hi = lo + shard_size(n, k, r);
  for (size_t i = 0; i < n; ++i) {
    const bool mine = i >= lo && i < hi;
    host[i] = op == Collective::AllGather && !mine ? NAN : float((r + 1) * int(i % 7 + 1));
  }
  dev.upload(buf, host.data(), n);
  dev.comm_wait_compute();  // the caller orders the buffer's producers before run()
  if (op != Collective::AllGather) rs->run(r, buf, n);
  if (op != Collective::ReduceScatter) ag->run(r, buf, n);
  dev.compute_wait_comm();  // ... and its consumers after it
  dev.download(host.data(), buf, n);
  const int tri = k * (k + 1) / 2;
  size_t wrong = 0, first = n;
  float want_first = 0;
  for (size_t i = 0; i < n; ++i) {
    if (op == Collective::ReduceScatter && (i < lo || i >= hi)) continue;  // scratch
    int owner = 0;
    while (owner + 1 < k && i >= shard_begin(n, k, owner + 1)) ++owner;
    const float want = float(int(i % 7 + 1) * (op == Collective::AllGather ? owner + 1 : tri));
    if (host[i] != want) {
      if (first == n) first = i, want_first = want;
      ++wrong;
    }
  }
  EXPECT_EQ(wrong, 0u) << what << " " << op_label(op) << " k=" << k << " n=" << n << " rank " << r
                       << ": first wrong element " << first << " = "
                       << (first < n ? host[first] : 0.f) << ", want " << want_first;
}

// Every rank of a threads group runs the check (one fresh buffer per rank).
void check_threads(Collective op, AllReduce* rs, AllReduce* ag, CommGroup& group, size_t n,
                   const std::string& what) {
  const int k = group.size();
  on_ranks(k, [&](int r) {
    Device& dev = group.device(r);
    Buffer buf(dev, n, MemCategory::Temporaries, "shard test buffer");
    check_rank(op, rs, ag, dev, r, k, buf.get(), n, what);
  });
}

std::vector<size_t> odd_sizes(int k, bool large) {
  std::vector<size_t> s = {1, 2, 3, size_t(k - 1), size_t(k), size_t(k + 1), 5, 1001, 4099};
  if (large) s.push_back(129001);
  return s;
}

// Every algorithm that runs with threads on `kind` (and its rank-count refusals), k = 1..4.
void check_every_algorithm(BackendKind kind) {
  for (int k = 1; k <= 4; ++k) {
    Ranks ranks(kind, k);
    for (const AllReduceEntry& e : reducescatter_algorithms()) {
      const AllReduceEntry& g = find_collective(Collective::AllGather, e.name);
      const std::string why = allreduce_refusal(e, k, kind);
      if (!why.empty()) {
        if (e.name == "rhd")
          EXPECT_NE(why.find("power-of-two rank count, got k = " + std::to_string(k)),
                    std::string::npos) << why;
        EXPECT_EQ(why.empty(), allreduce_refusal(g, k, kind).empty()) << e.name;
        continue;
      }
      auto rs = make_reducescatter(e.name, ranks.group);
      auto ag = make_allgather(e.name, ranks.group);
      EXPECT_EQ(rs->name(), e.name);
      EXPECT_EQ(ag->name(), e.name);
      // One group and one object per collective for all sizes: repeated calls, sizes changing.
      for (size_t n : odd_sizes(k, kind == BackendKind::Cpu))
        for (Collective op : {Collective::ReduceScatter, Collective::AllGather, Collective::AllReduce})
          check_threads(op, rs.get(), ag.get(), ranks.group, n,
                        e.name + " on " + backend_kind_name(kind));
    }
  }
}

TEST(ShardCollectives, ExactEveryAlgorithmCpuThreads) { check_every_algorithm(BackendKind::Cpu); }

TEST(ShardCollectives, ExactEveryAlgorithmAsyncDevice) {
  SCOPED_TRACE("replay with DPB_ASYNC_SEED=" + std::to_string(async_options_from_env().seed));
  check_every_algorithm(BackendKind::Async);
}

TEST(ShardCollectives, PipelinedRingExact) {
  // Pieces of one float, chunks shorter than the piece count; then the CPU default's own pieces
  // (k * n * 4 bytes above 8 MB).
  for (int k : {2, 3, 4}) {
    Ranks ranks(BackendKind::Cpu, k);
    for (size_t piece : {size_t(1), size_t(3), size_t(97)}) {
      auto rs = make_ring_collective(ranks.group, Collective::ReduceScatter, piece);
      auto ag = make_ring_collective(ranks.group, Collective::AllGather, piece);
      for (size_t n : {size_t(1), size_t(k + 1), size_t(1000), size_t(10007)}) {
        if (piece == 1 && n > 1000) continue;  // a barrier per float: seconds, nothing new
        for (Collective op : {Collective::ReduceScatter, Collective::AllGather, Collective::AllReduce})
          check_threads(op, rs.get(), ag.get(), ranks.group, n, "ring, pieces of " + std::to_string(piece));
      }
    }
  }
  Ranks ranks(BackendKind::Cpu, 3);
  auto rs = make_reducescatter("ring", ranks.group), ag = make_allgather("ring", ranks.group);
  for (Collective op : {Collective::ReduceScatter, Collective::AllGather})
    check_threads(op, rs.get(), ag.get(), ranks.group, 3000001, "ring, CPU pipeline");
}

// The ring all-reduce runs its halves' steps in one pipeline, in the chunk order it always had:
// chunk c is summed starting at rank c, then c+1, ... (acc = buf[c+1] + buf[c], then buf[c+2] +
// acc, ...). On random floats (inexact sums) its result is bit for bit that order's, k = 3, 4
// (k = 2 sums two numbers: any order gives the same bits), plain and pipelined.
TEST(ShardCollectives, RingAllReduceSumsInItsOriginalOrder) {
  for (int k : {3, 4}) {
    Ranks ranks(BackendKind::Cpu, k);
    const size_t n = 10007;
    std::vector<std::vector<float>> in(static_cast<size_t>(k), std::vector<float>(n));
    std::mt19937 rng(42 + k);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    for (auto& v : in)
      for (float& x : v) x = u(rng);
    std::vector<float> want(n);
    for (int c = 0; c < k; ++c)
      for (size_t i = chunk_begin(n, k, c); i < chunk_begin(n, k, c) + chunk_size(n, k, c); ++i) {
        float acc = in[size_t(c)][i];
        for (int s = 1; s < k; ++s) acc = in[size_t((c + s) % k)][i] + acc;
        want[i] = acc;
      }
    for (size_t piece : {size_t(0), size_t(97)}) {
      auto ar = make_ring_allreduce(ranks.group, piece);
      on_ranks(k, [&](int r) {
        Device& dev = ranks.group.device(r);
        Buffer buf(dev, n, MemCategory::Temporaries, "ring order buffer");
        dev.upload(buf.get(), in[size_t(r)].data(), n);
        ar->run(r, buf.get(), n);
        std::vector<float> got(n);
        dev.download(got.data(), buf.get(), n);
        size_t diff = 0;
        for (size_t i = 0; i < n; ++i) diff += got[i] != want[i];
        EXPECT_EQ(diff, 0u) << "k=" << k << " piece=" << piece << " rank " << r;
      });
    }
  }
}

// On an emulated link the halves are exact and take no less than their alpha-beta model.
TEST(ShardCollectives, EmulatedLinkExactAndPaced) {
  const LinkSpec link{10.0, 20.0};  // 10 Gb/s, 20 us
  const size_t n = 100003;          // 400 KB
  for (int k : {2, 3}) {
    Ranks ranks(BackendKind::Cpu, k, link);
    ASSERT_TRUE(ranks.group.paced());
    for (Collective c : {Collective::ReduceScatter, Collective::AllGather})
      for (const AllReduceEntry& e : collective_algorithms(c)) {
        if (!allreduce_refusal(e, k, BackendKind::Cpu).empty()) continue;
        ASSERT_TRUE(e.link_paced && e.link_cost) << e.name;
        auto coll = make_collective(c, e.name, ranks.group);
        check_threads(c, coll.get(), coll.get(), ranks.group, n, e.name + " on a link");
        const double model = e.link_cost(LinkCostQuery{double(n * sizeof(float)), k, link});
        std::vector<float> zeros(n, 0.f);
        on_ranks(k, [&](int r) {
          Device& dev = ranks.group.device(r);
          Buffer buf(dev, n, MemCategory::Temporaries, "link buffer");
          ranks.group.barrier(r);
          const auto t0 = std::chrono::steady_clock::now();
          coll->run(r, buf.get(), n);
          const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          if (r == 0)
            EXPECT_GE(s, 0.9 * model) << collective_name(c) << " " << e.name << " k=" << k;
        });
      }
  }
}

TEST(ShardCollectives, TablesAndRefusals) {
  for (Collective c : {Collective::ReduceScatter, Collective::AllGather}) {
    std::vector<std::string> names;
    for (const AllReduceEntry& e : collective_algorithms(c)) {
      names.push_back(e.name);
      EXPECT_EQ(e.op, c) << e.name;
    }
    EXPECT_EQ(names, (std::vector<std::string>{"naive", "ring", "direct", "rhd", "hier", "nccl", "mpi"}));
    EXPECT_EQ(collective_bus_factor(c, 4), 0.75);
    try {
      find_collective(c, "carrier-pigeon");
      ADD_FAILURE() << "unknown algorithm accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string(collective_name(c)) +
                                           ": unknown algorithm 'carrier-pigeon' (valid: naive, ring"),
                std::string::npos) << e.what();
    }
    Ranks three(BackendKind::Cpu, 3);
    auto expect_refused = [&](const std::string& alg, const std::string& text) {
      try {
        make_collective(c, alg, three.group);
        ADD_FAILURE() << alg << " accepted";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
      }
    };
    const std::string name = collective_name(c);
    expect_refused("rhd", name + " rhd (recursive " +
                              (c == Collective::ReduceScatter ? "halving" : "doubling") +
                              ") needs a power-of-two rank count, got k = 3");
    expect_refused("mpi", name + " mpi runs only with one process per rank");
    expect_refused("nccl", name + " nccl needs --backend cuda");
  }
  EXPECT_EQ(collective_bus_factor(Collective::AllReduce, 4), 1.5);
  EXPECT_STREQ(collective_family(Collective::ReduceScatter), "reducescatter");
  EXPECT_STREQ(collective_family(Collective::AllGather), "allgather");
}

// Under mpirun (tests/mpi_shard_test.sh): one rank per process, every algorithm that runs across
// processes (mpi: MPI_Reduce_scatter_block / MPI_Allgather and their uneven forms), on buffers
// from the group (the shared-memory path on one node) and plain ones (messages), on the CPU and
// on the async device (the host staging path CUDA takes). One test: one MpiSession per process.
TEST(MpiShard, ExactUnderMpirun) {
  const LaunchEnv env = detect_launch_env();
  if (!env.processes) GTEST_SKIP() << "not started by mpirun (tests/mpi_shard_test.sh runs it)";
  if (!mpi_built()) GTEST_SKIP() << "dpbench built without MPI";
  MpiSession mpi;
  const int k = mpi.size(), r = mpi.rank();
  for (BackendKind kind : {BackendKind::Cpu, BackendKind::Async}) {
    auto dev = make_test_device(kind, r);
    CommGroup group(make_mpi_transport(*dev, r, k));
    for (const AllReduceEntry& e : reducescatter_algorithms()) {
      if (!allreduce_refusal(e, k, kind, Launcher::Mpi).empty()) continue;
      auto rs = make_reducescatter(e.name, group);
      auto ag = make_allgather(e.name, group);
      for (bool shared : {true, false})
        for (size_t n : odd_sizes(k, true)) {
          Buffer buf = shared ? group.alloc(r, n, MemCategory::Comm, "shard test buffer")
                              : Buffer(*dev, n, MemCategory::Temporaries, "shard test buffer");
          for (Collective op : {Collective::ReduceScatter, Collective::AllGather, Collective::AllReduce}) {
            const uint64_t sent = group.sent_bytes(r);
            check_rank(op, rs.get(), ag.get(), *dev, r, k, buf.get(), n,
                       e.name + " on " + backend_kind_name(kind) + (shared ? ", group memory" : ", plain memory"));
            // Bytes sent (comm_volume.h): measured on the steps (mpi: its nominal count_sent).
            auto want = [&](Collective c) { return schedule_sent_bytes(c, e.name, n, k, r); };
            EXPECT_EQ(group.sent_bytes(r) - sent,
                      op == Collective::AllReduce ? want(Collective::ReduceScatter) + want(Collective::AllGather) : want(op))
                << e.name << " " << op_label(op) << " k=" << k << " n=" << n << " rank " << r;
          }
        }
    }
  }
}

}  // namespace
}  // namespace dpb
