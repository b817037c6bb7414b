// link.cpp: the emulated link (LinkFabric, the pacing Device decorator) and the alpha-beta cost
// table of the all-reduce algorithms. See link.h; tested by tests/test_link.cpp.
#include "collectives/link.h"

#include <sys/prctl.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <mutex>
#include <thread>

#include "collectives/registry.h"
#include "collectives/tuning.h"
#include "src/core/check.h"
#include "src/core/forwarding_device.h"

namespace dpb {

std::string LinkSpec::label() const {
  if (!enabled()) return "none";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g Gb/s, %g us", gbps, latency_us);
  return buf;
}

void validate_link(const LinkSpec& link, const std::string& gbps_opt,
                   const std::string& latency_opt) {
  DPB_CHECK(std::isfinite(link.gbps) && link.gbps >= 0,
            gbps_opt << ": must be a number >= 0 (gigabits per second; 0: no limit), got "
                     << link.gbps);
  DPB_CHECK(std::isfinite(link.latency_us) && link.latency_us >= 0 && link.latency_us <= 1e7,
            latency_opt << ": must be a number of microseconds in [0, 1e7], got "
                        << link.latency_us);
}

// ---------------------------------------------------------------- LinkFabric

LinkFabric::LinkFabric(int k, LinkSpec spec)
    : spec_(spec), send_free_(size_t(std::max(k, 1))), recv_free_(size_t(std::max(k, 1))),
      issued_(size_t(std::max(k, 1))), stream_(size_t(std::max(k, 1))),
      streamed_(size_t(std::max(k, 1)), 0) {
  DPB_CHECK(k >= 1, "LinkFabric: need at least one rank, got " << k);
}

void LinkFabric::issue(int r, Clock::time_point t) {
  std::lock_guard<std::mutex> lk(mu_);
  issued_[r] = std::max(issued_[r], t);
  streamed_[r] = 1;
}

LinkFabric::Clock::time_point LinkFabric::reserve(int src, int dst, double bytes, int by,
                                                  Clock::time_point not_before) {
  const auto now = Clock::now();
  const auto busy = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
      spec_.gbps > 0 ? bytes * 8.0 / (spec_.gbps * 1e9) : 0.0));
  const auto lat = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(spec_.latency_us * 1e-6));
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
  return done;
}

void LinkFabric::add_memory(const void* p, size_t bytes, int rank) {
  if (!p) return;
  std::lock_guard<std::mutex> lk(mu_);
  mem_[static_cast<const char*>(p)] = {bytes, rank};
}

void LinkFabric::remove_memory(const void* p) {
  std::lock_guard<std::mutex> lk(mu_);
  mem_.erase(static_cast<const char*>(p));
}

int LinkFabric::owner(const void* p, int fallback) const {
  const char* c = static_cast<const char*>(p);
  std::lock_guard<std::mutex> lk(mu_);
  auto it = mem_.upper_bound(c);  // first allocation starting after p
  if (it == mem_.begin()) return fallback;
  --it;
  return c < it->first + it->second.first ? it->second.second : fallback;
}

long LinkFabric::transfers() const {
  std::lock_guard<std::mutex> lk(mu_);
  return transfers_;
}

double LinkFabric::bytes() const {
  std::lock_guard<std::mutex> lk(mu_);
  return bytes_;
}

// ---------------------------------------------------------------- the decorator

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

namespace {

class LinkDevice final : public ForwardingDevice {
 public:
  LinkDevice(std::unique_ptr<Device> inner, std::shared_ptr<LinkFabric> fabric)
      : ForwardingDevice(std::move(inner)), fab_(std::move(fabric)), rank_(in_->rank()) {
    DPB_CHECK(in_->kind() == BackendKind::Cpu,
              "the emulated link (--link-gbps / --link-latency-us) needs the CPU backend: a host "
              "sleep cannot pace a GPU stream (device " << in_->name() << ")");
    DPB_CHECK(rank_ >= 0 && rank_ < fab_->size(),
              "emulated link: rank " << rank_ << " outside the fabric's " << fab_->size()
                                     << " ranks");
  }
  int rank() const override { return rank_; }
  std::string name() const override { return in_->name() + " + link " + fab_->spec().label(); }
  bool comm_paced() const override { return true; }

  float* alloc(size_t n, const char* what) override {
    float* p = in_->alloc(n, what);
    fab_->add_memory(p, n * sizeof(float), rank_);
    return p;
  }
  void release(float* p) override {
    fab_->remove_memory(p);
    in_->release(p);
  }
  void comm_copy(float* dst, const float* src, size_t n) override {
    paced(dst, src, n, [&] { in_->comm_copy(dst, src, n); });
  }
  void comm_reduce(float* dst, const float* src, size_t n) override {
    paced(dst, src, n, [&] { in_->comm_reduce(dst, src, n); });
  }
  // The host's issue points (link.h, "Two clocks"): a compute mark remembers when it was taken
  // (backward made a unit ready); waiting on it, or on all compute, issues the comm work then.
  int compute_mark() override {
    const auto now = LinkFabric::Clock::now();
    const int inner = in_->compute_mark();
    std::lock_guard<std::mutex> lk(marks_mu_);
    marks_.push_back({next_mark_, inner, now});
    if (marks_.size() > 4096) marks_.pop_front();  // marks never waited on
    return next_mark_++;
  }
  void comm_wait_mark(int token) override {
    Mark m{token, -1, LinkFabric::Clock::now()};
    {
      std::lock_guard<std::mutex> lk(marks_mu_);
      while (!marks_.empty() && marks_.front().token <= token) {
        if (marks_.front().token == token) m = marks_.front();
        marks_.pop_front();
      }
    }
    in_->comm_wait_mark(m.inner);
    fab_->issue(rank_, m.at);
  }
  void comm_wait_compute() override {
    in_->comm_wait_compute();
    fab_->issue(rank_, LinkFabric::Clock::now());
  }

 private:
  // A transfer between two ranks: book it, do the real work, sleep until the link delivers.
  template <class Op>
  void paced(const float* dst, const float* src, size_t n, Op op) {
    const int from = fab_->owner(src, rank_), to = fab_->owner(dst, rank_);
    if (from == to || n == 0) {  // within one rank's memory: not a link transfer
      op();
      return;
    }
    const auto done = fab_->reserve(from, to, double(n) * sizeof(float), rank_);
    op();
    link_sleep_until(done);
  }

  struct Mark {
    int token, inner;
    LinkFabric::Clock::time_point at;
  };
  std::shared_ptr<LinkFabric> fab_;
  int rank_;
  std::mutex marks_mu_;  // compute_mark (backward thread) vs comm_wait_mark (comm thread)
  std::deque<Mark> marks_;
  int next_mark_ = 0;
};

}  // namespace

std::unique_ptr<Device> with_link(std::unique_ptr<Device> inner,
                                  std::shared_ptr<LinkFabric> fabric) {
  DPB_CHECK(inner && fabric, "with_link: null device or fabric");
  return std::make_unique<LinkDevice>(std::move(inner), std::move(fabric));
}

void attach_link(std::vector<std::unique_ptr<Device>>& devs, const LinkSpec& spec) {
  if (!spec.enabled()) return;
  auto fabric = std::make_shared<LinkFabric>(int(devs.size()), spec);
  for (auto& d : devs) d = with_link(std::move(d), fabric);
}

// ---------------------------------------------------------------- cost model

// Every algorithm below runs its transfers one after another on each rank's thread (each comm
// call returns when its transfer is delivered), with no two concurrent transfers on one link.
double ring_link_cost(double n, int k, const LinkSpec& l) {  // 2(k-1) steps of one chunk each
  return k <= 1 ? 0.0 : 2.0 * (k - 1) * l.transfer_s(n / k);
}
// Rank 0 pulls and adds the k-1 peers one after another ((k-1) (L + n/G)), then puts the sum
// into them one after another (the same): 2(k-1) (L + n/G).
double naive_link_cost(double n, int k, const LinkSpec& l) {
  return k <= 1 ? 0.0 : 2.0 * (k - 1) * l.transfer_s(n);
}
// Rank r reads its chunk from peers r+1, r+2, ... in turn: at each turn every rank sends one
// chunk and receives one, so no link is shared; then the same for the gather.
double direct_link_cost(double n, int k, const LinkSpec& l) {
  return k <= 1 ? 0.0 : 2.0 * (k - 1) * l.transfer_s(n / k);
}
// Halving: log2 k exchanges of n/2, n/4, ..., n/k with a partner (full duplex); doubling: the same
// sizes back. (k a power of two; rhd refuses other k.)
double rhd_link_cost(double n, int k, const LinkSpec& l) {
  double t = 0;
  for (int d = k / 2; d >= 1; d /= 2) t += 2.0 * l.transfer_s(n * d / k);
  return t;
}

double allreduce_link_cost(const std::string& algorithm, double bytes, int k, const LinkSpec& link,
                           BackendKind kind, const std::string& tune_file) {
  const AllReduceEntry& e = find_allreduce(algorithm);  // throws naming an unknown one
  if (e.link_cost) return e.link_cost(bytes, k, link);
  if (e.name == "auto") {
    std::string why;
    for (const TuneRule& r : resolve_tuning(load_tune_file(tune_file), kind, k, &why))
      if (r.unbounded || bytes <= double(r.up_to_bytes))
        return allreduce_link_cost(r.algorithm, bytes, k, link, kind, tune_file);
  }
  std::string have;
  for (const AllReduceEntry& o : allreduce_algorithms())
    if (o.link_cost) have += (have.empty() ? "" : ", ") + o.name;
  DPB_CHECK(false, "no link cost model for all-reduce '" << algorithm << "' (have: " << have
                                                         << ", and auto)");
}

}  // namespace dpb
