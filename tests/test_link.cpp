// test_link.cpp: the emulated link (collectives/link.h): the booking of send and receive links,
// naive and ring all-reduces paced over the threads transport (exact sums, the transfers each
// algorithm makes, and never finishing sooner than the link allows), the link living in the
// transport alone (CommGroup::paced, devices unpaced), the comm stream's clock fed by GradSync with
// overlap (a late comm thread does not delay the link), the registry's cost models, a rank's
// slower links (--inject link) and each rank's link occupancy, and the checks of the options.
// The pacing seam (book_step, the paced transport's step) is tested in test_link_seam.cpp.
// Timing is only checked as a lower bound (a paced transfer must not complete early); no speed
// targets here.
// Run: ./dpb_tests --gtest_filter='Link*'
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collectives/allreduce.h"
#include "collectives/grad_sync.h"
#include "collectives/link.h"
#include "collectives/tuning.h"
#include "src/core/check.h"
#include "src/core/forwarding_device.h"
#include "tests/rank_threads.h"
#include "kernels/cpu/cpu_device.h"

namespace dpb {
namespace {

using Clock = std::chrono::steady_clock;

TEST(LinkFabric, FullDuplexLinksAndSerializedSharedLink) {
  const LinkSpec spec{8.0, 100.0};  // 1 GB/s: 1 MB takes 1 ms, plus 100 us
  LinkFabric f(3, spec);
  const auto t0 = Clock::now();
  auto secs = [&](Clock::time_point t) { return std::chrono::duration<double>(t - t0).count(); };
  const double one = spec.transfer_s(1e6);
  EXPECT_NEAR(one, 1.1e-3, 1e-12);
  // 0 -> 1 and 1 -> 0 use different links (full duplex): both finish after one transfer.
  EXPECT_NEAR(secs(f.reserve(0, 1, 1e6, 1)), one, 2e-4);
  EXPECT_NEAR(secs(f.reserve(1, 0, 1e6, 0)), one, 2e-4);
  // 2 -> 1 shares rank 1's receive link with 0 -> 1: it starts when that one's bytes are through.
  EXPECT_NEAR(secs(f.reserve(2, 1, 1e6, 1)), 2e-3 + 1e-4, 2e-4);
  EXPECT_EQ(f.transfers(), 3);
  EXPECT_DOUBLE_EQ(f.bytes(), 3e6);
}

// Stream mode (link.h, "Two clocks"): once every rank issued its work, a transfer starts at the
// last issue time, not when its thread books it, and one rank's transfers run in order.
TEST(LinkFabric, StreamModeStartsAtTheIssueNotAtTheBooking) {
  const LinkSpec spec{8.0, 100.0};
  LinkFabric f(2, spec);
  const double one = spec.transfer_s(1e6);
  const auto t0 = Clock::now();
  auto secs = [&](Clock::time_point t) { return std::chrono::duration<double>(t - t0).count(); };
  f.issue(0, t0 - std::chrono::milliseconds(50));  // issued 50 ms ago: a late-booking thread
  EXPECT_GE(secs(f.reserve(1, 0, 1e6, 0)), one);   // rank 1 has not issued: wall time
  LinkFabric g(2, spec);
  g.issue(0, t0 - std::chrono::milliseconds(50));
  g.issue(1, t0 - std::chrono::milliseconds(40));
  // Starts at the last issue (-40 ms), so it was delivered in the past: no wait.
  EXPECT_NEAR(secs(g.reserve(1, 0, 1e6, 0)), -0.040 + one, 2e-4);
  // Rank 0's next transfer follows its first on its stream (not the wall clock).
  EXPECT_NEAR(secs(g.reserve(1, 0, 1e6, 0)), -0.040 + 2 * one, 2e-4);
  // Rank 1's own stream is free: its transfer starts at the issue too (full duplex).
  EXPECT_NEAR(secs(g.reserve(0, 1, 1e6, 1)), -0.040 + one, 2e-4);
}

// Exact sums (small integers) on every rank, the number of transfers, and the time lower bound.
void check_paced(const std::string& alg, int k, size_t n, const LinkSpec& spec, long want_transfers) {
  std::vector<std::unique_ptr<Device>> devs;
  for (int r = 0; r < k; ++r) devs.push_back(make_cpu_device(r, 1));
  std::vector<Device*> raw;
  for (auto& d : devs) raw.push_back(d.get());
  // CommGroup(k, raw, spec) builds this; here the test keeps the fabric to count its transfers.
  auto fabric = std::make_shared<LinkFabric>(k, spec);
  CommGroup group(with_link(make_thread_transport(k, raw), fabric));
  EXPECT_TRUE(group.paced());
  auto ar = make_allreduce(alg, group);
  std::vector<double> secs(k);
  on_ranks(k, [&](int r) {
    Device& dev = group.device(r);
    std::vector<float> host(n);
    for (size_t i = 0; i < n; ++i) host[i] = float((r + 1) * int(i % 7 + 1));
    Buffer buf(dev, n, MemCategory::Temporaries, "link test buffer");
    dev.upload(buf.get(), host.data(), n);
    group.barrier(r);
    const auto t0 = Clock::now();
    ar->run(r, buf.get(), n);
    secs[r] = std::chrono::duration<double>(Clock::now() - t0).count();
    dev.download(host.data(), buf.get(), n);
    size_t wrong = 0;
    for (size_t i = 0; i < n; ++i) wrong += host[i] != float(k * (k + 1) / 2 * int(i % 7 + 1));
    EXPECT_EQ(wrong, 0u) << alg << " k=" << k << " rank " << r;
  });
  EXPECT_EQ(fabric->transfers(), want_transfers) << alg << " k=" << k;
  const double model = allreduce_link_cost(alg, double(n) * sizeof(float), k, spec);
  double slowest = 0;
  for (double s : secs) slowest = std::max(slowest, s);
  EXPECT_GE(slowest, 0.999 * model) << alg << " k=" << k << " finished before the link allows";
}

TEST(LinkGroup, RingIsPacedAndExact) {
  const LinkSpec spec{1.0, 500.0};
  for (int k : {2, 3, 4}) check_paced("ring", k, 3001, spec, long(k) * 2 * (k - 1));
  // Large enough that the CPU ring would pipeline it: under a link it must not (one transfer per
  // rank and step, not one per piece).
  check_paced("ring", 2, size_t(3) << 20, LinkSpec{400.0, 10.0}, 2 * 2);
}

TEST(LinkGroup, NaiveIsPacedAndExact) {
  const LinkSpec spec{1.0, 500.0};
  for (int k : {2, 3}) check_paced("naive", k, 1000, spec, 2 * (k - 1));
}

// The link lives in the transport: a group given a LinkSpec is paced (one without, or with a
// disabled one, is not), its devices are plain (their own comm ops are not link transfers) and
// its steps are paced.
TEST(LinkGroup, TheTransportCarriesTheLinkNotTheDevices) {
  auto d0 = make_cpu_device(0, 1), d1 = make_cpu_device(1, 1);
  EXPECT_FALSE(CommGroup(2, {d0.get(), d1.get()}).paced());
  EXPECT_FALSE(CommGroup(2, {d0.get(), d1.get()}, LinkSpec{}).paced());
  CommGroup group(2, {d0.get(), d1.get()}, LinkSpec{0, 30000.0});  // 30 ms a transfer
  EXPECT_TRUE(group.paced());
  EXPECT_EQ(&group.device(0), d0.get());
  EXPECT_EQ(d0->name().find("link"), std::string::npos) << d0->name();
  Buffer a(*d0, 1000, MemCategory::Temporaries, "a"), b(*d1, 1000, MemCategory::Temporaries, "b");
  auto t0 = Clock::now();
  d0->comm_copy(a.get(), b.get(), 1000);
  d0->comm_reduce(a.get(), b.get(), 1000);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 0.025);
  auto ar = make_allreduce("ring", group);
  t0 = Clock::now();
  on_ranks(2, [&](int r) { ar->run(r, (r == 0 ? a : b).get(), 1000); });
  EXPECT_GE(std::chrono::duration<double>(Clock::now() - t0).count(), 2 * 0.030);  // two steps
}

// --inject link (rank_gbps): a rank's links slower than the rest. A transfer from or to the slow
// rank runs at its G (10x the time), others at the base G; each rank's send and receive
// occupancy is the sum of what was booked from and to it.
TEST(LinkFabric, SlowRankLinksAndOccupancy) {
  LinkSpec spec{8.0, 0.0};  // 1 GB/s: 1 MB takes 1 ms
  spec.rank_gbps = {{1, 0.8}};
  EXPECT_TRUE(spec.enabled());
  EXPECT_DOUBLE_EQ(spec.gbps_of(1), 0.8);
  EXPECT_DOUBLE_EQ(spec.gbps_of(0), 8.0);
  EXPECT_EQ(spec.label(), "8 Gb/s, 0 us; rank 1 0.8 Gb/s");
  LinkFabric f(3, spec);
  const auto t0 = Clock::now();
  auto secs = [&](Clock::time_point t) { return std::chrono::duration<double>(t - t0).count(); };
  // Three transfers on disjoint links (0's send, 1's send, 2's send; 2's, 0's, 1's receive),
  // each starting when booked (at or after t0; 3 ms of slack for a thread preempted meanwhile).
  auto within = [&](Clock::time_point done, double want) {
    const double s = secs(done);
    return s >= want - 1e-9 && s < want + 3e-3;
  };
  EXPECT_TRUE(within(f.reserve(0, 2, 1e6, 2), 1e-3));
  EXPECT_TRUE(within(f.reserve(1, 0, 1e6, 0), 1e-2));  // from the slow rank: 10x
  EXPECT_TRUE(within(f.reserve(2, 1, 1e6, 1), 1e-2));  // to the slow rank: 10x
  EXPECT_NEAR(f.send_busy_seconds(0), 1e-3, 1e-12);
  EXPECT_NEAR(f.send_busy_seconds(1), 1e-2, 1e-12);
  EXPECT_NEAR(f.send_busy_seconds(2), 1e-2, 1e-12);
  EXPECT_NEAR(f.recv_busy_seconds(0), 1e-2, 1e-12);
  EXPECT_NEAR(f.recv_busy_seconds(1), 1e-2, 1e-12);
  EXPECT_NEAR(f.recv_busy_seconds(2), 1e-3, 1e-12);
  // A second 0 -> 2 queues behind the first on both links and adds its own 1 ms to each.
  f.reserve(0, 2, 1e6, 2);
  EXPECT_NEAR(f.send_busy_seconds(0), 2e-3, 1e-12);
  EXPECT_NEAR(f.recv_busy_seconds(2), 2e-3, 1e-12);
  // No base bandwidth (unlimited): only transfers touching the slow rank are paced.
  LinkSpec only;
  only.rank_gbps = {{1, 0.8}, {1, 1.6}};  // the smaller override wins
  EXPECT_TRUE(only.enabled());
  EXPECT_DOUBLE_EQ(only.busy_s(0, 2, 1e6), 0.0);
  EXPECT_DOUBLE_EQ(only.busy_s(0, 1, 1e6), 1e-2);
  EXPECT_DOUBLE_EQ(only.busy_s(1, 2, 1e6), 1e-2);
  // Overrides are checked: a rank outside the group, a bandwidth that is no bandwidth.
  EXPECT_THROW(LinkFabric(1, only), Error);
  for (double g : {0.0, -1.0, 1e-9, std::nan("")}) {
    LinkSpec bad;
    bad.rank_gbps = {{0, g}};
    EXPECT_THROW(validate_link(bad, "--link-gbps", "--link-latency-us"), Error) << g;
  }
  LinkSpec neg;
  neg.rank_gbps = {{-1, 1.0}};
  EXPECT_THROW(validate_link(neg, "--link-gbps", "--link-latency-us"), Error);
}

// A ring all-reduce over 3 threads with rank 1's links at G/10: ring sends r -> r+1, so 0 -> 1
// and 1 -> 2 run at G/10 and 2 -> 0 at G. Rank 1's send link is busy 10x rank 2's (rank 0's,
// which sends into rank 1, as long as rank 1's); only rank 1 is slow on both its links. Exact
// sums still; the group reports each rank's occupancy (0 when the group is not paced).
TEST(LinkGroup, RingWithASlowRankBooksItsLinks) {
  const int k = 3;
  const size_t n = 30000;  // three chunks of 10000 floats: 40 KB, 0.32 ms at 1 Gb/s, 3.2 ms slow
  std::vector<std::unique_ptr<Device>> devs;
  std::vector<Device*> raw;
  for (int r = 0; r < k; ++r) devs.push_back(make_cpu_device(r, 1));
  for (auto& d : devs) raw.push_back(d.get());
  EXPECT_EQ(CommGroup(k, raw).link_send_seconds(1), 0.0);
  LinkSpec spec{1.0, 0.0};
  spec.rank_gbps = {{1, 0.1}};
  CommGroup group(k, raw, spec);
  ASSERT_TRUE(group.paced());
  auto ar = make_allreduce("ring", group);
  on_ranks(k, [&](int r) {
    std::vector<float> host(n);
    for (size_t i = 0; i < n; ++i) host[i] = float((r + 1) * int(i % 7 + 1));
    Buffer buf(*raw[r], n, MemCategory::Temporaries, "ring buffer");
    raw[r]->upload(buf.get(), host.data(), n);
    group.barrier(r);
    ar->run(r, buf.get(), n);
    raw[r]->download(host.data(), buf.get(), n);
    size_t wrong = 0;
    for (size_t i = 0; i < n; ++i) wrong += host[i] != float(6 * int(i % 7 + 1));
    EXPECT_EQ(wrong, 0u) << "rank " << r;
  });
  const double chunk_fast = 10000.0 * sizeof(float) * 8 / 1e9;  // one chunk at 1 Gb/s
  const double steps = 2 * (k - 1);
  EXPECT_NEAR(group.link_send_seconds(2), steps * chunk_fast, 1e-9);
  EXPECT_NEAR(group.link_send_seconds(1), 10 * steps * chunk_fast, 1e-9);
  EXPECT_NEAR(group.link_send_seconds(1) / group.link_send_seconds(2), 10.0, 1e-6);
  EXPECT_NEAR(group.link_send_seconds(0), group.link_send_seconds(1), 1e-9);
  EXPECT_NEAR(group.link_recv_seconds(1) / group.link_recv_seconds(0), 10.0, 1e-6);
  // Send and receive together name rank 1 alone: 20 units against 11 for its neighbours.
  auto both = [&](int r) { return group.link_send_seconds(r) + group.link_recv_seconds(r); };
  EXPECT_GT(both(1), 1.5 * both(0));
  EXPECT_GT(both(1), 1.5 * both(2));
}

// A CPU device whose comm stream starts late: its host's comm thread waits `delay` before each
// unit (a thread woken late on a busy CPU, exaggerated).
class LateCommDevice final : public ForwardingDevice {
 public:
  LateCommDevice(std::unique_ptr<Device> in, std::chrono::milliseconds delay)
      : ForwardingDevice(std::move(in)), delay_(delay) {}
  void comm_wait_mark(int token) override {
    std::this_thread::sleep_for(delay_);
    in_->comm_wait_mark(token);
  }

 private:
  std::chrono::milliseconds delay_;
};

// Two clocks (link.h): with overlap, GradSync tells the group's transport when backward made each
// unit ready, so the link's comm stream starts then, not when the late comm thread books it.
// Ring at k = 2: two steps of 100 ms; the comm threads wake 300 ms after the unit was ready. On the
// stream clock the link's 200 ms passed while they slept (finish ~300 ms after grad_ready); on
// the wall clock (no issue time reached the transport) it would take 300 + 200 ms. The bound
// sits halfway, so a thread woken late on a loaded machine does not decide the test.
TEST(LinkClock, OverlapStartsTheLinkWhenBackwardMadeTheUnitReady) {
  const int k = 2;
  const std::vector<size_t> sizes = {1000};  // one parameter: one unit
  std::vector<std::unique_ptr<Device>> devs;
  std::vector<Device*> raw;
  for (int r = 0; r < k; ++r)
    devs.push_back(std::make_unique<LateCommDevice>(make_cpu_device(r, 1),
                                                    std::chrono::milliseconds(300)));
  for (auto& d : devs) raw.push_back(d.get());
  auto fabric = std::make_shared<LinkFabric>(k, LinkSpec{0, 100000.0});  // 100 ms a transfer
  CommGroup group(with_link(make_thread_transport(k, raw), fabric));
  auto ar = make_allreduce("ring", group);
  std::vector<double> secs(k);
  on_ranks(k, [&](int r) {
    Buffer grads(*raw[r], sizes[0], MemCategory::Temporaries, "grads");
    GradSync sync(GradSyncConfig{SyncMode::Fused, /*overlap=*/true, 25.0}, sizes, *ar, *raw[r], r,
                  grads.get());
    group.barrier(r);
    const auto t0 = Clock::now();
    sync.grad_ready(0);  // backward made the unit ready: the comm thread takes it from here
    sync.finish();
    secs[r] = std::chrono::duration<double>(Clock::now() - t0).count();
  });
  EXPECT_EQ(fabric->transfers(), 2 * k);
  for (int r = 0; r < k; ++r) {
    EXPECT_GE(secs[r], 0.300) << "rank " << r;
    EXPECT_LT(secs[r], 0.400) << "rank " << r << ": the link started when the comm thread woke, "
                                                 "not when backward made the unit ready";
  }
}

TEST(LinkCost, TableFormulas) {
  const LinkSpec l{8.0, 10.0};  // 1 GB/s, 10 us
  EXPECT_NEAR(allreduce_link_cost("ring", 4e6, 4, l), 6 * (10e-6 + 1e-3), 1e-12);
  EXPECT_NEAR(allreduce_link_cost("naive", 4e6, 4, l), 6 * (10e-6 + 4e-3), 1e-12);
  EXPECT_NEAR(allreduce_link_cost("direct", 4e6, 4, l), 6 * (10e-6 + 1e-3), 1e-12);
  EXPECT_NEAR(allreduce_link_cost("rhd", 4e6, 4, l), 2 * (10e-6 + 2e-3) + 2 * (10e-6 + 1e-3), 1e-12);
  EXPECT_EQ(allreduce_link_cost("ring", 4e6, 1, l), 0.0);
  EXPECT_EQ(allreduce_link_cost("rhd", 4e6, 1, l), 0.0);
  EXPECT_THROW(allreduce_link_cost("carrier-pigeon", 1, 2, l), Error);
  // auto costs what its (built-in) tuning table runs at that size.
  std::string why;
  for (double bytes : {1e3, 1e7}) {
    std::string pick;
    for (const TuneRule& r : resolve_tuning(load_tune_file(""), BackendKind::Cpu, 2, &why))
      if (pick.empty() && (r.unbounded || bytes <= double(r.up_to_bytes))) pick = r.algorithm;
    EXPECT_DOUBLE_EQ(allreduce_link_cost("auto", bytes, 2, l), allreduce_link_cost(pick, bytes, 2, l))
        << pick;
  }
  EXPECT_FALSE(LinkSpec{}.enabled());
  EXPECT_EQ(LinkSpec{}.label(), "none");
}

TEST(LinkSpec, ValidationNamesTheOption) {
  try {
    validate_link(LinkSpec{-1, 0}, "--link-gbps", "--link-latency-us");
    FAIL() << "negative bandwidth accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--link-gbps"), std::string::npos) << e.what();
  }
  EXPECT_THROW(validate_link(LinkSpec{1, -5}, "--link-gbps", "--link-latency-us"), Error);
  EXPECT_NO_THROW(validate_link(LinkSpec{0.2, 50}, "--link-gbps", "--link-latency-us"));
}

// Issue 25: a bandwidth so small that a transfer's time overflows the clock paced nothing, and a
// latency past 10 s is no link; both are refused, naming the option. The limits are accepted.
TEST(LinkSpec, ValidationBounds) {
  auto refused = [](double g, double l, const char* opt) {
    try {
      validate_link(LinkSpec{g, l}, "--link-gbps", "--link-latency-us");
    } catch (const Error& e) {
      return std::string(e.what()).find(opt) != std::string::npos;
    }
    return false;
  };
  EXPECT_TRUE(refused(1e-300, 0, "--link-gbps"));
  EXPECT_TRUE(refused(9e-7, 0, "--link-gbps"));
  EXPECT_TRUE(refused(1e300, 0, "--link-gbps"));
  EXPECT_TRUE(refused(1, 1.01e7, "--link-latency-us"));
  EXPECT_NO_THROW(validate_link(LinkSpec{1e-6, 1e7}, "--link-gbps", "--link-latency-us"));
  EXPECT_NO_THROW(validate_link(LinkSpec{1e9, 0}, "--link-gbps", "--link-latency-us"));
  EXPECT_NO_THROW(validate_link(LinkSpec{0, 0}, "--link-gbps", "--link-latency-us"));
}

}  // namespace
}  // namespace dpb
