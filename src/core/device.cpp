// device.cpp: Device's default stream timer: the host clock, right for backends whose ops are
// complete when they return (CPU). CUDA and the async test device override make_timer.
#include <chrono>

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

}  // namespace

std::unique_ptr<StreamTimer> Device::make_timer(StreamKind) {
  return std::make_unique<HostStreamTimer>();
}

}  // namespace dpb
