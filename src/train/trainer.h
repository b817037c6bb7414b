// trainer.h: data-parallel training, written once over Device, AllReduce and GradSync.
//
// k ranks, one host thread each (or, under mpirun/srun, one process each: cfg.procs), each with
// its own device and model replica. Every global
// minibatch (one shuffle per epoch from the seed, so the batches are the same for every k) is
// split into k contiguous shards whose sizes differ by at most one; each rank computes the loss
// (normalized by the global batch size, so k ranks compute the same update as one) and gradients
// on its shard; gradients are all-reduced (an algorithm and a mode of the tables in
// collectives/registry.h and grad_sync.h, with or without overlap); every replica takes the
// identical SGD step. Parameters are broadcast from rank 0 at the start; at the end of every
// epoch all replicas are compared. All cross-rank work goes through the CommGroup's transport.
// Process mode: every process runs train(); only rank 0's result has the epochs, and on_epoch is
// called on rank 0 only.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collectives/grad_sync.h"
#include "collectives/link.h"
#include "src/core/cpu_info.h"
#include "src/core/memory.h"
#include "src/core/watchdog.h"
#include "src/data/dataset.h"
#include "src/model/model.h"
#include "src/train/breakdown.h"
#include "src/train/inject.h"
#include "src/train/shard.h"

namespace dpb {

// Where the ranks live when each is a process (started by mpirun or srun; src/core/launcher.h and
// collectives/mpi/mpi_transport.h): size 0 means the ranks are threads of this process.
struct ProcessPlace {
  int size = 0;        // processes (= ranks = --devices); 0: thread mode
  int rank = 0;        // this process's rank
  int local_rank = 0;  // among the processes of this node: picks the GPU (local_rank mod GPUs)
  int local_size = 1;  // processes on this node: share the cores (CPU math threads)
  bool active() const { return size > 0; }
};

struct TrainConfig {
  std::string model = "lenet";
  ModelOptions model_opts;            // --mlp-layers, --mlp-hidden, --mlp-input
  std::string optimizer = "sgd";      // a name of the optimizer table (sgd, adam)
  std::string loss = "xent";          // a name of the loss table (xent, mse)
  std::string data = "fashion-mnist"; // fashion-mnist, or synthetic (the notebook's batch of ones)
  std::string backend = "cpu";  // a name of kernels/backends.h's table ("auto" resolved)
  int devices = 1;
  int batch = 256;  // global
  double lr = 0.2;
  int epochs = 10;
  double warmup_epochs = 0;  // Goyal et al.: lr ramps linearly from lr/devices to lr
  std::string allreduce = "ring";  // a name of collectives/registry.h's table
  std::string tune_file;           // --allreduce auto: tuning table ("": the compiled-in default)
  GradSyncConfig sync;
  ShardMode shard = ShardMode::None;  // --shard: replicated, or ZeRO-1/2/3 (src/train/shard.h)
  uint64_t seed = 0;
  int threads = 0;  // CPU math threads per device; 0: cores / devices, at least 1
  bool tf32 = false;
  // Each device's capacity in bytes (--device-mem): an allocation past it fails with OutOfMemory
  // as on a device of that size. 0: the device's own memory only.
  size_t device_mem = 0;
  LinkSpec link;  // emulated link between ranks (CPU backend); disabled: real memory copies
  bool progress = true;  // progress lines on stderr during long epochs
  ProcessPlace procs;    // one rank per process (MPI initialized by the caller), or threads
  Injections inject;     // --inject: delays and slow links on purpose (inject.h)
  bool trace = false;    // keep every rank's spans (host track too) for --trace (TrainResult::trace)
  bool breakdown = true; // --breakdown: record every rank's phases (off: no timeline, no breakdown)
  // --allow-divergence: an epoch whose loss or parameters are not finite (divergence.h) ends the
  // run with that epoch marked diverged, as a result; off: train() throws Diverged (CLI: exit 4).
  bool allow_divergence = false;
  // --timeout: the watchdog's (src/core/watchdog.h; 0: off). The front end runs the watchdog;
  // the trainer flags an epoch with a wait past stall_warn_s(timeout_s) (EpochStats::stalled_s).
  double timeout_s = kDefaultTimeoutS;
  Launcher launcher() const { return procs.active() ? Launcher::Mpi : Launcher::Threads; }
};

struct EpochStats {
  int epoch = 0;  // 1-based
  double train_loss = 0, train_acc = 0, test_acc = 0;
  double epoch_s = 0, images_per_s = 0;
  double data_s = 0, compute_s = 0, comm_s = 0, exposed_comm_s = 0;
  long comm_calls = 0;
  // Bytes this rank (rank 0 in results) sent per training step, as its transport counted them
  // (CommGroup::sent_bytes; library collectives: their ring-equivalent count).
  double comm_bytes = 0;
  double lr_end = 0;
  bool replicas_in_sync = false;
  double max_replica_diff = 0;
  // Device memory so far: the highest peak over the ranks (threads: every rank; processes: this
  // process's) and its breakdown by category at that peak.
  MemoryUsage peak_mem;
  int peak_mem_rank = 0;
  // Every rank's peak so far (index: rank), gathered by epoch_stats before evaluation: what the
  // processes of other ranks report (this process's own ranks are read again after it).
  std::vector<MemoryUsage> rank_peaks;
  // Every rank's phases this epoch (breakdown.h): spreads over ranks, step percentiles, straggler.
  BreakdownStats breakdown;
  // Its loss or parameters were not finite (divergence.h): training stopped after it. The first
  // step (0-based) whose loss was not finite and its rank; -1: none (the parameters went).
  bool diverged = false;
  int diverged_step = -1, diverged_rank = -1;
  // The longest wait of any rank for its peers in the epoch, seconds, when it passed the
  // watchdog's warn threshold (stall_warn_s: a stalled rank stretched the epoch, whose time is
  // then no measurement); 0: none did.
  double stalled_s = 0;
  // The machine around the epoch (src/core/cpu_info.h: load, steal, others' runnable tasks) and
  // the CPU each of this process's rank threads ran on (issue 25 items 5, 6).
  CpuLoad load;
  std::vector<int> rank_cpus;
};

struct TrainResult {
  std::vector<EpochStats> epochs;
  std::vector<float> final_params;  // replica 0, model order
  std::vector<std::string> device_names;
  std::string allreduce_resolved;  // what --allreduce ran, e.g. "auto: direct<=32KiB; ring (...)"
  bool shared_gpu = false;
  // Each local rank's device memory at its peak (by category), in rank order; device_names'.
  std::vector<MemoryUsage> peak_mem;
  // Every rank's steps of every epoch so far (breakdown.h), sorted by (epoch, step, rank); whether
  // their waits are known (the ranks' comm jobs matched one to one).
  std::vector<StepRow> steps;
  bool waits_known = true;
  // cfg.trace: every rank's spans (timeline.h), rank 0's clock.
  std::vector<Span> trace;
};

// Throws dpb::Error naming the argument when the configuration is invalid (before any work).
void validate(const TrainConfig& cfg, const Dataset& data);

// Makes rank r's device (threads: the CPU math threads it should use). Empty: the backend's
// devices (make_devices); tests pass one to wrap them (e.g. to inject a failure).
using DeviceFactory = std::function<std::unique_ptr<Device>(int rank, int threads)>;

// on_epoch is called (on the calling thread's behalf, from rank 0) after each epoch, with the
// result so far: its run-level fields (allreduce_resolved, shared_gpu, device_names) are set, and
// epochs ends with this one. A caller can so write each epoch's results as it finishes. When a
// rank fails, every rank is stopped and the first error is rethrown; an OutOfMemory (memory.h) is
// rethrown as one, its message ending with the batch per device. An epoch that diverged
// (divergence.h) is the last: on_epoch sees it marked, then train() throws Diverged naming it, or
// with cfg.allow_divergence returns the epochs so far.
using EpochCallback = std::function<void(const EpochStats&, const TrainResult& so_far)>;
TrainResult train(const TrainConfig& cfg, const Dataset& data, const EpochCallback& on_epoch = {},
                  const DeviceFactory& make_dev = {});

}  // namespace dpb
