// hier.cpp: the hierarchical all-reduce, reduce-scatter and all-gather (issue 26), written once
// over the group's two levels (CommGroup::node_group, cross_group: split from the same transport),
// each level running a flat algorithm of the tables (AllReduceOptions::hier_intra inside a node,
// hier_cross across nodes; ring by default). Rank r = j g + l is local rank l of node j (g ranks
// per node, N nodes, k = N g). As NCCL, Horovod and the MPI libraries do, only 1/g of the data
// crosses the network:
//   all-reduce: the node's reduce-scatter of the whole buffer (local rank l holds the node's sum
//     of chunk l of g), the cross-node all-reduce of that chunk among the ranks with local rank l,
//     the node's all-gather.
//   reduce-scatter (rank r's shard: chunk r of k, shard.h): node j's ranks own chunks j g..j g+g-1,
//     a contiguous region whose split into g is exactly those chunks (sizes differ by at most one,
//     the bigger first), so per node region R_j one node reduce-scatter leaves local rank l the
//     node's sum of chunk j g + l; the N chunks {j g + l} are copied into a scratch buffer in node
//     order (again an exact split into N), reduced-scattered across the nodes, and the rank's own
//     chunk copied back.
//   all-gather: the reverse: own chunk into scratch, the cross-node all-gather, the chunks back to
//     their places, then per node region the node's all-gather.
// Exact on every split (tests/test_hier.cpp: 2 x 2, 3 x 2, 2 x 3, n = 1, 7, 1000, 65539); its bytes
// sent (hier_sent_bytes) are its inner collectives' counts, its link cost theirs on the intra-
// and inter-node links (link.h). Ranks as threads (the sub-groups: views of the threads transport)
// or as processes (MPI sub-communicators: shared memory inside a node, messages across; emulated
// nodes under mpirun with DPB_NODES): each process makes the inner collectives of the sub-groups
// that hold its ranks only (tests/mpi_hier_test.sh).
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "collectives/comm_volume.h"
#include "collectives/link.h"
#include "collectives/registry.h"
#include "collectives/shard.h"
#include "src/core/check.h"

namespace dpb {
namespace {

// Node j's region of n floats over k ranks, g per node: chunks j g .. j g + g - 1.
inline size_t region_begin(size_t n, int k, int g, int j) { return chunk_begin(n, k, j * g); }
inline size_t region_size(size_t n, int k, int g, int j) {
  return chunk_begin(n, k, std::min((j + 1) * g, k)) - chunk_begin(n, k, j * g);
}
// The scratch length of local rank l: the N chunks j g + l.
inline size_t cross_len(size_t n, int k, int g, int l) {
  size_t m = 0;
  for (int j = 0; j * g < k; ++j) m += chunk_size(n, k, j * g + l);
  return m;
}

class HierCollective final : public AllReduce {
 public:
  HierCollective(CommGroup& group, Collective op, const AllReduceOptions& opts)
      : group_(group), op_(op), scratch_(size_t(group.size())) {
    const int nodes = group.nodes(), g = group.ranks_per_node();
    const Collective cross = op;  // across nodes: the same collective (the all-reduce's 1/g)
    // Only the sub-groups that hold a rank of this process (threads: all; a process: its own).
    auto local_in = [&](int first, int stride) {
      for (int i = 0; i < (stride == 1 ? g : nodes); ++i)
        if (group.is_local(first + i * stride)) return first + i * stride;
      return -1;
    };
    for (int j = 0; j < nodes; ++j) {
      const int r = local_in(j * g, 1);
      if (r < 0) {
        node_rs_.push_back(nullptr);
        node_ag_.push_back(nullptr);
        continue;
      }
      CommGroup& ng = group.node_group(r);
      node_rs_.push_back(make_collective(Collective::ReduceScatter, opts.hier_intra, ng, opts));
      node_ag_.push_back(make_collective(Collective::AllGather, opts.hier_intra, ng, opts));
    }
    for (int l = 0; l < g; ++l) {
      const int r = local_in(l, g);
      cross_.push_back(r < 0 ? nullptr
                             : make_collective(cross, opts.hier_cross, group.cross_group(r), opts));
    }
  }
  std::string name() const override { return "hier"; }

  void reserve(int rank, size_t n) override {
    if (op_ == Collective::AllReduce) return;
    const int k = group_.size(), g = group_.ranks_per_node();
    scratch_for(rank, cross_len(n, k, g, group_.local_rank(rank)));
  }

  void run(int rank, float* buf, size_t n) override {
    const int k = group_.size();
    if (k == 1 || n == 0) return;  // same decision on every rank: n is collective
    const int g = group_.ranks_per_node(), nodes = group_.nodes();
    const int j = group_.node_of(rank), l = group_.local_rank(rank);
    if (op_ == Collective::AllReduce) {
      node_rs_[size_t(j)]->run(l, buf, n);
      cross_[size_t(l)]->run(j, buf + chunk_begin(n, g, l), chunk_size(n, g, l));
      node_ag_[size_t(j)]->run(l, buf, n);
      return;
    }
    Device& dev = group_.device(rank);
    const size_t m = cross_len(n, k, g, l);
    float* s = scratch_for(rank, m);
    // Chunk j' g + l of buf <-> chunk j' of the scratch (an exact split of m into nodes).
    auto to_scratch = [&](int jj) {
      const int c = jj * g + l;
      dev.comm_copy(s + chunk_begin(m, nodes, jj), buf + chunk_begin(n, k, c), chunk_size(n, k, c));
    };
    auto from_scratch = [&](int jj) {
      const int c = jj * g + l;
      dev.comm_copy(buf + chunk_begin(n, k, c), s + chunk_begin(m, nodes, jj), chunk_size(n, k, c));
    };
    if (op_ == Collective::ReduceScatter) {
      for (int jj = 0; jj < nodes; ++jj)
        node_rs_[size_t(j)]->run(l, buf + region_begin(n, k, g, jj), region_size(n, k, g, jj));
      for (int jj = 0; jj < nodes; ++jj) to_scratch(jj);
      cross_[size_t(l)]->run(j, s, m);
      from_scratch(j);
    } else {
      to_scratch(j);
      cross_[size_t(l)]->run(j, s, m);
      for (int jj = 0; jj < nodes; ++jj)
        if (jj != j) from_scratch(jj);
      for (int jj = 0; jj < nodes; ++jj)
        node_ag_[size_t(j)]->run(l, buf + region_begin(n, k, g, jj), region_size(n, k, g, jj));
    }
  }

  void abort(int rank, const std::string& why) override { group_.abort(rank, why); }

 private:
  // Rank's scratch of at least m floats (reserve() makes it outside timed steps).
  float* scratch_for(int rank, size_t m) {
    Buffer& b = scratch_[size_t(rank)];
    if (b.size() < std::max<size_t>(m, 1))
      b = group_.alloc(rank, std::max<size_t>(m, 1), MemCategory::Workspace, "hier scratch");
    return b.get();
  }

  CommGroup& group_;
  Collective op_;
  // per node, per local rank; nullptr where no rank of this process is
  std::vector<std::unique_ptr<AllReduce>> node_rs_, node_ag_;
  std::vector<std::unique_ptr<AllReduce>> cross_;
  std::vector<Buffer> scratch_;                                // per rank (reduce-scatter, all-gather)
};

}  // namespace

std::unique_ptr<AllReduce> make_hier_collective(CommGroup& group, Collective c,
                                                const AllReduceOptions& opts) {
  return std::make_unique<HierCollective>(group, c, opts);
}

// Bytes rank q.rank sends (comm_volume.h): its inner collectives' counts on the ranges run()
// gives them.
uint64_t hier_sent_bytes(const SentBytesQuery& q) {
  const int k = q.k, nodes = q.nodes, g = k / nodes, j = q.rank / g, l = q.rank % g;
  const size_t n = q.n;
  if (k <= 1 || n == 0) return 0;
  auto inner = [&](Collective c, const std::string& alg, size_t len, int size, int r) {
    return schedule_sent_bytes(c, alg, len, size, r, q.kind, q.tune_file);
  };
  if (q.op == Collective::AllReduce)
    return inner(Collective::ReduceScatter, q.intra, n, g, l) +
           inner(Collective::AllReduce, q.cross, chunk_size(n, g, l), nodes, j) +
           inner(Collective::AllGather, q.intra, n, g, l);
  uint64_t b = inner(q.op, q.cross, cross_len(n, k, g, l), nodes, j);
  for (int jj = 0; jj < nodes; ++jj) b += inner(q.op, q.intra, region_size(n, k, g, jj), g, l);
  return b;
}

// Its alpha-beta cost (link.h) with ring inside and across the nodes (N nodes of g ranks, T(b) =
// L + b / G on the intra-node link, T'(b) on the inter-node one, LinkSpec::inter): all-reduce
// 2(g-1) T(bytes/g) + 2(N-1) T'(bytes/(g N)); the reduce-scatter (all-gather) runs a node
// reduce-scatter per node region, N (g-1) T(bytes/k), and (N-1) T'(bytes/k) across.
double hier_link_cost(const LinkCostQuery& q) {
  const int nodes = std::max(1, q.link.nodes), g = q.k / nodes;
  if (q.k <= 1) return 0.0;
  return 2.0 * (g - 1) * q.link.transfer_s(q.bytes / g) +
         2.0 * (nodes - 1) * q.link.inter().transfer_s(q.bytes / q.k);
}

double hier_half_link_cost(const LinkCostQuery& q) {
  const int nodes = std::max(1, q.link.nodes), g = q.k / nodes;
  if (q.k <= 1) return 0.0;
  return double(nodes) * (g - 1) * q.link.transfer_s(q.bytes / q.k) +
         double(nodes - 1) * q.link.inter().transfer_s(q.bytes / q.k);
}

}  // namespace dpb
