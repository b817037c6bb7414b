// test_hier_procs.cpp: two levels with one rank per process (issue 26): the MPI transport's
// sub-groups (Transport::split over MPI_Comm_split, collectives/mpi/mpi_transport.h) and hier over
// them, and node_layout (which real nodes form a two-level group).
//   NodeLayout.*: node_layout on equal, uneven and interleaved nodes (no MPI needed).
//   MpiHier.ExactUnderMpirun: under mpirun with DPB_NODES=N (tests/mpi_hier_test.sh: 2 x 2 and
//     3 x 2): the group's nodes, its node and cross-node groups (only the rank's own), hier's
//     all-reduce, reduce-scatter and all-gather exact on inputs with a known result (rank r holds
//     (r+1)*(i%7+1)) at n = 1, 7, 1000, 65539, on group memory (node groups on shared memory) and
//     plain memory, on the CPU and the async device (host staging), unpaced and paced by an
//     emulated link with a slower inter-node spec, with ring and mpi across the nodes; every
//     rank's bytes sent equal to the schedule's count (comm_volume.h). Skipped without mpirun.
//   ./dpb_tests --gtest_filter='NodeLayout*'
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
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

namespace dpb {
namespace {

TEST(NodeLayout, EqualNodesNumberedNodeByNode) {
  int nodes = 0;
  EXPECT_EQ(node_layout({7, 7, 3, 3}, nodes), "");
  EXPECT_EQ(nodes, 2);
  EXPECT_EQ(node_layout({0, 0, 0, 4, 4, 4}, nodes), "");
  EXPECT_EQ(nodes, 2);
  EXPECT_EQ(node_layout({0, 1, 2}, nodes), "");  // one rank per node
  EXPECT_EQ(nodes, 3);
  EXPECT_EQ(node_layout({5, 5, 5}, nodes), "");
  EXPECT_EQ(nodes, 1);
  EXPECT_EQ(node_layout({}, nodes), "");
  EXPECT_EQ(nodes, 1);
}

TEST(NodeLayout, UnevenOrInterleavedNodesRefused) {
  int nodes = 0;
  const std::string uneven = node_layout({0, 0, 0, 3, 3}, nodes);
  EXPECT_EQ(nodes, 1);
  EXPECT_NE(uneven.find("5 ranks are on 2 nodes holding 3, 2 ranks"), std::string::npos) << uneven;
  EXPECT_NE(uneven.find("--map-by"), std::string::npos) << uneven;
  const std::string interleaved = node_layout({0, 2, 0, 2}, nodes);  // round-robin placement
  EXPECT_EQ(nodes, 1);
  EXPECT_NE(interleaved.find("holding 2, 2 ranks"), std::string::npos) << interleaved;
}

float input(int r, size_t i) { return float((r + 1) * int(i % 7 + 1)); }

// Rank r's part of one check of hier's `op` on n floats at buf: wrong elements on this rank.
long check_hier(Collective op, AllReduce& coll, Device& dev, int r, int k, float* buf, size_t n) {
  std::vector<float> host(n);
  const size_t lo = chunk_begin(n, k, r), hi = lo + chunk_size(n, k, r);
  for (size_t i = 0; i < n; ++i)
    host[i] = op == Collective::AllGather && (i < lo || i >= hi) ? NAN : input(r, i);
  dev.upload(buf, host.data(), n);
  dev.comm_wait_compute();
  coll.run(r, buf, n);
  dev.compute_wait_comm();
  dev.download(host.data(), buf, n);
  const int tri = k * (k + 1) / 2;
  long wrong = 0;
  for (size_t i = 0; i < n; ++i) {
    float want = NAN;
    if (op == Collective::AllReduce) want = float(tri * int(i % 7 + 1));
    else if (op == Collective::ReduceScatter) want = i >= lo && i < hi ? float(tri * int(i % 7 + 1)) : NAN;
    else {
      int q = 0;
      while (!(i >= chunk_begin(n, k, q) && i < chunk_begin(n, k, q) + chunk_size(n, k, q))) ++q;
      want = input(q, i);
    }
    if (!std::isnan(want) && host[i] != want) ++wrong;
  }
  return wrong;
}

TEST(MpiHier, ExactUnderMpirun) {
  const LaunchEnv env = detect_launch_env();
  if (!env.processes) GTEST_SKIP() << "not started by mpirun (tests/mpi_hier_test.sh runs it)";
  if (!mpi_built()) GTEST_SKIP() << "dpbench built without MPI";
  MpiSession mpi;
  const int k = mpi.size(), r = mpi.rank();
  const int nodes = with_env_nodes({}).nodes, g = k / nodes;
  ASSERT_EQ(k % nodes, 0) << "DPB_NODES=" << nodes << " with " << k << " processes";
  LinkSpec slow;  // a fast link inside a node, a 10x slower one between nodes
  slow.gbps = 100;
  slow.node_gbps = 10;
  struct Case {
    BackendKind kind;
    LinkSpec link;
    std::string cross;
  };
  const Case cases[] = {{BackendKind::Cpu, {}, "ring"}, {BackendKind::Cpu, {}, "mpi"},
                        {BackendKind::Cpu, slow, "ring"}, {BackendKind::Async, {}, "ring"}};
  const char* shm = std::getenv("DPB_SHM");
  // DPB_SHM=1: every collective of a group on one node on shared memory: CPU, group memory only.
  const bool required = shm && std::string(shm) == "1";
  for (const Case& c : cases) {
    if (required && c.kind != BackendKind::Cpu) continue;
    const std::string what = std::string(backend_kind_name(c.kind)) + ", cross " + c.cross +
                             (c.link.enabled() ? ", paced" : "") + ", rank " + std::to_string(r);
    auto dev = c.kind == BackendKind::Async ? make_async_device(r, async_options_from_env())
                                            : make_cpu_device(r, 1);
    CommGroup group(make_mpi_transport(*dev, r, k, c.link));
    ASSERT_EQ(group.nodes(), nodes) << what;
    AllReduceOptions opts;
    opts.hier_cross = c.cross;
    std::unique_ptr<AllReduce> colls[3];
    const Collective ops[3] = {Collective::AllReduce, Collective::ReduceScatter,
                               Collective::AllGather};
    for (int i = 0; i < 3; ++i) colls[i] = make_collective(ops[i], "hier", group, opts);
    // The sub-groups: this rank's own, numbered as CommGroup says (allreduce.h).
    EXPECT_EQ(group.node_group(r).size(), g) << what;
    EXPECT_EQ(group.cross_group(r).size(), nodes) << what;
    EXPECT_TRUE(group.node_group(r).is_local(group.local_rank(r))) << what;
    EXPECT_TRUE(group.cross_group(r).is_local(group.node_of(r))) << what;
    EXPECT_THROW(group.node_group((r + 1) % k), Error) << what;  // another process's rank
    // Shared memory inside a node only (CPU processes, unless DPB_SHM=0); across nodes messages.
    const bool may_share = c.kind == BackendKind::Cpu && !(shm && std::string(shm) == "0");
    EXPECT_EQ(mpi_direct_path(group.node_group(r).transport()), may_share && g > 1) << what;
    EXPECT_EQ(mpi_direct_path(group.transport()), may_share && nodes == 1) << what;
    EXPECT_FALSE(mpi_direct_path(group.cross_group(r).transport())) << what;
    for (bool shared : {true, false})
      for (size_t n : {size_t(1), size_t(7), size_t(1000), size_t(65539)}) {
        if (required && !shared) continue;
        Buffer buf = shared ? group.alloc(r, n, MemCategory::Comm, "hier test buffer")
                            : Buffer(*dev, n, MemCategory::Temporaries, "hier test buffer");
        for (int i = 0; i < 3; ++i) {
          const uint64_t sent = group.sent_bytes(r);
          long wrong = check_hier(ops[i], *colls[i], *dev, r, k, buf.get(), n);
          std::vector<long> all(static_cast<size_t>(k));
          group.allgather_host(r, &wrong, all.data(), sizeof wrong);
          long total = 0;
          for (long w : all) total += w;
          EXPECT_EQ(total, 0) << collective_name(ops[i]) << " n=" << n << " " << what
                              << (shared ? ", group memory" : ", plain memory");
          // mpi across the nodes counts the ring's bytes (its nominal count), as ring does.
          EXPECT_EQ(group.sent_bytes(r) - sent,
                    schedule_sent_bytes(ops[i], "hier", n, k, r, c.kind, "", nodes))
              << collective_name(ops[i]) << " n=" << n << " " << what;
        }
      }
  }
}

}  // namespace
}  // namespace dpb
