// test_hier.cpp: two levels (issue 26 items 1-3): CommGroup's node and cross-node groups (views of
// one transport, collectives/group_view.cpp) and the hier all-reduce, reduce-scatter and
// all-gather (collectives/hier.cpp), checked exactly on inputs whose result is known (rank r holds
// (r+1)*(i%7+1): every partial sum is a small integer, exact in float in any order) at k = 4 as
// 2 x 2, k = 6 as 3 x 2 and 2 x 3 (nodes x ranks per node), n = 1, 7, 1000, 65539; each rank's
// bytes sent equal to the schedule's count (comm_volume.h); every flat algorithm inside either
// group and across the nodes; an abort waking ranks blocked in a sub-group; the emulated link's
// inter-node spec (link.h). Threads on the CPU and on the asynchronous test device.
//   ./dpb_tests --gtest_filter='TwoLevel*:Hier*'
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "collectives/comm_volume.h"
#include "collectives/registry.h"
#include "collectives/shard.h"
#include "kernels/async/async_device.h"
#include "kernels/cpu/cpu_device.h"
#include "src/core/check.h"
#include "tests/links.h"
#include "tests/rank_threads.h"

namespace dpb {
namespace {

struct Ranks {
  std::vector<std::unique_ptr<Device>> devs;
  std::unique_ptr<CommGroup> group;
  Ranks(int k, int nodes, BackendKind kind = BackendKind::Cpu, LinkSpec link = {}) {
    std::vector<Device*> raw;
    for (int r = 0; r < k; ++r)
      devs.push_back(kind == BackendKind::Async ? make_async_device(r, async_options_from_env())
                                                : make_cpu_device(r, 1));
    for (auto& d : devs) raw.push_back(d.get());
    link.nodes = nodes;
    group = std::make_unique<CommGroup>(k, raw, link);
  }
};

float input(int r, size_t i) { return float((r + 1) * int(i % 7 + 1)); }

// (nodes, ranks per node) splits the tests run.
const std::pair<int, int> kSplits[] = {{2, 2}, {3, 2}, {2, 3}};
const size_t kSizes[] = {1, 7, 1000, 65539};

TEST(TwoLevel, NodesAndLocalRanks) {
  Ranks rs(6, 2);
  CommGroup& g = *rs.group;
  EXPECT_EQ(g.nodes(), 2);
  EXPECT_EQ(g.ranks_per_node(), 3);
  EXPECT_EQ(g.node_of(4), 1);
  EXPECT_EQ(g.local_rank(4), 1);
  EXPECT_EQ(g.node_group(4).size(), 3);
  EXPECT_EQ(g.cross_group(4).size(), 2);
  EXPECT_EQ(&g.node_group(3), &g.node_group(5));
  EXPECT_EQ(&g.cross_group(1), &g.cross_group(4));
  EXPECT_EQ(&g.cross_group(4).device(1), &g.device(4));  // member j: node j's rank
  Ranks flat(3, 1);
  EXPECT_EQ(flat.group->nodes(), 1);
  EXPECT_EQ(flat.group->node_group(2).size(), 3);
  EXPECT_EQ(flat.group->cross_group(2).size(), 1);
  try {
    Ranks bad(4, 3);
    FAIL() << "4 ranks in 3 nodes accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--nodes"), std::string::npos) << e.what();
  }
}

// Every flat algorithm runs inside a node group and inside a cross-node group (one sub-group per
// node, or per local rank, at once): after the node all-reduce a rank holds its node's sum, after
// the cross one the total; the parent group counts the sub-groups' sends.
TEST(TwoLevel, FlatAlgorithmsInsideEitherGroup) {
  for (const auto& [nodes, g] : kSplits) {
    const int k = nodes * g;
    for (const AllReduceEntry& e : allreduce_algorithms()) {
      if (!e.runs_with(Launcher::Threads) || !allreduce_refusal(e, 2, BackendKind::Cpu).empty() ||
          e.name == "hier")
        continue;
      const bool node_ok = allreduce_refusal(e, g, BackendKind::Cpu).empty();
      const bool cross_ok = allreduce_refusal(e, nodes, BackendKind::Cpu).empty();
      if (!node_ok || !cross_ok) continue;  // rhd: powers of two only
      Ranks rs(k, nodes);
      CommGroup& group = *rs.group;
      const size_t n = 1000;
      std::vector<std::unique_ptr<AllReduce>> in_node, across;
      for (int j = 0; j < nodes; ++j) in_node.push_back(make_allreduce(e.name, group.node_group(j * g)));
      for (int l = 0; l < g; ++l) across.push_back(make_allreduce(e.name, group.cross_group(l)));
      std::vector<std::vector<float>> node_sum(static_cast<size_t>(k)), total(static_cast<size_t>(k));
      on_ranks(k, [&](int r) {
        Device& dev = group.device(r);
        Buffer buf(dev, n, MemCategory::Comm, "test");
        std::vector<float> h(n);
        for (size_t i = 0; i < n; ++i) h[i] = input(r, i);
        dev.upload(buf.get(), h.data(), n);
        dev.comm_wait_compute();
        in_node[size_t(group.node_of(r))]->run(group.local_rank(r), buf.get(), n);
        dev.compute_wait_comm();
        node_sum[size_t(r)].resize(n);
        dev.download(node_sum[size_t(r)].data(), buf.get(), n);
        dev.comm_wait_compute();
        across[size_t(group.local_rank(r))]->run(group.node_of(r), buf.get(), n);
        dev.compute_wait_comm();
        total[size_t(r)].resize(n);
        dev.download(total[size_t(r)].data(), buf.get(), n);
      });
      for (int r = 0; r < k; ++r) {
        const int j = group.node_of(r);
        int node_mult = 0;
        for (int q = j * g; q < j * g + g; ++q) node_mult += q + 1;
        size_t wrong = 0;
        for (size_t i = 0; i < n; ++i) {
          wrong += node_sum[size_t(r)][i] != float(node_mult * int(i % 7 + 1));
          wrong += total[size_t(r)][i] != float(k * (k + 1) / 2 * int(i % 7 + 1));
        }
        EXPECT_EQ(wrong, 0u) << e.name << " " << nodes << " x " << g << " rank " << r;
        const uint64_t want =
            schedule_sent_bytes(Collective::AllReduce, e.name, n, g, group.local_rank(r)) +
            schedule_sent_bytes(Collective::AllReduce, e.name, n, nodes, j);
        EXPECT_EQ(group.sent_bytes(r), want) << e.name << " rank " << r;
      }
    }
  }
}

// One rank's hier call of `op` on n floats, checked exactly (reduce-scatter: its shard only).
size_t hier_wrong(Collective op, CommGroup& group, AllReduce& coll, int r, size_t n) {
  const int k = group.size();
  Device& dev = group.device(r);
  Buffer buf(dev, n, MemCategory::Comm, "test");
  std::vector<float> h(n);
  const size_t lo = shard_begin(n, k, r), hi = lo + shard_size(n, k, r);
  for (size_t i = 0; i < n; ++i)
    h[i] = op == Collective::AllGather && (i < lo || i >= hi) ? NAN : input(r, i);
  dev.upload(buf.get(), h.data(), n);
  dev.comm_wait_compute();
  coll.reserve(r, n);
  coll.run(r, buf.get(), n);
  dev.compute_wait_comm();
  dev.download(h.data(), buf.get(), n);
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) {
    if (op == Collective::ReduceScatter && (i < lo || i >= hi)) continue;  // scratch
    int owner = 0;
    while (owner + 1 < k && i >= shard_begin(n, k, owner + 1)) ++owner;
    const int mult = op == Collective::AllGather ? owner + 1 : k * (k + 1) / 2;
    wrong += h[i] != float(mult * int(i % 7 + 1));
  }
  return wrong;
}

void check_hier(Collective op, int nodes, int g, size_t n, BackendKind kind,
                const AllReduceOptions& opts = {}, LinkSpec link = {}) {
  const int k = nodes * g;
  Ranks rs(k, nodes, kind, link);
  auto coll = make_collective(op, "hier", *rs.group, opts);
  std::vector<size_t> wrong(static_cast<size_t>(k));
  on_ranks(k, [&](int r) { wrong[size_t(r)] = hier_wrong(op, *rs.group, *coll, r, n); });
  for (int r = 0; r < k; ++r) {
    EXPECT_EQ(wrong[size_t(r)], 0u) << collective_name(op) << " " << nodes << " x " << g
                                    << " n " << n << " rank " << r << " cross " << opts.hier_cross;
    if (opts.hier_cross == "ring" && opts.hier_intra == "ring")
      EXPECT_EQ(rs.group->sent_bytes(r),
                schedule_sent_bytes(op, "hier", n, k, r, BackendKind::Cpu, "", nodes))
          << collective_name(op) << " " << nodes << " x " << g << " n " << n << " rank " << r;
  }
}

TEST(Hier, ExactEverySplitAndSize) {
  for (Collective op : kCollectives)
    for (const auto& [nodes, g] : kSplits)
      for (size_t n : kSizes) check_hier(op, nodes, g, n, BackendKind::Cpu);
}

// The asynchronous device runs the comm stream on a worker: a missing stream wait reads NaN or
// stale data (kernels/async).
TEST(Hier, ExactOnStreams) {
  for (Collective op : kCollectives) {
    check_hier(op, 2, 2, 1000, BackendKind::Async);
    check_hier(op, 3, 2, 7, BackendKind::Async);
  }
}

TEST(Hier, EveryFlatAlgorithmAcrossAndInside) {
  for (Collective op : kCollectives)
    for (const AllReduceEntry& e : collective_algorithms(op)) {
      if (e.name == "hier" || !e.runs_with(Launcher::Threads) ||
          !allreduce_refusal(e, 2, BackendKind::Cpu).empty())
        continue;
      AllReduceOptions o;
      o.hier_cross = e.name;
      check_hier(op, 2, 2, 1000, BackendKind::Cpu, o);
      if (op == Collective::AllReduce) continue;  // inside a node: reduce-scatter, all-gather
      o.hier_cross = "ring";
      o.hier_intra = e.name;
      check_hier(op, 2, 2, 1001, BackendKind::Cpu, o);
    }
}

// One node (no --nodes): hier is a reduce-scatter and an all-gather over the whole group.
TEST(Hier, OneNodeAndOneRankPerNode) {
  for (Collective op : kCollectives) {
    check_hier(op, 1, 3, 1000, BackendKind::Cpu);
    check_hier(op, 3, 1, 1000, BackendKind::Cpu);
  }
}

// A rank failing outside the collective aborts the group: ranks blocked at a node group's or a
// cross-node group's barrier wake up and throw the reason.
TEST(Hier, AbortWakesRanksInSubGroups) {
  Ranks rs(4, 2);
  auto ar = make_allreduce("hier", *rs.group);
  std::vector<std::string> why(4);
  on_ranks(4, [&](int r) {
    Buffer buf(rs.group->device(r), 100, MemCategory::Comm, "test");
    if (r == 3) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      rs.group->abort(3, "rank 3 failed on purpose");
      return;
    }
    try {
      ar->run(r, buf.get(), 100);
    } catch (const Error& e) {
      why[size_t(r)] = e.what();
    }
  });
  for (int r = 0; r < 3; ++r)
    EXPECT_NE(why[size_t(r)].find("failed on purpose"), std::string::npos) << r << ": " << why[size_t(r)];
}

TEST(Hier, RefusalsAndTables) {
  for (Collective op : kCollectives) {
    const AllReduceEntry& e = find_collective(op, "hier");
    EXPECT_TRUE(e.link_paced);
    EXPECT_TRUE(e.runs_with(Launcher::Threads));
    EXPECT_TRUE(e.runs_with(Launcher::Mpi));  // processes too (test_hier_procs.cpp)
    EXPECT_EQ(allreduce_refusal(e, 4, BackendKind::Cpu, Launcher::Mpi), "");
  }
  Ranks rs(4, 2);
  AllReduceOptions o;
  o.hier_cross = "bogus";
  EXPECT_THROW(make_allreduce("hier", *rs.group, o), Error);
}

// The emulated link's inter-node spec: a transfer between nodes runs at node_gbps with
// node_latency_us, inside a node at gbps and latency_us; a rank's slow-link override still wins.
TEST(Hier, LinkBetweenNodes) {
  LinkSpec l = two_level_link(2, 8, 10, 0.8, 100);
  EXPECT_FALSE(l.crosses(0, 1, 4));
  EXPECT_TRUE(l.crosses(1, 2, 4));
  EXPECT_DOUBLE_EQ(l.busy_s(0, 1, 1e9, 4), 1.0);
  EXPECT_DOUBLE_EQ(l.busy_s(1, 2, 1e9, 4), 10.0);
  EXPECT_DOUBLE_EQ(l.latency_s(0, 1, 4), 10e-6);
  EXPECT_DOUBLE_EQ(l.latency_s(0, 3, 4), 100e-6);
  l.rank_gbps = {{3, 0.08}};
  EXPECT_DOUBLE_EQ(l.busy_s(0, 3, 1e9, 4), 100.0);
  EXPECT_NE(l.label().find("2 nodes, 0.8 Gb/s, 100 us between"), std::string::npos) << l.label();
  LinkSpec bad = l;
  bad.node_gbps = -1;
  EXPECT_THROW(validate_link(bad, "--link-gbps", "--link-latency-us"), Error);
  bad = l;
  bad.nodes = 0;
  EXPECT_THROW(validate_link(bad, "--link-gbps", "--link-latency-us"), Error);
  // Paced, hier stays exact; a 2 x 2 all-reduce takes at least its model's time.
  const LinkSpec paced = two_level_link(2, 10, 50, 1, 500);
  const size_t n = 65539;
  Ranks rs(4, 2, BackendKind::Cpu, paced);
  ASSERT_TRUE(rs.group->paced());
  auto ar = make_allreduce("hier", *rs.group);
  std::vector<size_t> wrong(4);
  const auto t0 = std::chrono::steady_clock::now();
  on_ranks(4, [&](int r) { wrong[size_t(r)] = hier_wrong(Collective::AllReduce, *rs.group, *ar, r, n); });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int r = 0; r < 4; ++r) EXPECT_EQ(wrong[size_t(r)], 0u) << r;
  const double model = allreduce_link_cost("hier", double(n) * 4, 4, paced);
  EXPECT_GE(s, 0.9 * model) << "model " << model;
}

}  // namespace
}  // namespace dpb
