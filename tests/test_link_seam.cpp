// test_link_seam.cpp: the one pacing seam of the emulated link (collectives/link.h): book_step
// books the same schedule the same under threads (one shared fabric) and processes (a fabric per
// process), each process books its own rank's occupancy exactly, the paced transport's step
// sleeps before the fence, and a shared fabric is booked move by move. Timing is only checked as
// a lower bound or within wide bounds; no speed targets here. The fabric, paced all-reduces, cost
// models and options are tested in test_link.cpp.
// Run: ./dpb_tests --gtest_filter='LinkSeam*'
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/link.h"
#include "src/core/check.h"
#include "src/core/transport.h"
#include "tests/rank_threads.h"

namespace dpb {
namespace {

using Clock = std::chrono::steady_clock;

// A transport that records what the paced transport asks of it (ranks may call it at once: the
// log is locked); is_local(r): r is in `local`.
class ViewTransport final : public Transport {
 public:
  ViewTransport(int k, std::vector<int> local) : k_(k), local_(std::move(local)) {}
  Launcher launcher() const override { return Launcher::Mpi; }
  int size() const override { return k_; }
  int processes() const override { return k_ - int(local_.size()) + 1; }
  bool is_local(int r) const override {
    return std::find(local_.begin(), local_.end(), r) != local_.end();
  }
  Device& device(int) const override { throw Error("ViewTransport has no devices"); }
  BackendKind kind() const override { return BackendKind::Cpu; }
  void begin(int, float*) override {}
  void step(int, std::span<const SendOp>, std::span<const RecvOp>, bool fence) override {
    std::lock_guard<std::mutex> lk(mu_);
    log.push_back(fence ? "step+fence" : "step");
  }
  void fence(int) override {
    std::lock_guard<std::mutex> lk(mu_);
    log.push_back("fence");
  }
  void barrier(int) override {}
  void broadcast_host(int, void*, size_t, int) override {}
  void allgather_host(int, const void*, void*, size_t) override {}
  void abort(int, const std::string&) override {}
  bool aborted() const override { return false; }
  std::vector<std::string> log;

 private:
  std::mutex mu_;
  int k_;
  std::vector<int> local_;
};

// One step of a schedule, as rank r lists it.
struct StepOps {
  std::vector<SendOp> sends;
  std::vector<RecvOp> recvs;
};

// Threads and processes are paced by the same code (book_step): the same step schedule booked
// on one fabric shared by k local ranks (threads) and on k fabrics that each see one local rank
// (processes) ends at the same times, on the emulated streams (deterministic: issued at t0; times to the nanosecond).
TEST(LinkSeam, ThreadsAndProcessesBookTheSameSchedule) {
  const LinkSpec spec{8.0, 100.0};  // 1 MB: 1.1 ms
  const int k = 3;
  const size_t n = 250000;  // floats: 1 MB
  const double one = spec.transfer_s(double(n) * sizeof(float));
  float dst = 0;
  // Ring reduce-scatter step: receive (and add) from the left, the right neighbour pulls from us.
  std::vector<StepOps> ring(k), naive_gather(k), naive_put(k);
  for (int r = 0; r < k; ++r) {
    ring[r].recvs.push_back({(r + k - 1) % k, 0, &dst, n, RecvOp::Reduce});
    ring[r].sends.push_back({(r + 1) % k, 0, n});
  }
  // Naive: rank 0 pulls every peer's buffer, then puts the sum into each.
  for (int p = 1; p < k; ++p) {
    naive_gather[0].recvs.push_back({p, 0, &dst, n, RecvOp::Reduce});
    naive_gather[p].sends.push_back({0, 0, n});
    naive_put[0].sends.push_back({p, 0, n, 0});
    naive_put[p].recvs.push_back({0, 0, &dst, n, RecvOp::Put});
  }
  const auto t0 = Clock::now();
  auto secs = [&](Clock::time_point t) { return std::chrono::duration<double>(t - t0).count(); };
  for (const auto* sched : {&ring, &naive_gather, &naive_put}) {
    LinkFabric shared(k, spec);
    std::vector<int> all;
    for (int r = 0; r < k; ++r) all.push_back(r), shared.issue(r, t0);
    ViewTransport threads(k, all);
    for (int r = 0; r < k; ++r) {
      LinkFabric own(k, spec);  // this process's view
      for (int q = 0; q < k; ++q) own.issue(q, t0);
      ViewTransport process(k, {r});
      const StepOps& s = (*sched)[r];
      const auto th = book_step(shared, threads, r, s.sends, s.recvs);
      const auto pr = book_step(own, process, r, s.sends, s.recvs);
      // The rank that moves data ends at the same time under both; a rank whose peer moves its
      // data returns at once under threads (the peer's thread waits) and waits for that peer's
      // move under processes (its own view of the link).
      const bool moves = (!s.recvs.empty() && s.recvs[0].op != RecvOp::Put) ||
                         (!s.sends.empty() && s.sends[0].put_off != SendOp::kPull);
      if (moves) EXPECT_EQ(th, pr) << "rank " << r;
      else EXPECT_NEAR(secs(pr), one, 1e-8) << "rank " << r;
      const double want = sched == &ring ? one : (r == 0 ? (k - 1) * one : one);
      EXPECT_NEAR(secs(pr), want, 1e-8) << "rank " << r;
    }
    EXPECT_EQ(shared.transfers(), sched == &ring ? k : k - 1);  // each move booked once
  }
}

// Processes (--inject link under mpirun): each process's fabric books every transfer from or to
// its own rank, so its own rank's link occupancy equals what the threads' shared fabric books
// for that rank, rank 1's links slow included (a ring step, and naive's gather and put).
TEST(LinkSeam, EachProcessBooksItsOwnRanksOccupancyExactly) {
  LinkSpec spec{8.0, 0.0};
  spec.rank_gbps = {{1, 0.8}};
  const int k = 3;
  const size_t n = 250000;  // floats: 1 MB, 1 ms at 8 Gb/s, 10 ms from or to rank 1
  float dst = 0;
  std::vector<StepOps> ring(k), naive(k);
  for (int r = 0; r < k; ++r) {
    ring[r].recvs.push_back({(r + k - 1) % k, 0, &dst, n, RecvOp::Reduce});
    ring[r].sends.push_back({(r + 1) % k, 0, n});
  }
  for (int p = 1; p < k; ++p) {
    naive[0].recvs.push_back({p, 0, &dst, n, RecvOp::Reduce});
    naive[p].sends.push_back({0, 0, n});
    naive[0].sends.push_back({p, 0, n, 0});
    naive[p].recvs.push_back({0, 0, &dst, n, RecvOp::Put});
  }
  for (const auto* sched : {&ring, &naive}) {
    LinkFabric shared(k, spec);
    std::vector<int> all;
    for (int r = 0; r < k; ++r) all.push_back(r);
    ViewTransport threads(k, all);
    for (int r = 0; r < k; ++r) book_step(shared, threads, r, (*sched)[r].sends, (*sched)[r].recvs);
    for (int r = 0; r < k; ++r) {
      LinkFabric own(k, spec);
      ViewTransport process(k, {r});
      book_step(own, process, r, (*sched)[r].sends, (*sched)[r].recvs);
      EXPECT_NEAR(own.send_busy_seconds(r), shared.send_busy_seconds(r), 1e-12) << "rank " << r;
      EXPECT_NEAR(own.recv_busy_seconds(r), shared.recv_busy_seconds(r), 1e-12) << "rank " << r;
    }
  }
  // The ring step: 0 -> 1 and 1 -> 2 at 0.8 Gb/s, 2 -> 0 at 8.
  LinkFabric shared(k, spec);
  ViewTransport threads(k, {0, 1, 2});
  for (int r = 0; r < k; ++r) book_step(shared, threads, r, ring[r].sends, ring[r].recvs);
  EXPECT_NEAR(shared.send_busy_seconds(0), 1e-2, 1e-12);
  EXPECT_NEAR(shared.send_busy_seconds(1), 1e-2, 1e-12);
  EXPECT_NEAR(shared.send_busy_seconds(2), 1e-3, 1e-12);
}

// The paced transport (both launchers' seam): books, runs the inner step's moves unfenced,
// sleeps until the link delivers, then fences; a step with nothing to move does not wait.
TEST(LinkSeam, PacedStepSleepsBeforeTheFence) {
  const LinkSpec spec{0, 30000.0};  // 30 ms a transfer
  auto fabric = std::make_shared<LinkFabric>(2, spec);
  auto inner = std::make_unique<ViewTransport>(2, std::vector<int>{0});
  ViewTransport* view = inner.get();
  auto t = with_link(std::move(inner), fabric);
  EXPECT_EQ(&unpaced(*t), view);
  EXPECT_EQ(&unpaced(*view), view);
  float dst = 0;
  const std::vector<RecvOp> recvs{{1, 0, &dst, 10, RecvOp::Copy}};
  auto t0 = Clock::now();
  t->step(0, {}, recvs, true);
  EXPECT_GE(std::chrono::duration<double>(Clock::now() - t0).count(), 0.030);
  EXPECT_EQ(view->log, (std::vector<std::string>{"step", "fence"}));
  t->step(0, {}, {}, false);
  EXPECT_EQ(view->log.back(), "step");
  EXPECT_EQ(fabric->transfers(), 1);
}

// Threads share one fabric, whose links are booked first come, first served: each rank books and
// makes its moves one at a time, so direct's k-1 reads per step (rank r from r+1, r+2, ... in
// turn) never share a link and take k-1 transfers, as the model says (booking a whole step at
// once took 2.5x that at k = 4).
TEST(LinkSeam, SharedFabricBooksMoveByMove) {
  const int k = 4;
  // 8 MB: 80 ms of occupancy each, so that a rank's thread woken a few ms late on a loaded
  // machine stays far inside the bounds (move by move: 3 transfers; a whole step: ~7.5).
  const LinkSpec spec{0.8, 0.0};
  const size_t n = 2000000;
  const double one = spec.transfer_s(double(n) * sizeof(float));
  auto fabric = std::make_shared<LinkFabric>(k, spec);
  std::vector<int> all{0, 1, 2, 3};
  auto t = with_link(std::make_unique<ViewTransport>(k, all), fabric);
  std::vector<double> secs(k);
  const auto t0 = Clock::now();
  on_ranks(k, [&](int r) {
    float dst = 0;
    std::vector<RecvOp> recvs;
    std::vector<SendOp> sends;
    for (int j = 1; j < k; ++j) {
      recvs.push_back({(r + j) % k, 0, &dst, n, RecvOp::Reduce});
      sends.push_back({(r + k - j) % k, 0, n});
    }
    t->step(r, sends, recvs, false);
    secs[r] = std::chrono::duration<double>(Clock::now() - t0).count();
  });
  EXPECT_EQ(fabric->transfers(), k * (k - 1));
  for (int r = 0; r < k; ++r) {
    EXPECT_GE(secs[r], 0.999 * (k - 1) * one) << "rank " << r;
    EXPECT_LT(secs[r], (k + 1) * one) << "rank " << r << ": the ranks' reads shared links";
  }
}

}  // namespace
}  // namespace dpb
