// device.cpp: Device's defaults: the stream timer on the host clock, right for backends whose ops
// are complete when they return (CPU; CUDA and the async test device override make_timer), and
// host staging in plain memory (CUDA overrides it with pinned memory).
#include <chrono>
#include <new>
#include <utility>

#include "src/core/check.h"

#include "src/core/device.h"

namespace dpb {
namespace {

class HostStreamTimer final : public StreamTimer {
 public:
  void begin() override { t0_ = Clock::now(); }
  void end() override { total_ += std::chrono::duration<double>(Clock::now() - t0_).count(); }
  double seconds() override { return total_; }
  void reset() override { total_ = 0; }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point t0_ = Clock::now();
  double total_ = 0;
};

class HostStamps final : public StreamStamps {
 public:
  size_t stamp() override {
    t_.push_back(steady_seconds());
    return t_.size() - 1;
  }
  std::vector<double> take() override { return std::exchange(t_, {}); }

 private:
  std::vector<double> t_;
};

}  // namespace

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::unique_ptr<StreamStamps> Device::make_stamps(StreamKind) {
  return std::make_unique<HostStamps>();
}

float* Device::alloc_host(size_t n, const char* what) {
  float* p = new (std::nothrow) float[n ? n : 1]();
  DPB_CHECK(p, "cannot allocate " << what << ": " << n << " floats of host memory");
  return p;
}

void Device::free_host(float* p) {
  if (!p) return;
  try {
    synchronize();  // a staging copy may still use it (CPU: nothing in flight)
  } catch (...) {
    return;  // a failed device: leave it allocated rather than free memory a copy may touch
  }
  delete[] p;
}

std::unique_ptr<StreamTimer> Device::make_timer(StreamKind) {
  return std::make_unique<HostStreamTimer>();
}

}  // namespace dpb
