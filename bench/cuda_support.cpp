// cuda_support.cpp: the CUDA side of dpbench-micro (compiled to nothing without DPB_HAVE_CUDA):
// rank timers from CUDA events on a device's compute or comm stream, and the GPU, driver, CUDA,
// cuDNN and NCCL versions for the benchmark context. Host API only, so a plain C++ file.
#ifdef DPB_HAVE_CUDA
#include <cudnn.h>
#include <nccl.h>

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

std::string dotted(int v, int major_div, int minor_div) {  // 12040 -> "12.4"
  return std::to_string(v / major_div) + "." + std::to_string((v % major_div) / minor_div);
}

}  // namespace

std::unique_ptr<RankTimer> make_cuda_timer(Device& dev, TimedStream stream) {
  auto* cd = dynamic_cast<CudaDevice*>(&dev);
  DPB_CHECK(cd != nullptr, "make_cuda_timer: " << dev.name() << " is not a CUDA device");
  return std::make_unique<CudaEventTimer>(*cd, stream);
}

std::vector<std::pair<std::string, std::string>> cuda_context() {
  std::vector<std::pair<std::string, std::string>> ctx;
  const int n = cuda_device_count();
  ctx.emplace_back("gpu_count", std::to_string(n));
  if (n == 0) return ctx;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
    ctx.emplace_back("gpu_name", prop.name);
    ctx.emplace_back("gpu_memory_GiB", std::to_string(double(prop.totalGlobalMem) / (1 << 30)));
    ctx.emplace_back("gpu_compute_capability",
                     std::to_string(prop.major) + "." + std::to_string(prop.minor));
  }
  int v = 0;
  if (cudaDriverGetVersion(&v) == cudaSuccess) ctx.emplace_back("cuda_driver_version", dotted(v, 1000, 10));
  if (cudaRuntimeGetVersion(&v) == cudaSuccess) ctx.emplace_back("cuda_runtime_version", dotted(v, 1000, 10));
  const size_t cudnn = cudnnGetVersion();  // 9.x: major*10000 + minor*100 + patch
  ctx.emplace_back("cudnn_version", std::to_string(cudnn / 10000) + "." +
                                        std::to_string(cudnn % 10000 / 100) + "." +
                                        std::to_string(cudnn % 100));
  int nv = 0;
  if (ncclGetVersion(&nv) == ncclSuccess)  // >= 2.9: major*10000 + minor*100 + patch
    ctx.emplace_back("nccl_version", std::to_string(nv / 10000) + "." +
                                         std::to_string(nv % 10000 / 100) + "." +
                                         std::to_string(nv % 100));
  return ctx;
}

}  // namespace dpb::bench
#endif
