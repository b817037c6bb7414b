// make_device.cpp: devices by backend name (see device.h), used by the trainer, the benchmarks
// and the tests alike.
#include "src/core/check.h"
#include "src/core/device.h"

namespace dpb {

std::unique_ptr<Device> make_device(const std::string& backend, int rank, int gpu, int threads,
                                    bool tf32) {
  if (backend == "cpu") return make_cpu_device(rank, threads);
  if (backend == "cuda") return make_cuda_device(rank, gpu, tf32);
  DPB_CHECK(false, "unknown backend '" << backend << "' (valid: cpu, cuda)");
}

std::vector<std::unique_ptr<Device>> make_devices(const std::string& backend, int k, int threads,
                                                  bool tf32) {
  const int ngpu = backend == "cuda" ? cuda_device_count() : 0;
  DPB_CHECK(backend != "cuda" || ngpu > 0,
            "--backend cuda: no CUDA GPU found (driver or device missing); use --backend cpu");
  std::vector<std::unique_ptr<Device>> devs;
  for (int r = 0; r < k; ++r)
    devs.push_back(make_device(backend, r, ngpu > 0 ? r % ngpu : 0, threads, tf32));
  return devs;
}

}  // namespace dpb
