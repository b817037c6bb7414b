// cuda_streams.cpp: CudaDevice's streams and events: the host waits (polled, so that a failed
// peer or an asynchronous error of a library on the streams ends them with an error instead of a
// hang), the stream timers, and the ordering between the compute and comm streams and the ranks
// (comm_wait_compute, marks, comm_record / comm_wait_peer). Host code only.
// Built with -DDPB_CUDA=ON; tested by tests/test_cuda_device.cpp.
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kernels/cuda/cuda_device.h"

namespace dpb {

namespace {

// Timing events recycled: take() reuses a returned event or creates one; the pool destroys them
// all with itself (on its GPU). CudaStreamTimer and CudaStamps own one each.
class EventPool {
 public:
  explicit EventPool(int gpu) : gpu_(gpu) {}
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;
  ~EventPool() {
    if (cudaSetDevice(gpu_) != cudaSuccess) (void)cudaGetLastError();
    for (cudaEvent_t e : free_) (void)cudaEventDestroy(e);
  }
  cudaEvent_t take() {
    if (!free_.empty()) {
      cudaEvent_t e = free_.back();
      free_.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    CUDA_CHECK(cudaEventCreate(&e));  // with timing
    return e;
  }
  void give(cudaEvent_t e) {
    if (e) free_.push_back(e);
  }

 private:
  int gpu_;
  std::vector<cudaEvent_t> free_;
};

// Work on one stream timed by CUDA events: intervals are harvested as their end events complete
// (cudaEventQuery), so events are recycled and the host never blocks until seconds().
class CudaStreamTimer final : public StreamTimer {
 public:
  CudaStreamTimer(CudaDevice& dev, cudaStream_t st) : dev_(dev), st_(st), pool_(dev.gpu()) {}
  ~CudaStreamTimer() override {
    for (auto& [a, b] : pending_) pool_.give(a), pool_.give(b);
    pool_.give(open_);
  }
  void begin() override {
    CUDA_CHECK(cudaSetDevice(dev_.gpu()));
    if (!open_) open_ = pool_.take();
    CUDA_CHECK(cudaEventRecord(open_, st_));
  }
  void end() override {
    DPB_CHECK(open_, "stream timer on " << dev_.name() << ": end() without begin()");
    CUDA_CHECK(cudaSetDevice(dev_.gpu()));
    cudaEvent_t e = pool_.take();
    CUDA_CHECK(cudaEventRecord(e, st_));
    pending_.emplace_back(open_, e);
    open_ = nullptr;
    harvest(false);
  }
  double seconds() override {
    harvest(true);
    return total_;
  }
  void reset() override {
    harvest(true);
    total_ = 0;
  }

 private:
  void harvest(bool wait) {
    CUDA_CHECK(cudaSetDevice(dev_.gpu()));
    while (!pending_.empty()) {
      auto [a, b] = pending_.front();
      if (wait) {
        dev_.wait_event(b, "stream timer");
      } else {
        const cudaError_t q = cudaEventQuery(b);
        if (q == cudaErrorNotReady) break;
        CUDA_CHECK(q);
      }
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
      total_ += double(ms) * 1e-3;
      pending_.pop_front();
      pool_.give(a);
      pool_.give(b);
    }
  }

  CudaDevice& dev_;
  cudaStream_t st_;
  cudaEvent_t open_ = nullptr;
  std::deque<std::pair<cudaEvent_t, cudaEvent_t>> pending_;
  EventPool pool_;  // destroyed after the destructor body has given back pending_ and open_
  double total_ = 0;
};

}  // namespace

void CudaDevice::synchronize() {
  bind();
  wait_stream(compute_, "synchronize (compute stream)");
  wait_stream(comm_, "synchronize (comm stream)");
}

void CudaDevice::poll(const std::function<cudaError_t()>& query, const char* what) {
  const auto t0 = std::chrono::steady_clock::now();
  for (unsigned i = 0;; ++i) {
    const cudaError_t e = query();
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) {
      (void)cudaGetLastError();
      DPB_CHECK(false, name_ << ": " << what << ": " << cudaGetErrorName(e) << ": "
                             << cudaGetErrorString(e));
    }
    if (cancelled_.load()) {
      std::lock_guard<std::mutex> lk(cancel_mu_);
      DPB_CHECK(false, name_ << ": " << what << " abandoned because " << cancel_why_);
    }
    if (i % 64 == 0) {
      const std::string async = async_error();
      DPB_CHECK(async.empty(), name_ << ": " << what << ": " << async);
    }
    // Yield for the first ~50 us (short kernels), then sleep in 20 us steps.
    if (std::chrono::steady_clock::now() - t0 < std::chrono::microseconds(50))
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

void CudaDevice::wait_event(cudaEvent_t ev, const char* what) {
  poll([ev] { return cudaEventQuery(ev); }, what);
}

void CudaDevice::wait_stream(cudaStream_t st, const char* what) {
  poll([st] { return cudaStreamQuery(st); }, what);
}

void CudaDevice::set_async_error_probe(std::function<std::string()> probe) {
  std::lock_guard<std::mutex> lk(probe_mu_);  // waits for a running call of the old probe
  probe_ = std::move(probe);
}

std::string CudaDevice::async_error() {
  std::lock_guard<std::mutex> lk(probe_mu_);
  return probe_ ? probe_() : std::string();
}

void CudaDevice::cancel_waits(const std::string& why) {
  {
    std::lock_guard<std::mutex> lk(cancel_mu_);
    if (cancel_why_.empty()) cancel_why_ = why;
  }
  cancelled_.store(true);
}

namespace {
// Points on a stream as CUDA events; take() records an anchor event after them, waits for it and
// reads the host clock: each point's time is the anchor's minus the events' elapsed time (the
// anchor completes as the host's wait returns, to within the wake-up: microseconds).
class CudaStamps final : public StreamStamps {
 public:
  CudaStamps(CudaDevice& dev, cudaStream_t st) : dev_(dev), st_(st), pool_(dev.gpu()) {}
  ~CudaStamps() override {
    for (cudaEvent_t e : used_) pool_.give(e);
  }
  size_t stamp() override {
    CUDA_CHECK(cudaSetDevice(dev_.gpu()));
    cudaEvent_t e = pool_.take();
    CUDA_CHECK(cudaEventRecord(e, st_));
    used_.push_back(e);
    return used_.size() - 1;
  }
  std::vector<double> take() override {
    std::vector<double> t(used_.size());
    if (used_.empty()) return t;
    CUDA_CHECK(cudaSetDevice(dev_.gpu()));
    cudaEvent_t anchor = pool_.take();
    CUDA_CHECK(cudaEventRecord(anchor, st_));
    dev_.wait_event(anchor, "timeline stamps");
    const double now = steady_seconds();
    for (size_t i = 0; i < used_.size(); ++i) {
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, used_[i], anchor));
      t[i] = now - double(ms) * 1e-3;
      pool_.give(used_[i]);
    }
    pool_.give(anchor);
    used_.clear();
    return t;
  }

 private:
  CudaDevice& dev_;
  cudaStream_t st_;
  EventPool pool_;  // destroyed after the destructor body has given back used_
  std::vector<cudaEvent_t> used_;
};
}  // namespace

std::unique_ptr<StreamStamps> CudaDevice::make_stamps(StreamKind s) {
  return std::make_unique<CudaStamps>(*this, s == StreamKind::Comm ? comm_ : compute_);
}

std::unique_ptr<StreamTimer> CudaDevice::make_timer(StreamKind s) {
  return std::make_unique<CudaStreamTimer>(*this, s == StreamKind::Comm ? comm_ : compute_);
}

void CudaDevice::comm_wait_compute() {
  bind();
  CUDA_CHECK(cudaEventRecord(ev_compute_, compute_));
  CUDA_CHECK(cudaStreamWaitEvent(comm_, ev_compute_, 0));
}

int CudaDevice::compute_mark() {
  bind();
  const int token = int(next_mark_.fetch_add(1) % unsigned(kMarks));
  CUDA_CHECK(cudaEventRecord(marks_[token], compute_));
  return token;
}

void CudaDevice::comm_wait_mark(int token) {
  if (token < 0 || token >= kMarks) return comm_wait_compute();
  bind();
  CUDA_CHECK(cudaStreamWaitEvent(comm_, marks_[token], 0));
}

void CudaDevice::compute_wait_comm() {
  bind();
  CUDA_CHECK(cudaEventRecord(ev_comm_, comm_));
  CUDA_CHECK(cudaStreamWaitEvent(compute_, ev_comm_, 0));
}

void CudaDevice::comm_record() {
  bind();
  CUDA_CHECK(cudaEventRecord(ev_peer_, comm_));
}

void CudaDevice::comm_wait_peer(Device& peer) {
  auto* p = dynamic_cast<CudaDevice*>(&peer);
  DPB_CHECK(p, "comm_wait_peer on " << name_ << ": peer rank " << peer.rank()
                                    << " is not a CUDA device");
  if (p == this) return;  // own comm stream is already in order
  bind();
  // Waits for the peer's most recent comm_record(); the event may belong to another GPU.
  CUDA_CHECK(cudaStreamWaitEvent(comm_, p->ev_peer_, 0));
}

void CudaDevice::comm_synchronize() {
  bind();
  wait_stream(comm_, "comm_synchronize");
}

}  // namespace dpb
