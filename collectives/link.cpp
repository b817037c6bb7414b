// link.cpp: the emulated link: LinkFabric (the booking policy), book_step and the paced transport
// (the seam both launchers pace at, and where the hosts' issue times arrive), and the query of the
// registry's cost models. See link.h; tested by tests/test_link.cpp and test_link_seam.cpp.
#include "collectives/link.h"

#include <sys/prctl.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <thread>
#include <utility>

#include "collectives/allreduce.h"
#include "collectives/registry.h"
#include "src/core/check.h"

namespace dpb {

double LinkSpec::gbps_of(int rank) const {
  double g = 0;
  for (const auto& [r, rg] : rank_gbps)
    if (r == rank && (g == 0 || rg < g)) g = rg;
  return g > 0 ? g : gbps;
}

double LinkSpec::busy_s(int src, int dst, double bytes, int k) const {
  double a = gbps_of(src), b = gbps_of(dst);
  if (k > 0 && crosses(src, dst, k)) {  // the inter-node link, slowed by a rank's override
    auto own = [&](int rank) {  // rank's smallest override, 0: none
      double o = 0;
      for (const auto& [r, rg] : rank_gbps)
        if (r == rank && (o == 0 || rg < o)) o = rg;
      return o;
    };
    const double g = inter().gbps, oa = own(src), ob = own(dst);
    a = oa > 0 && (g == 0 || oa < g) ? oa : g;
    b = ob > 0 && (g == 0 || ob < g) ? ob : g;
  }
  const double g = a > 0 && b > 0 ? std::min(a, b) : std::max(a, b);  // 0: unlimited
  return g > 0 ? bytes * 8.0 / (g * 1e9) : 0.0;
}

double LinkSpec::step_s(double bytes, int k) const {
  if (nodes <= 1 || k < nodes) return transfer_s(bytes);
  const double across = inter().transfer_s(bytes);
  return k / nodes == 1 ? across : std::max(transfer_s(bytes), across);  // g = 1: every one crosses
}

std::string LinkSpec::label() const {
  if (!enabled()) return "none";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g Gb/s, %g us", gbps, latency_us);
  std::string s = buf;
  for (const auto& [r, g] : rank_gbps) {
    std::snprintf(buf, sizeof buf, "; rank %d %g Gb/s", r, g);
    s += buf;
  }
  if (nodes > 1) {
    const LinkSpec x = inter();
    std::snprintf(buf, sizeof buf, "; %d nodes, %g Gb/s, %g us between", nodes, x.gbps,
                  x.latency_us);
    s += buf;
  }
  return s;
}

void validate_link(const LinkSpec& link, const std::string& gbps_opt,
                   const std::string& latency_opt) {
  // Below 1e-6 Gb/s (1 kb/s) a transfer's time overflows the clock (1e-300 paced nothing).
  DPB_CHECK(std::isfinite(link.gbps) && (link.gbps == 0 || (link.gbps >= 1e-6 && link.gbps <= 1e9)),
            gbps_opt << ": must be 0 (no limit) or gigabits per second in [1e-6, 1e9], got "
                     << link.gbps);
  DPB_CHECK(std::isfinite(link.latency_us) && link.latency_us >= 0 && link.latency_us <= 1e7,
            latency_opt << ": must be a number of microseconds in [0, 1e7], got "
                        << link.latency_us);
  DPB_CHECK(std::isfinite(link.node_gbps) &&
                (link.node_gbps == 0 || (link.node_gbps >= 1e-6 && link.node_gbps <= 1e9)),
            "--node-link-gbps: must be 0 (the intra-node link's) or gigabits per second in "
            "[1e-6, 1e9], got " << link.node_gbps);
  DPB_CHECK(std::isfinite(link.node_latency_us) && link.node_latency_us >= 0 &&
                link.node_latency_us <= 1e7,
            "--node-link-latency-us: must be a number of microseconds in [0, 1e7], got "
                << link.node_latency_us);
  DPB_CHECK(link.nodes >= 1, "--nodes (DPB_NODES): must be a number of nodes >= 1, got "
                                 << link.nodes);
  for (const auto& [r, g] : link.rank_gbps) {
    DPB_CHECK(r >= 0, "emulated link: a bandwidth override for rank " << r
                          << " (ranks count from 0)");
    DPB_CHECK(std::isfinite(g) && g >= 1e-6,
              "emulated link: rank " << r << "'s bandwidth must be a number >= 1e-6 Gb/s, got "
                                     << g);
  }
}

// ---------------------------------------------------------------- LinkFabric

LinkFabric::LinkFabric(int k, LinkSpec spec)
    : spec_(spec), send_free_(size_t(std::max(k, 1))), recv_free_(size_t(std::max(k, 1))),
      issued_(size_t(std::max(k, 1))), stream_(size_t(std::max(k, 1))),
      streamed_(size_t(std::max(k, 1)), 0), send_busy_(size_t(std::max(k, 1))),
      recv_busy_(size_t(std::max(k, 1))) {
  DPB_CHECK(k >= 1, "LinkFabric: need at least one rank, got " << k);
  for (const auto& [r, g] : spec_.rank_gbps)
    DPB_CHECK(r >= 0 && r < k, "emulated link: a bandwidth override for rank "
                                   << r << " in a group of " << k << " ranks (0 to " << k - 1
                                   << ")");
}

void LinkFabric::issue(int r, Clock::time_point t) {
  std::lock_guard<std::mutex> lk(mu_);
  issued_[r] = std::max(issued_[r], t);
  streamed_[r] = 1;
}

LinkFabric::Clock::time_point LinkFabric::reserve(int src, int dst, double bytes, int by,
                                                  Clock::time_point not_before) {
  const auto now = Clock::now();
  // The slower end's G (rank_gbps); between emulated nodes the inter-node link's G and L.
  const int k = size();
  const double busy_s = spec_.busy_s(src, dst, bytes, k);
  const auto busy =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(busy_s));
  const auto lat = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(spec_.latency_s(src, dst, k)));
  std::lock_guard<std::mutex> lk(mu_);
  // Stream mode (every rank issued): the collective's data is there once the last rank issued it
  // (its first barrier waits for all), and the booking rank's stream runs its transfers in order;
  // the links are shared. What each rank received in the previous step is covered by the
  // booking rank's own last delivery: the algorithms run in lock-step (barriers).
  Clock::time_point ready = now;
  if (std::all_of(streamed_.begin(), streamed_.end(), [](char c) { return c != 0; }))
    ready = std::max(*std::max_element(issued_.begin(), issued_.end()), stream_[by]);
  const auto start = std::max({ready, not_before, send_free_[src], recv_free_[dst]});
  send_free_[src] = recv_free_[dst] = start + busy;  // the latency is propagation, not occupancy
  const auto done = start + busy + lat;
  stream_[by] = std::max(stream_[by], done);
  ++transfers_;
  bytes_ += bytes;
  send_busy_[size_t(src)] += busy_s;
  recv_busy_[size_t(dst)] += busy_s;
  return done;
}

long LinkFabric::transfers() const {
  std::lock_guard<std::mutex> lk(mu_);
  return transfers_;
}

double LinkFabric::bytes() const {
  std::lock_guard<std::mutex> lk(mu_);
  return bytes_;
}

double LinkFabric::send_busy_seconds(int r) const {
  DPB_CHECK(r >= 0 && r < size(), "LinkFabric: no rank " << r << " in " << size());
  std::lock_guard<std::mutex> lk(mu_);
  return send_busy_[size_t(r)];
}

double LinkFabric::recv_busy_seconds(int r) const {
  DPB_CHECK(r >= 0 && r < size(), "LinkFabric: no rank " << r << " in " << size());
  std::lock_guard<std::mutex> lk(mu_);
  return recv_busy_[size_t(r)];
}

// Sleeps (never spins) until t. The default timer slack (50 us) would make every wake-up late by
// up to that much, so the pacing threads ask for 1 ns.
void link_sleep_until(LinkFabric::Clock::time_point t) {
  thread_local bool slack_set = false;
  if (!slack_set) {
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    slack_set = true;
  }
  std::this_thread::sleep_until(t);
}

// ---------------------------------------------------------------- the seam: a step

LinkFabric::Clock::time_point book_step(LinkFabric& fab, const Transport& t, int rank,
                                        std::span<const SendOp> sends,
                                        std::span<const RecvOp> recvs,
                                        LinkFabric::Clock::time_point not_before) {
  auto done = LinkFabric::Clock::now();
  LinkFabric::Clock::time_point chain = not_before;  // the end of this rank's last own move
  auto book = [&](int src, int dst, size_t len, int by) {
    if (len == 0 || src == dst) return;  // within one rank's memory: not a link transfer
    const bool ours = by == rank;
    if (!ours && t.is_local(by)) return;  // a rank of this process books its own moves
    const auto end = fab.reserve(src, dst, double(len) * sizeof(float), by,
                                 ours ? chain : LinkFabric::Clock::time_point{});
    if (ours) chain = end;
    done = std::max(done, end);
  };
  for (const RecvOp& r : recvs) book(r.from, rank, r.len, r.op == RecvOp::Put ? r.from : rank);
  for (const SendOp& s : sends) book(rank, s.to, s.len, s.put_off == SendOp::kPull ? s.to : rank);
  return done;
}

namespace {

// A transport whose steps are paced (with_link): everything else is the inner transport's.
class PacedTransport final : public Transport {
 public:
  PacedTransport(std::unique_ptr<Transport> inner, std::shared_ptr<LinkFabric> fabric)
      : in_(std::move(inner)), fab_(std::move(fabric)), space_(in_.get()) {
    DPB_CHECK(fab_->size() == in_->size(), "emulated link: a fabric of " << fab_->size()
                                               << " ranks for a group of " << in_->size());
    for (int r = 0; r < in_->size(); ++r) shared_ = shared_ && in_->is_local(r);
  }
  // A sub-group of processes (split): its rank r is the fabric's rank fab_rank[r], of `space`
  // (the transport the fabric was made for), so that every pair is charged the intra- or
  // inter-node spec of its ranks in the whole group (LinkSpec::crosses).
  PacedTransport(std::unique_ptr<Transport> inner, std::shared_ptr<LinkFabric> fabric,
                 std::vector<int> fab_rank, const Transport* space)
      : in_(std::move(inner)), fab_(std::move(fabric)), fab_rank_(std::move(fab_rank)),
        space_(space), shared_(false) {
    DPB_CHECK(int(fab_rank_.size()) == in_->size(), "emulated link: " << fab_rank_.size()
                                                        << " fabric ranks for a sub-group of "
                                                        << in_->size());
  }
  Transport& inner() { return *in_; }
  const LinkFabric& fabric() const { return *fab_; }

  void step(int rank, std::span<const SendOp> sends, std::span<const RecvOp> recvs,
            bool fence) override {
    if (shared_) {
      step_by_move(rank, sends, recvs);
    } else {
      const auto done = fab_rank_.empty() ? book_step(*fab_, *in_, rank, sends, recvs)
                                          : book_translated(rank, sends, recvs);
      in_->step(rank, sends, recvs, false);  // the moves, at host speed
      link_sleep_until(done);                // before the fence: peers wait for the link too
    }
    if (fence) in_->fence(rank);
  }
  void fence(int rank) override { in_->fence(rank); }
  bool paced() const override { return true; }
  void issue(int rank, LinkFabric::Clock::time_point t) override { fab_->issue(fr(rank), t); }
  double link_send_seconds(int rank) const override { return fab_->send_busy_seconds(fr(rank)); }
  double link_recv_seconds(int rank) const override { return fab_->recv_busy_seconds(fr(rank)); }
  // Threads (every rank here): views of this transport, paced as its steps. Processes: the inner
  // transport's sub-groups, each paced on this fabric with its ranks translated.
  std::vector<std::unique_ptr<Transport>> split(
      const std::vector<std::vector<int>>& parts) override {
    if (shared_) return split_into_views(*this, parts);
    std::vector<std::unique_ptr<Transport>> subs = in_->split(parts);
    for (size_t i = 0; i < subs.size() && i < parts.size(); ++i) {
      if (!subs[i]) continue;
      std::vector<int> map;
      for (int m : parts[i]) map.push_back(fr(m));
      subs[i] = std::make_unique<PacedTransport>(std::move(subs[i]), fab_, std::move(map), space_);
    }
    return subs;
  }
  int nodes() const override { return in_->nodes(); }
  std::string nodes_refusal() const override { return in_->nodes_refusal(); }

  Launcher launcher() const override { return in_->launcher(); }
  int size() const override { return in_->size(); }
  int processes() const override { return in_->processes(); }
  bool is_local(int rank) const override { return in_->is_local(rank); }
  Device& device(int rank) const override { return in_->device(rank); }
  BackendKind kind() const override { return in_->kind(); }
  Buffer alloc(int rank, size_t n, MemCategory cat, const char* what) override {
    return in_->alloc(rank, n, cat, what);
  }
  void begin(int rank, float* buf) override { in_->begin(rank, buf); }
  WatchBoard* watch_board() override { return in_->watch_board(); }
  void publish(int rank, float* buf) override { in_->publish(rank, buf); }
  void watch_abort(std::function<void(const std::string&)> wake) override {
    in_->watch_abort(std::move(wake));
  }
  void barrier(int rank) override { in_->barrier(rank); }
  void broadcast_host(int rank, void* data, size_t bytes, int root) override {
    in_->broadcast_host(rank, data, bytes, root);
  }
  void allgather_host(int rank, const void* mine, void* all, size_t bytes) override {
    in_->allgather_host(rank, mine, all, bytes);
  }
  void abort(int rank, const std::string& why) override { in_->abort(rank, why); }
  bool aborted() const override { return in_->aborted(); }
  std::string abort_reason() const override { return in_->abort_reason(); }
  long barrier_spin_ns() const override { return in_->barrier_spin_ns(); }
  void set_barrier_spin_ns(long ns) override { in_->set_barrier_spin_ns(ns); }

 private:
  // Every rank books on fab_ (link.h, with_link): this rank's own moves (its receives that are
  // not puts, then its puts, as direct_moves makes them) one at a time, each booked, made and
  // slept on before the next; then the rest of the step (the moves its peers make), unbooked here.
  void step_by_move(int rank, std::span<const SendOp> sends, std::span<const RecvOp> recvs) {
    LinkFabric::Clock::time_point last{};
    for (size_t i = 0; i < recvs.size(); ++i) {
      if (recvs[i].op == RecvOp::Put) continue;
      last = book_step(*fab_, *in_, rank, {}, recvs.subspan(i, 1), last);
      in_->step(rank, {}, recvs.subspan(i, 1), false);
      link_sleep_until(last);
    }
    for (size_t i = 0; i < sends.size(); ++i) {
      if (sends[i].put_off == SendOp::kPull) continue;
      last = book_step(*fab_, *in_, rank, sends.subspan(i, 1), {}, last);
      in_->step(rank, sends.subspan(i, 1), {}, false);
      link_sleep_until(last);
    }
    std::vector<SendOp> pulls;
    std::vector<RecvOp> puts;
    for (const SendOp& s : sends)
      if (s.put_off == SendOp::kPull) pulls.push_back(s);
    for (const RecvOp& r : recvs)
      if (r.op == RecvOp::Put) puts.push_back(r);
    if (!pulls.empty() || !puts.empty()) in_->step(rank, pulls, puts, false);
  }

  int fr(int rank) const { return fab_rank_.empty() ? rank : fab_rank_[size_t(rank)]; }
  // book_step of a sub-group's step, in the fabric's ranks.
  LinkFabric::Clock::time_point book_translated(int rank, std::span<const SendOp> sends,
                                                std::span<const RecvOp> recvs) {
    std::vector<SendOp> s(sends.begin(), sends.end());
    std::vector<RecvOp> r(recvs.begin(), recvs.end());
    for (SendOp& o : s) o.to = fr(o.to);
    for (RecvOp& o : r) o.from = fr(o.from);
    return book_step(*fab_, *space_, fr(rank), s, r);
  }

  std::unique_ptr<Transport> in_;
  std::shared_ptr<LinkFabric> fab_;
  std::vector<int> fab_rank_;  // a sub-group's ranks in the fabric (empty: the same)
  // Whose ranks the fabric's are (book_step asks it which are local): in_, or for a sub-group
  // the whole group's transport (alive while its sub-groups work: CommGroup's levels).
  const Transport* space_;
  bool shared_ = true;  // every rank is in this process and books its own moves on fab_
};

}  // namespace

std::unique_ptr<Transport> with_link(std::unique_ptr<Transport> inner,
                                     std::shared_ptr<LinkFabric> fabric) {
  DPB_CHECK(inner && fabric, "with_link: null transport or fabric");
  return std::make_unique<PacedTransport>(std::move(inner), std::move(fabric));
}

Transport& unpaced(Transport& t) {
  auto* p = dynamic_cast<PacedTransport*>(&t);
  return p ? p->inner() : t;
}

const LinkSpec* paced_link(const Transport& t) {
  auto* p = dynamic_cast<const PacedTransport*>(&t);
  return p ? &p->fabric().spec() : nullptr;
}

// ---------------------------------------------------------------- cost model

double allreduce_link_cost(const std::string& algorithm, double bytes, int k, const LinkSpec& link,
                           BackendKind kind, const std::string& tune_file) {
  const AllReduceEntry& e = find_allreduce(algorithm);  // throws naming an unknown one
  if (e.link_cost) return e.link_cost(LinkCostQuery{bytes, k, link, kind, tune_file});
  std::string have;
  for (const AllReduceEntry& o : allreduce_algorithms())
    if (o.link_cost) have += (have.empty() ? "" : ", ") + o.name;
  DPB_CHECK(false, "no link cost model for all-reduce '" << algorithm << "' (have: " << have << ")");
}

}  // namespace dpb
