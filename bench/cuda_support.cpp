// cuda_support.cpp: the CUDA side of dpbench-micro (compiled to nothing without DPB_HAVE_CUDA):
// rank timers from CUDA events on a device's compute or comm stream (the GPU and library versions
// of the benchmark context are src/core/machine_info.h's). Host API only, so a plain C++ file.
#ifdef DPB_HAVE_CUDA
#include <string>

#include "bench/bench.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_device.h"

namespace dpb::bench {
namespace {

class CudaEventTimer final : public RankTimer {
 public:
  CudaEventTimer(CudaDevice& dev, TimedStream s)
      : gpu_(dev.gpu()), stream_(s == TimedStream::Comm ? dev.comm_stream() : dev.compute_stream()) {
    CUDA_CHECK(cudaSetDevice(gpu_));
    CUDA_CHECK(cudaEventCreate(&start_));
    CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~CudaEventTimer() override {
    cudaSetDevice(gpu_);  // best effort in a destructor
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  void start() override {
    CUDA_CHECK(cudaSetDevice(gpu_));  // the calling rank thread may have another current device
    CUDA_CHECK(cudaEventRecord(start_, stream_));
  }
  void stop() override {
    CUDA_CHECK(cudaSetDevice(gpu_));
    CUDA_CHECK(cudaEventRecord(stop_, stream_));
  }
  double seconds() override {
    CUDA_CHECK(cudaSetDevice(gpu_));
    CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return double(ms) * 1e-3;
  }

 private:
  int gpu_;
  cudaStream_t stream_;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

}  // namespace

std::unique_ptr<RankTimer> make_cuda_timer(Device& dev, TimedStream stream) {
  auto* cd = dynamic_cast<CudaDevice*>(&dev);
  DPB_CHECK(cd != nullptr, "make_cuda_timer: " << dev.name() << " is not a CUDA device");
  return std::make_unique<CudaEventTimer>(*cd, stream);
}

}  // namespace dpb::bench
#endif
