// transport_threads.cpp: the threads transport (see transport.h): k ranks that are threads of
// this process. begin() publishes a rank's buffer in a pointer table and waits at the barrier;
// a receive reads the sender's published buffer directly with the receiver's comm_copy /
// comm_reduce, a put is the sender's comm_copy into the receiver's published buffer; a fenced
// step ends with the device-ordered barrier (CPU: one host barrier; other devices: comm_record,
// host barrier, comm_wait_peer on every peer, host barrier). Given an enabled LinkSpec, the transport
// is paced by it (link.h's with_link). Tested by tests/test_allreduce.cpp (every algorithm
// runs over it) and tests/test_link.cpp (paced).
#include <atomic>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "collectives/allreduce.h"
#include "collectives/link.h"
#include "src/core/check.h"

namespace dpb {
namespace {

class ThreadTransport final : public Transport {
 public:
  ThreadTransport(int k, std::vector<Device*> devices)
      : k_(k), devs_(std::move(devices)), ptrs_(size_t(k > 0 ? k : 0), nullptr),
        host_ptrs_(size_t(k > 0 ? k : 0), nullptr), host_barrier_(k, default_barrier_spin_ns(k)),
        in_step_(size_t(k > 0 ? k : 0)) {
    DPB_CHECK(k >= 1, "CommGroup: need at least one rank, got " << k);
    DPB_CHECK(devs_.size() == size_t(k),
              "CommGroup: " << k << " ranks but " << devs_.size() << " devices");
    for (int r = 0; r < k; ++r)
      DPB_CHECK(devs_[r] != nullptr, "CommGroup: device of rank " << r << " is null");
    for (int r = 1; r < k; ++r)
      DPB_CHECK(devs_[r]->kind() == devs_[0]->kind(),
                "CommGroup: ranks 0 and " << r << " are on different backends ("
                                          << devs_[0]->name() << ", " << devs_[r]->name() << ")");
    ordered_ = devs_[0]->kind() != BackendKind::Cpu;  // devices need the event handshake
  }

  Launcher launcher() const override { return Launcher::Threads; }
  int size() const override { return k_; }
  int processes() const override { return 1; }
  bool is_local(int rank) const override { return rank >= 0 && rank < k_; }
  Device& device(int rank) const override { return *devs_[rank]; }
  BackendKind kind() const override { return devs_[0]->kind(); }
  long barrier_spin_ns() const override { return host_barrier_.spin_ns(); }
  void set_barrier_spin_ns(long ns) override { host_barrier_.set_spin_ns(ns); }

  void begin(int rank, float* buf) override {
    ptrs_[rank] = buf;  // read by peers only after the barrier below
    barrier(rank);
  }

  // Sub-group views (group_view.cpp): a view publishes here and keeps its own barrier.
  std::vector<std::unique_ptr<Transport>> split(
      const std::vector<std::vector<int>>& parts) override {
    return split_into_views(*this, parts);
  }
  void publish(int rank, float* buf) override { ptrs_[rank] = buf; }
  void watch_abort(std::function<void(const std::string& why)> wake) override {
    std::lock_guard<std::mutex> lk(why_mu_);
    wakers_.push_back(std::move(wake));
  }

  void step(int rank, std::span<const SendOp> sends, std::span<const RecvOp> recvs,
            bool fence) override {
    Device& dev = *devs_[rank];
    InStep guard(in_step_[size_t(rank)].v, dev, ordered_);  // a failed peer frees its buffers after we stop using them
    if (aborted_.load()) throw_aborted(rank);
    direct_moves(dev, ptrs_, rank, sends, recvs);
    // The receives and puts are done: senders may overwrite what they sent, receivers read puts.
    if (fence) barrier(rank);
  }
  void fence(int rank) override { barrier(rank); }

  void barrier(int rank) override {
    if (k_ == 1) {
      if (aborted_.load()) throw_aborted(rank);
      return;
    }
    Device& dev = *devs_[rank];
    if (ordered_) dev.comm_record();
    if (!host_barrier_.arrive_and_wait(board_.local_slot(rank))) throw_aborted(rank);
    if (!ordered_) return;
    for (int p = 0; p < k_; ++p)
      if (p != rank) dev.comm_wait_peer(*devs_[p]);
    if (!host_barrier_.arrive_and_wait(board_.local_slot(rank))) throw_aborted(rank);
  }

  void broadcast_host(int rank, void* data, size_t bytes, int root) override {
    host_ptrs_[rank] = data;
    host_sync(rank);
    if (rank != root && bytes > 0) std::memcpy(data, host_ptrs_[root], bytes);
    host_sync(rank);  // the root's data is no longer read
  }

  void allgather_host(int rank, const void* mine, void* all, size_t bytes) override {
    host_ptrs_[rank] = const_cast<void*>(mine);
    host_sync(rank);
    for (int p = 0; p < k_; ++p)
      if (bytes > 0) std::memcpy(static_cast<char*>(all) + size_t(p) * bytes, host_ptrs_[p], bytes);
    host_sync(rank);
  }

  void abort(int rank, const std::string& why) override {
    {
      std::lock_guard<std::mutex> lk(why_mu_);
      if (why_.empty()) why_ = "rank " + std::to_string(rank) + ": " + why;
    }
    aborted_.store(true);
    host_barrier_.abort();
    for (Device* d : devs_) d->cancel_waits("rank " + std::to_string(rank) + ": " + why);
    {  // ranks waiting at a sub-group view's barrier
      std::lock_guard<std::mutex> lk(why_mu_);
      for (auto& wake : wakers_) wake(why_);
    }
    // Peers still inside a step read or write the published buffers, which the failed rank frees
    // as its exception unwinds: wait until they have left (each sees the abort at its barrier).
    for (const InStepFlag& f : in_step_)
      while (f.v.load() != 0) std::this_thread::yield();
  }
  bool aborted() const override { return aborted_.load(); }
  std::string abort_reason() const override {
    std::lock_guard<std::mutex> lk(why_mu_);
    return why_;
  }
  // Every rank's wait slot: the watchdog sees the whole group (src/core/watchdog.h).
  WatchBoard* watch_board() override { return &board_; }

 private:
  void host_sync(int rank) {  // host memory only: no device ordering needed
    if (k_ > 1 && !host_barrier_.arrive_and_wait(board_.local_slot(rank))) throw_aborted(rank);
    if (k_ == 1 && aborted_.load()) throw_aborted(rank);
  }

  // Marks a rank inside step() (its own cache line: no traffic between ranks). Leaving by an
  // exception on a device with streams, the rank first waits for its comm stream, whose queued
  // copies may still read a peer's buffer.
  struct alignas(64) InStepFlag {
    std::atomic<int> v{0};
  };
  class InStep {
   public:
    InStep(std::atomic<int>& flag, Device& dev, bool ordered)
        : flag_(flag), dev_(dev), ordered_(ordered), exceptions_(std::uncaught_exceptions()) {
      flag_.store(1);  // seq_cst: ordered before step()'s look at aborted_ (abort: the reverse)
    }
    ~InStep() {
      if (ordered_ && std::uncaught_exceptions() > exceptions_) {
        try {
          dev_.comm_synchronize();
        } catch (...) {  // the step is failing already; its first error is the one reported
        }
      }
      flag_.store(0, std::memory_order_release);
    }
    InStep(const InStep&) = delete;
    InStep& operator=(const InStep&) = delete;

   private:
    std::atomic<int>& flag_;
    Device& dev_;
    const bool ordered_;
    const int exceptions_;
  };

  [[noreturn]] void throw_aborted(int rank) {
    std::string why;
    {
      std::lock_guard<std::mutex> lk(why_mu_);
      why = why_;
    }
    throw Error("rank " + std::to_string(rank) + ": collective aborted because " + why);
  }

  int k_;
  std::vector<Device*> devs_;
  std::vector<float*> ptrs_;      // published device buffers (begin)
  std::vector<void*> host_ptrs_;  // published host memory (broadcast_host, allgather_host)
  bool ordered_ = false;
  HostBarrier host_barrier_;
  WatchBoard board_{k_};  // after k_: sized by it
  std::atomic<bool> aborted_{false};
  std::vector<InStepFlag> in_step_;  // per rank: inside step() (see InStep)
  mutable std::mutex why_mu_;
  std::string why_;
  std::vector<std::function<void(const std::string&)>> wakers_;  // watch_abort (under why_mu_)
};

}  // namespace

void direct_moves(Device& dev, std::span<float* const> bufs, int rank,
                  std::span<const SendOp> sends, std::span<const RecvOp> recvs) {
  for (const RecvOp& r : recvs) {
    if (r.len == 0 || r.op == RecvOp::Put) continue;  // a put: the sender writes it
    const float* src = bufs[r.from] + r.src_off;
    if (r.op == RecvOp::Reduce) dev.comm_reduce(r.dst, src, r.len);
    else dev.comm_copy(r.dst, src, r.len);
  }
  for (const SendOp& s : sends)
    if (s.put_off != SendOp::kPull && s.len > 0)
      dev.comm_copy(bufs[s.to] + s.put_off, bufs[rank] + s.off, s.len);
}

// On an emulated link the k ranks share one fabric: the transport's steps are paced there, at the
// seam the MPI transport is paced at too.
std::unique_ptr<Transport> make_thread_transport(int k, std::vector<Device*> devices,
                                                 const LinkSpec& link) {
  auto t = std::make_unique<ThreadTransport>(k, std::move(devices));  // checks the devices
  if (!link.enabled()) return t;
  DPB_CHECK(t->kind() == BackendKind::Cpu,
            "the emulated link (--link-gbps / --link-latency-us) needs the CPU backend: a host "
            "sleep cannot pace a GPU stream (device " << t->device(0).name() << ")");
  auto fabric = std::make_shared<LinkFabric>(k, link);
  return with_link(std::move(t), std::move(fabric));
}

}  // namespace dpb
