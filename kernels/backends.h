// backends.h: the table of device backends. An entry names a backend, says in one line what it is,
// whether it can run here, and makes rank r's Device. The trainer, dpbench-micro, the CLI's
// --backend choices and validation read this table. Adding a backend: its Device in its own file
// (kernels/<name>/) and one entry in backends.cpp.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "src/core/device.h"

namespace dpb {

struct DeviceOptions {
  int threads = 1;     // CPU math threads per device
  bool tf32 = false;   // CUDA: allow TF32 tensor-core math
  int gpu = -1;        // CUDA: this GPU (mod the count); -1: rank mod count (one process per GPU
                       // passes its local rank)
};

struct BackendEntry {
  std::string name;  // --backend value: backend_kind_name(kind) (src/core/device.h)
  std::string help;  // one line for --help
  BackendKind kind;  // what its devices report (the all-reduce table's "runs on" refers to it)
  std::string (*unavailable)();  // "" when this build and machine can run it, else why not
  std::unique_ptr<Device> (*make)(int rank, const DeviceOptions& opts);  // rank r's device
  // The physical devices its ranks are placed on here (CUDA: the GPUs, rank r on r mod count,
  // so more ranks than devices share them). nullptr: the ranks compute on the host's cores,
  // which they share (the projection scales a profile's compute by that sharing).
  int (*physical_devices)() = nullptr;
  // Its devices can be paced by the emulated link (collectives/link.h): their comm ops complete
  // on the calling host thread. GPU transfers use the real interconnect.
  bool emulated_link = false;
  // Its ops compute (false: the meta backend, which only allocates and counts memory): the
  // trainer then walks the schedule and reports memory, no loss, accuracy or time.
  bool runs_math = true;
};

const std::vector<BackendEntry>& backends();
// The entry called name; throws "--backend: unknown backend 'x' (valid: ...)".
const BackendEntry& find_backend(const std::string& name);
// The first entry whose devices have this kind (its name for messages: "cpu", "cuda").
const BackendEntry& backend_of_kind(BackendKind kind);
// Rank r's device on backend `b` (or the one called `name`); throws naming the backend when it
// cannot run here.
std::unique_ptr<Device> make_device(const BackendEntry& b, int rank, const DeviceOptions& opts);
std::unique_ptr<Device> make_device(const std::string& name, int rank, const DeviceOptions& opts);
// "cpu": the names of the entries whose devices the emulated link can pace, for messages.
std::string emulated_link_backends();
// k ranks' devices on backend `name` (CUDA: rank r on GPU r mod count, shared when k exceeds it).
// The one way the trainer, the benchmarks and the tests create a set of ranks.
std::vector<std::unique_ptr<Device>> make_devices(const std::string& name, int k, int threads,
                                                  bool tf32 = false);

}  // namespace dpb
