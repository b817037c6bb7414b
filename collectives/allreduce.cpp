// allreduce.cpp: the host barrier, CommGroup's constructors (the threads transport itself is in
// transport_threads.cpp) and make_allreduce, which finds an algorithm in the table (registry.cpp) and wraps it with an
// NVTX range and abort-on-failure; make_collective, the same for the reduce-scatter and all-gather
// tables (shard.h). The algorithms live in one file each (naive.cpp, ring.cpp,
// cuda/nccl_allreduce.cu, ...). Tested by tests/test_allreduce.cpp.
#include "collectives/allreduce.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <exception>

#include "collectives/registry.h"
#include "src/core/check.h"
#include "src/core/cpu_relax.h"
#include "src/core/nvtx.h"

namespace dpb {

// ---------------------------------------------------------------- HostBarrier

bool HostBarrier::arrive_and_wait(WatchSlot* slot) {
  if (aborted_.load()) return false;
  const uint32_t g = gen_.load(std::memory_order_acquire);
  if (count_.fetch_add(1, std::memory_order_acq_rel) == k_ - 1) {
    // Last to arrive: reset the count before releasing the others, who may re-enter at once.
    count_.store(0, std::memory_order_relaxed);
    gen_.fetch_add(1, std::memory_order_release);
    gen_.notify_all();
    return !aborted_.load();
  }
  // A waiter put to sleep costs a wake-up (tens of us on a VM): poll first.
  if (const std::chrono::nanoseconds spin(spin_ns()); spin.count() > 0) {
    const auto t0 = std::chrono::steady_clock::now();
    for (unsigned i = 1;; ++i) {
      if (gen_.load(std::memory_order_acquire) != g || aborted_.load()) return !aborted_.load();
      cpu_relax();
      if (i % 64 != 0) continue;
      if (std::chrono::steady_clock::now() - t0 > spin) break;
      // The peer we wait for may share this core (another job took its own, or the ranks
      // outnumber the cores): let it run instead of polling through our time slice.
      std::this_thread::yield();
    }
  }
  WaitScope watched(slot, WaitKind::Barrier, -1, g);  // asleep: the watchdog may look (watchdog.h)
  while (gen_.load(std::memory_order_acquire) == g && !aborted_.load()) gen_.wait(g);
  return !aborted_.load();
}

void HostBarrier::abort() {
  aborted_.store(true);
  gen_.fetch_add(1);
  gen_.notify_all();
}

// ---------------------------------------------------------------- CommGroup

long default_barrier_spin_ns(int threads) {
  if (const char* e = std::getenv("DPB_SPIN_US")) {
    char* end = nullptr;
    const double us = std::strtod(e, &end);
    DPB_CHECK(end != e && *end == '\0' && std::isfinite(us) && us >= 0 && us <= 1e6,
              "environment variable DPB_SPIN_US='" << e
                                                   << "' is not a number of microseconds in [0, 1e6]");
    return long(us * 1000.0);
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 && threads > 0 && unsigned(threads) <= hw ? 100000 : 0;
}

// link with its node count from DPB_NODES when it names one node (--nodes wins; issue 26).
LinkSpec with_env_nodes(LinkSpec link) {
  if (const char* e = std::getenv("DPB_NODES"); e && link.nodes == 1) {
    char* end = nullptr;
    const long v = std::strtol(e, &end, 10);
    DPB_CHECK(end != e && *end == '\0' && v >= 1 && v <= 4096,
              "environment variable DPB_NODES='" << e << "' is not a number of nodes in [1, 4096]");
    link.nodes = int(v);
  }
  return link;
}

CommGroup::CommGroup(int k, std::vector<Device*> devices, const LinkSpec& link)
    : CommGroup(k, std::move(devices), with_env_nodes(link), 0) {}

CommGroup::CommGroup(int k, std::vector<Device*> devices, const LinkSpec& link, int)
    : t_(make_thread_transport(k, std::move(devices), link)),
      sent_(std::make_unique<SentCounter[]>(size_t(t_->size()))), nodes_(link.nodes) {
  DPB_CHECK(nodes_ >= 1 && k % nodes_ == 0,
            "--nodes (DPB_NODES) " << nodes_ << ": the " << k
                                   << " ranks must split into nodes of equal size (a divisor of "
                                   << k << ")");
}

const CommGroup::Levels& CommGroup::levels() {
  std::call_once(levels_once_, [&] {
    DPB_CHECK(nodes_refusal_.empty(), "node and cross-node groups (--allreduce hier): "
                                          << nodes_refusal_);
    const int n = nodes_, g = ranks_per_node();
    std::vector<std::vector<int>> node(static_cast<size_t>(n)), cross(static_cast<size_t>(g));
    for (int j = 0; j < n; ++j)
      for (int l = 0; l < g; ++l) {
        node[size_t(j)].push_back(j * g + l);
        cross[size_t(l)].push_back(j * g + l);
      }
    // Collective (Transport::split): every process splits the nodes, then the cross groups.
    // name(i): part i as the watchdog's messages say it (its board's group, watchdog.h).
    auto sub = [&](const std::vector<std::vector<int>>& parts,
                   std::vector<std::unique_ptr<CommGroup>>& out, auto name) {
      std::vector<std::unique_ptr<Transport>> ts = t_->split(parts);
      DPB_CHECK(ts.size() == parts.size(), "sub-groups: " << ts.size() << " transports for "
                                                          << parts.size() << " parts");
      for (size_t i = 0; i < parts.size(); ++i) {
        if (!ts[i]) {  // no rank of this process in it
          out.push_back(nullptr);
          continue;
        }
        if (WatchBoard* b = ts[i]->watch_board()) b->set_group(name(int(i)));
        auto c = std::make_unique<CommGroup>(std::move(ts[i]));
        c->parent_ = this;
        c->members_ = parts[i];
        out.push_back(std::move(c));
      }
    };
    sub(node, levels_.node, [](int j) { return "node " + std::to_string(j) + "'s group"; });
    sub(cross, levels_.cross,
        [](int l) { return "the cross-node group of local rank " + std::to_string(l); });
  });
  return levels_;
}

CommGroup& CommGroup::level(const std::vector<std::unique_ptr<CommGroup>>& v, int i, int rank) {
  DPB_CHECK(is_local(rank), "node and cross-node groups: rank " << rank
                                << " is not a rank of this process (each process holds its own "
                                   "ranks' sub-groups)");
  return *v[size_t(i)];
}

CommGroup::CommGroup(std::unique_ptr<Transport> transport) : t_(std::move(transport)) {
  DPB_CHECK(t_, "CommGroup: null transport");
  sent_ = std::make_unique<SentCounter[]>(size_t(t_->size()));
  nodes_ = t_->nodes();
  nodes_refusal_ = t_->nodes_refusal();
  DPB_CHECK(nodes_ >= 1 && t_->size() % nodes_ == 0,
            "CommGroup: " << t_->size() << " ranks on " << nodes_ << " nodes of unequal size");
}

// ---------------------------------------------------------------- make_allreduce

std::string format_bytes(double bytes) {
  static const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (bytes >= 1000.0 && u < 4) { bytes /= 1000.0; ++u; }
  char buf[32];
  if (u == 0) std::snprintf(buf, sizeof buf, "%.0f B", bytes);
  else std::snprintf(buf, sizeof buf, "%.1f %s", bytes, units[u]);
  return buf;
}

namespace {

// Adds the NVTX range and abort-on-failure around any algorithm, so every backend gets them.
class Traced final : public AllReduce {
 public:
  Traced(std::unique_ptr<AllReduce> inner, CommGroup& group, Collective c)
      : inner_(std::move(inner)), group_(group),
        label_(std::string(collective_family(c)) + " " + inner_->name() + " "), op_(c) {}
  std::string name() const override { return inner_->name(); }
  std::string choice(size_t n) const override { return inner_->choice(n); }
  std::string describe() const override { return inner_->describe(); }
  void run(int rank, float* buf, size_t n) override {
    const std::string what = label_ + format_bytes(double(n) * sizeof(float));
    NvtxRange range(what);
    // Where a stalled peer leaves us waiting, and in which sub-group (the whole group's slot).
    WatchLabel watched(group_.watch_slot(rank), what, group_.watch_group());
    try {
      inner_->run(rank, buf, n);
    } catch (const std::exception& e) {
      abort(rank, e.what());
      throw;
    } catch (...) {
      abort(rank, std::string("unknown exception in ") + collective_name(op_) + " " + inner_->name());
      throw;
    }
  }
  void reserve(int rank, size_t n) override { inner_->reserve(rank, n); }
  void issue(int rank, std::chrono::steady_clock::time_point t) override { group_.issue(rank, t); }
  void abort(int rank, const std::string& why) override {
    inner_->abort(rank, why);
    group_.abort(rank, why);
  }

 private:
  std::unique_ptr<AllReduce> inner_;
  CommGroup& group_;
  std::string label_;
  Collective op_;
};

}  // namespace

std::unique_ptr<AllReduce> make_collective(Collective c, const std::string& algorithm,
                                           CommGroup& group, const AllReduceOptions& opts) {
  const AllReduceEntry& e = find_collective(c, algorithm);
  const std::string why = allreduce_refusal(e, group.size(), group.kind(), group.launcher());
  DPB_CHECK(why.empty(), why);
  return std::make_unique<Traced>(e.make(group, opts), group, c);
}

std::unique_ptr<AllReduce> make_allreduce(const std::string& algorithm, CommGroup& group,
                                          const AllReduceOptions& opts) {
  return make_collective(Collective::AllReduce, algorithm, group, opts);
}

}  // namespace dpb
