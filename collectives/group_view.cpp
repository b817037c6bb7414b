// group_view.cpp: a sub-group of a transport's ranks as a transport of its own (make_group_view,
// allreduce.h): view rank i is parent rank members[i]. Its steps are the parent's unfenced steps
// with the ranks translated (so an emulated link paces them between the parent ranks, with the
// intra- or inter-node spec of each pair: link.h), its begin publishes on the parent without the
// parent's barrier, and its fence, barrier and host collectives synchronize the members only
// (a HostBarrier of their own; devices with streams: comm_record, barrier, comm_wait_peer on
// every member, barrier, as the threads transport's), its waits there marked on the watchdog's
// slots (a view board over the parent's: the whole group's slots, named in its ranks; watchdog.h).
// Several views of one parent run at once (every node's group, every cross-node group) on
// disjoint ranks. The parent's abort wakes the views' waiters (Transport::watch_abort); a view's
// abort aborts the parent. CommGroup's node and cross-node groups are views (CommGroup::
// node_group, cross_group) over the threads transport (split_into_views is its Transport::split);
// processes split an MPI transport instead (collectives/mpi/mpi_transport.h). node_layout: whether
// ranks on given nodes form a two-level group (the MPI transport's real nodes). Tested by
// tests/test_hier.cpp, tests/test_watchdog.cpp (Watchdog.HierOnTwoNodes...).
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "collectives/allreduce.h"
#include "src/core/check.h"

namespace dpb {
namespace {

class GroupView final : public Transport {
 public:
  GroupView(Transport& parent, std::vector<int> members)
      : p_(parent), members_(std::move(members)), g_(int(members_.size())),
        host_ptrs_(members_.size(), nullptr), barrier_(g_, parent.barrier_spin_ns()) {
    DPB_CHECK(g_ >= 1, "sub-group: no ranks");
    for (int m : members_) {
      DPB_CHECK(m >= 0 && m < p_.size(), "sub-group: rank " << m << " is not in a group of "
                                                             << p_.size());
      DPB_CHECK(p_.is_local(m), "sub-group: rank " << m << " is not a rank of this process");
    }
    ordered_ = p_.kind() != BackendKind::Cpu;
    if (const WatchBoard* pb = p_.watch_board())
      board_ = std::make_unique<WatchBoard>(*pb, members_);
    p_.watch_abort([this](const std::string&) { barrier_.abort(); });
  }

  Launcher launcher() const override { return p_.launcher(); }
  int size() const override { return g_; }
  int processes() const override { return p_.processes(); }
  bool is_local(int rank) const override { return rank >= 0 && rank < g_; }
  Device& device(int rank) const override { return p_.device(members_[size_t(rank)]); }
  BackendKind kind() const override { return p_.kind(); }
  Buffer alloc(int rank, size_t n, MemCategory cat, const char* what) override {
    return p_.alloc(members_[size_t(rank)], n, cat, what);
  }
  long barrier_spin_ns() const override { return barrier_.spin_ns(); }
  void set_barrier_spin_ns(long ns) override { barrier_.set_spin_ns(ns); }
  bool paced() const override { return p_.paced(); }
  void issue(int rank, std::chrono::steady_clock::time_point t) override {
    p_.issue(members_[size_t(rank)], t);
  }
  double link_send_seconds(int rank) const override {
    return p_.link_send_seconds(members_[size_t(rank)]);
  }
  double link_recv_seconds(int rank) const override {
    return p_.link_recv_seconds(members_[size_t(rank)]);
  }

  void begin(int rank, float* buf) override {
    p_.publish(members_[size_t(rank)], buf);
    barrier(rank);  // the members' buffers are published
  }
  void publish(int rank, float* buf) override { p_.publish(members_[size_t(rank)], buf); }
  void watch_abort(std::function<void(const std::string&)> wake) override {
    p_.watch_abort(std::move(wake));
  }

  void step(int rank, std::span<const SendOp> sends, std::span<const RecvOp> recvs,
            bool fence) override {
    std::vector<SendOp> s(sends.begin(), sends.end());
    std::vector<RecvOp> r(recvs.begin(), recvs.end());
    for (SendOp& o : s) o.to = members_[size_t(o.to)];
    for (RecvOp& o : r) o.from = members_[size_t(o.from)];
    p_.step(members_[size_t(rank)], s, r, false);
    if (fence) barrier(rank);
  }
  void fence(int rank) override { barrier(rank); }

  void barrier(int rank) override {
    if (p_.aborted()) throw_aborted(rank);
    if (g_ == 1) return;
    Device& dev = device(rank);
    if (ordered_) dev.comm_record();
    if (!barrier_.arrive_and_wait(slot(rank))) throw_aborted(rank);
    if (!ordered_) return;
    for (int q = 0; q < g_; ++q)
      if (q != rank) dev.comm_wait_peer(device(q));
    if (!barrier_.arrive_and_wait(slot(rank))) throw_aborted(rank);
  }

  void broadcast_host(int rank, void* data, size_t bytes, int root) override {
    host_ptrs_[size_t(rank)] = data;
    host_sync(rank);
    if (rank != root && bytes > 0) std::memcpy(data, host_ptrs_[size_t(root)], bytes);
    host_sync(rank);
  }
  void allgather_host(int rank, const void* mine, void* all, size_t bytes) override {
    host_ptrs_[size_t(rank)] = const_cast<void*>(mine);
    host_sync(rank);
    for (int q = 0; q < g_; ++q)
      if (bytes > 0)
        std::memcpy(static_cast<char*>(all) + size_t(q) * bytes, host_ptrs_[size_t(q)], bytes);
    host_sync(rank);
  }

  void abort(int rank, const std::string& why) override { p_.abort(members_[size_t(rank)], why); }
  bool aborted() const override { return p_.aborted(); }
  std::string abort_reason() const override { return p_.abort_reason(); }
  WatchBoard* watch_board() override { return board_.get(); }

 private:
  void host_sync(int rank) {
    if (p_.aborted()) throw_aborted(rank);
    if (g_ > 1 && !barrier_.arrive_and_wait(slot(rank))) throw_aborted(rank);
  }
  // The member's slot (the whole group's, via the parent's board), or nullptr when not watched.
  WatchSlot* slot(int rank) const { return board_ ? board_->local_slot(rank) : nullptr; }
  // The parent's reason: it is set before the parent's aborted flag, which a rank may see before
  // the parent's wake reaches this view.
  [[noreturn]] void throw_aborted(int rank) {
    const std::string why = p_.abort_reason();
    throw Error("rank " + std::to_string(members_[size_t(rank)]) +
                ": collective aborted because " + (why.empty() ? "the group was aborted" : why));
  }

  Transport& p_;
  std::vector<int> members_;
  int g_;
  std::vector<void*> host_ptrs_;
  HostBarrier barrier_;
  bool ordered_ = false;
  std::unique_ptr<WatchBoard> board_;  // over the parent's board (nullptr: the parent has none)
};

}  // namespace

std::unique_ptr<Transport> make_group_view(Transport& parent, std::vector<int> members) {
  return std::make_unique<GroupView>(parent, std::move(members));
}

std::vector<std::unique_ptr<Transport>> split_into_views(Transport& t,
                                                         const std::vector<std::vector<int>>& parts) {
  std::vector<std::unique_ptr<Transport>> out;
  for (const std::vector<int>& p : parts) out.push_back(make_group_view(t, p));
  return out;
}

std::string node_layout(const std::vector<int>& node_of, int& nodes) {
  nodes = 1;
  const int k = int(node_of.size());
  std::vector<int> ids;     // the nodes in order of their first rank
  std::vector<int> counts;  // ranks per node, same order
  std::vector<int> index(node_of.size());
  for (int r = 0; r < k; ++r) {
    const auto it = std::find(ids.begin(), ids.end(), node_of[size_t(r)]);
    index[size_t(r)] = int(it - ids.begin());
    if (it == ids.end()) {
      ids.push_back(node_of[size_t(r)]);
      counts.push_back(0);
    }
    ++counts[size_t(index[size_t(r)])];
  }
  const int n = int(ids.size());
  if (n <= 1) return "";
  std::string per;
  for (int c : counts) per += (per.empty() ? "" : ", ") + std::to_string(c);
  bool ok = k % n == 0;
  for (int r = 0; ok && r < k; ++r) ok = index[size_t(r)] == r / (k / n);
  if (!ok)
    return "the " + std::to_string(k) + " ranks are on " + std::to_string(n) +
           " nodes holding " + per + " ranks, not equal numbers of ranks numbered node by node "
           "(launch with as many ranks on every node, placed by node: mpirun --map-by "
           "ppr:G:node, srun --distribution=block)";
  nodes = n;
  return "";
}

}  // namespace dpb
