// backends.cpp: the backend table (see backends.h).
#include "kernels/backends.h"

#include "src/core/check.h"
#include "src/core/registry.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/async/async_device.h"
#include "kernels/cpu/cpu_device.h"
#include "kernels/meta/meta_device.h"

namespace dpb {
namespace {

std::string cpu_unavailable() { return ""; }

std::unique_ptr<Device> make_cpu(int rank, const DeviceOptions& o) {
  return make_cpu_device(rank, o.threads);
}

// "" with a usable GPU, else why not: not built, or what the CUDA runtime says (kernels/cuda).
std::string cuda_unavailable() { return cuda_unavailable_reason(); }
// Rank r on GPU r mod count (one process per rank: its local rank mod count): ranks share GPUs
// when there are more ranks than GPUs.
std::unique_ptr<Device> make_cuda(int rank, const DeviceOptions& o) {
  const int ngpu = cuda_device_count();
  DPB_CHECK(ngpu > 0, "--backend cuda: " << cuda_unavailable());
  return make_cuda_device(rank, (o.gpu >= 0 ? o.gpu : rank) % ngpu, o.tf32);
}

std::string meta_unavailable() { return ""; }
std::unique_ptr<Device> make_meta(int rank, const DeviceOptions& o) {
  return make_meta_device(rank, o.threads);
}

std::string async_unavailable() { return ""; }
std::unique_ptr<Device> make_async(int rank, const DeviceOptions& o) {
  return make_async_device(rank, o.threads);
}

}  // namespace

const std::vector<BackendEntry>& backends() {
  static const std::vector<BackendEntry> table = {
      {backend_kind_name(BackendKind::Cpu),
       "oneDNN kernels, one host thread per rank; comm ops are memcpy/adds in shared memory",
       BackendKind::Cpu, cpu_unavailable, make_cpu, nullptr, /*emulated_link=*/true},
      {backend_kind_name(BackendKind::Cuda),
       "cuDNN/cuBLAS kernels, rank r on GPU r mod count, comm and compute streams",
       BackendKind::Cuda, cuda_unavailable, make_cuda, cuda_device_count},
      {backend_kind_name(BackendKind::Async),
       "test backend: the CPU kernels run later on per-stream worker threads with random "
       "delays, as GPU streams would (kernels/async; DPB_ASYNC_SEED replays a run)",
       BackendKind::Async, async_unavailable, make_async},
      {backend_kind_name(BackendKind::Meta),
       "planning: allocates and counts what the cpu backend would (same ledger, --device-mem, "
       "out of memory), runs no math; memory of any model, batch and k in seconds",
       BackendKind::Meta, meta_unavailable, make_meta, nullptr, /*emulated_link=*/false,
       /*runs_math=*/false},
  };
  return table;
}

const BackendEntry& find_backend(const std::string& name) {
  return lookup_entry(backends(), name, "--backend", "backend");
}

const BackendEntry& backend_of_kind(BackendKind kind) {
  for (const BackendEntry& b : backends())
    if (b.kind == kind) return b;
  DPB_CHECK(false, "no backend entry for device kind " << int(kind));
}

std::unique_ptr<Device> make_device(const BackendEntry& b, int rank, const DeviceOptions& opts) {
  const std::string why = b.unavailable();
  DPB_CHECK(why.empty(), "--backend " << b.name << ": " << why);
  return b.make(rank, opts);
}

std::unique_ptr<Device> make_device(const std::string& name, int rank, const DeviceOptions& opts) {
  return make_device(find_backend(name), rank, opts);
}

std::string emulated_link_backends() {
  std::string s;
  for (const BackendEntry& b : backends())
    if (b.emulated_link) s += (s.empty() ? "" : ", ") + b.name;
  return s;
}

std::vector<std::unique_ptr<Device>> make_devices(const std::string& name, int k, int threads,
                                                  bool tf32) {
  std::vector<std::unique_ptr<Device>> devs;
  for (int r = 0; r < k; ++r) devs.push_back(make_device(name, r, DeviceOptions{threads, tf32}));
  return devs;
}

}  // namespace dpb
