// bench.h: shared pieces of dpbench-micro (the Google Benchmark binary; see bench/main.cpp).
//
//   BenchConfig  the --dpb_* options, parsed once in main and passed down (no globals)
//   BenchEnv     what benchmarks share during one run: the config, the memory-bandwidth bound per
//                thread count (measured once, on first use) and the training images
//   RankThreads  k persistent rank threads; run(fn) runs fn(rank) on all of them at once (the
//                harness shared with the trainer and the tests: src/core/rank_threads.h)
//   CopyRig      k ranks copying large buffers: the copy-bandwidth bound (CPU memcpy, GPU d2d)
//   RankTimer    per-rank interval timer: steady_clock on the CPU, CUDA events on a GPU stream
//   DeviceSet    k devices of one backend, with a CommGroup over them
//   RigTrace     --dpb_trace: a benchmark's collective calls as comm-track spans (bench/trace.cpp)
//
// Every benchmark uses manual time: each rank times its own part after an aligning barrier and
// the iteration's time is the slowest rank's (as nccl-tests reports the slowest rank).
#pragma once
#include <benchmark/benchmark.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "collectives/allreduce.h"
#include "collectives/link.h"
#include "collectives/shard.h"
#include "src/core/device.h"
#include "src/core/rank_threads.h"
#include "src/core/timeline.h"
#include "kernels/backends.h"
#include "src/train/trainer.h"

namespace dpb::bench {

struct BenchConfig {
  // The run options shared with `dpbench train` (src/train/run_options.h: same limits and help):
  // --dpb_ranks (its --devices, a list here), --dpb_backends (--backend, a list), the overlap
  // family's --dpb_bucket_mb and --dpb_cpu_threads (threads: 0 = cores / k), --dpb_tune_file,
  // --dpb_link_gbps and --dpb_link_latency_us set these fields of `run`.
  TrainConfig run = [] {
    TrainConfig c;
    c.sync.bucket_mb = 25.0;  // overlap: bucket cap of the bucketed mode
    // The MLP's families at the notebook's width but 16 layers (67.6M parameters, 270 MB of
    // gradients a rank) unless --dpb_mlp_layers says otherwise: its 90 layers (1.5 GB a rank)
    // would not fit 8 CPU ranks in a 24 GiB host.
    c.model_opts.mlp_layers = 16;
    return c;
  }();
  std::vector<int> ranks = {1, 2, 4, 8};
  std::vector<const BackendEntry*> backends;  // empty: cpu, plus cuda when a GPU is present
  size_t max_bytes = size_t(256) << 20;        // largest all-reduce message (per rank)
  size_t max_total_bytes = size_t(1) << 30;    // k * message <= this (k = 8: 128 MiB)
  // overlap: each model's global batch (split across ranks), by --dpb_<model>_batch; a model
  // not named here uses its table entry's bench_batch.
  std::map<std::string, int> model_batch;
  std::string data_dir;                        // "": $DPBENCH_DATA or the Debian default
  // Under mpirun/srun: one rank per process (procs = the process count; 0: ranks are threads).
  // Only the all-reduce family runs then, named .../procs:<K>/...
  int procs = 0, proc_rank = 0, local_rank = 0;
  // --dpb_trace=FILE: every timed collective call of the allreduce, reducescatter, allgather and
  // gradsync families as a span of its rank's comm track, one Chrome trace file at exit ("":
  // off, no timeline is made at all).
  std::string trace_path;
};

// Fixed global training batch for the overlap benchmarks (images uint8 28x28, labels 0..9).
struct HostBatch {
  int n = 0;
  std::vector<uint8_t> images, labels;
  std::string source;  // "fashion-mnist:<dir>" or "random pixels (seed 0)"
};

class BenchEnv {
 public:
  explicit BenchEnv(BenchConfig cfg) : cfg_(std::move(cfg)) {}
  const BenchConfig& cfg() const { return cfg_; }
  // Copy bandwidth (GB/s, bytes read + written) of `threads` threads, each memcpy-ing its own
  // 64 MiB buffer with Device::comm_copy: best of 5 after a warm-up. Measured on first use and
  // cached, so every all-reduce of this run is compared with the same bound.
  double membw_bound_gbps(int threads);
  // The cross-core probe (CopyRig, cross) on k CPU ranks placed as the benchmarks' are: GB/s of
  // the neighbour's freshly written kCrossProbeBytes each rank reads, median of 7. Not cached:
  // measured next to each benchmark it explains.
  double cross_core_gbps(int k);
  // The first n training images (Fashion-MNIST when the directory exists, else random pixels).
  const HostBatch& batch(int n);

  // The framework calls a benchmark's function once per trial while it sizes the iteration count
  // (and once per repetition). The expensive setup (devices, buffers, rank threads, warm-up, the
  // correctness check) is kept here between those calls, for one benchmark at a time: a call with
  // another name frees the previous setup before making the new one. Called from the
  // framework's thread only.
  template <class T>
  T& rig(const std::string& name, const std::function<std::shared_ptr<T>()>& make) {
    if (rig_name_ != name || !rig_) {
      drop_rig();
      rig_ = make();
      rig_name_ = name;
    }
    return *static_cast<T*>(rig_.get());
  }
  void drop_rig() {  // after a failure: the next call builds a fresh setup
    rig_.reset();
    rig_name_.clear();
  }

  // A configuration left out of the run (it cannot run, or would time nothing): `base` is its
  // name without the size, `cap` the largest size it would have run (allreduce_sizes(cap)).
  // Reported by report_not_registered() once registration is over.
  void not_registered(const std::string& base, size_t cap, const std::string& why);
  // Prints, on stderr, the left-out configurations the --benchmark_filter selects, one line per
  // reason; returns how many it printed.
  size_t report_not_registered() const;

  // --dpb_trace (bench/trace.cpp). The number of benchmark `name` in the trace (1, 2, ... in the
  // order they first ran; the spans' epoch).
  bool tracing() const { return !cfg_.trace_path.empty(); }
  int trace_number(const std::string& name);
  // Spans of rank r = 0..devices.size()-1 on those devices (named in the rank's process name).
  void add_trace(std::vector<Span> spans, const std::vector<std::string>& devices);
  // Writes every span added so far to --dpb_trace; `command` is the command line.
  void write_trace(const std::string& command);

 private:
  BenchConfig cfg_;
  std::shared_ptr<void> rig_;
  std::string rig_name_;
  std::mutex mu_;
  std::map<int, double> membw_;
  std::map<int, HostBatch> batches_;
  struct Skipped {
    std::string base, why;
    size_t cap;
  };
  std::vector<Skipped> skipped_;
  std::mutex trace_mu_;  // the trace, from the framework's thread (one benchmark at a time)
  std::vector<Span> trace_;
  std::vector<std::string> trace_names_;              // benchmark number - 1 -> name
  std::vector<std::vector<std::string>> trace_devices_;  // rank -> its devices' names, in order
};

// Interval timer for one rank over Device::make_timer: CPU: host clock (device ops are
// synchronous); CUDA: events on the device's compute or comm stream; seconds() waits for the stop.
enum class TimedStream { Compute, Comm };
class RankTimer {
 public:
  virtual ~RankTimer() = default;
  virtual void start() = 0;
  virtual void stop() = 0;
  virtual double seconds() = 0;
};
std::unique_ptr<RankTimer> make_rank_timer(Device& dev, TimedStream stream);

// k ranks, each copying its own `bytes`-byte buffer with Device::comm_copy (the primitive the
// all-reduces move data with): CPU: memcpy on k threads, the memory-bandwidth bound of k ranks;
// CUDA: a device-to-device copy on each rank's comm stream (k ranks sharing a GPU share its
// memory), timed by events on that stream. Each rank's time is its own timer's (RankTimer).
constexpr size_t kMembwBytes = size_t(64) << 20;  // per rank; src + dst far exceed the L3
constexpr size_t kCrossProbeBytes = size_t(2) << 20;  // a 2-rank 4 MiB ring's chunk
// Cross-core probe (CPU, k > 1): instead of copying, every rank first rewrites its own source,
// then adds its right neighbour's (just written on the neighbour's core) into its destination
// (Device::comm_reduce: what a ring's reduce step does). Its rate is the host's price of moving
// freshly written lines between the ranks' cores, which on a VM changes from one moment to the
// next (the 2-core EPYC: 17-40 GB/s over one evening's invocations; issue 25 item 6).
class CopyRig {
 public:
  CopyRig(const BackendEntry& b, int k, size_t bytes, bool cross = false);
  double run_once();                  // one copy on every rank; the slowest rank's seconds
  double gbps(double seconds) const;  // (read + written) bytes of all ranks / seconds / 1e9
  // cross: bytes of the neighbour's buffer each rank read per second / 1e9 (slowest rank)
  double cross_gbps(double seconds) const { return double(n_ * sizeof(float)) / seconds / 1e9; }

 private:
  size_t n_;
  bool cross_;
  std::vector<double> t_;
  std::vector<std::unique_ptr<Device>> devs_;
  std::vector<Buffer> src_, dst_;
  std::vector<std::unique_ptr<RankTimer>> timers_;
  RankThreads pool_;  // last: its threads are joined before the buffers go
};


// k devices (make_devices: CUDA rank r on GPU r mod cuda_device_count(), shared GPUs when k
// exceeds it), each of capacity device_mem bytes (--dpb_device_mem; 0: the device's own), paced
// by an emulated link when `link` is enabled (collectives/link.h; CPU only), and a CommGroup
// over them.
struct DeviceSet {
  DeviceSet(const BackendEntry& b, int k, int cpu_threads, const LinkSpec& link = {},
            size_t device_mem = 0);
  std::vector<std::unique_ptr<Device>> devs;
  std::unique_ptr<CommGroup> group;
  Device& operator[](int r) { return *devs[r]; }
  int size() const { return int(devs.size()); }
  // Each rank's bytes in use now: the base from which alloc_bytes() counts.
  std::vector<size_t> in_use() const;
  // The most any rank's peak rose above its base: what a collective (or a gradient sync) made
  // after the base was taken allocated for itself, staging and scratch included (the
  // "alloc_bytes" counter).
  size_t alloc_bytes(const std::vector<size_t>& base) const;
};

// --dpb_trace for one benchmark's setup (bench/trace.cpp): a RankTimeline per rank, made by
// start() when the benchmark's timed loop first runs (warm-up and correctness check stay out of
// the trace) and emptied into the BenchEnv by collect() after each timed loop. Without
// --dpb_trace it holds nothing and tl(r) is nullptr.
struct RigTrace {
  std::vector<std::unique_ptr<RankTimeline>> tls;
  int number = 0;          // the benchmark's number (the spans' epoch)
  std::vector<int> steps;  // per rank: the next timed iteration's number (the spans' step)
  RankTimeline* tl(int r) { return tls.empty() ? nullptr : tls[size_t(r)].get(); }
  // Makes the timelines unless made or not tracing; true when it made them now.
  bool start(BenchEnv& env, const std::string& name, DeviceSet& ds);
  // take() on each rank's thread, the spans to env (nothing unless started).
  void collect(BenchEnv& env, DeviceSet& ds, RankThreads& pool);
};

// Every benchmark name, built here and parsed by scripts/benchnames.py (the one parser the
// scripts share): <family>/<backend>/<what...>/ranks:<k>[/shared][/bytes:<n>], where "shared"
// marks CUDA ranks sharing GPUs and bytes is given for sizes > 0. The membw family counts
// threads instead: membw/<backend>/copy/threads:<k>[/shared].
std::string bench_name(const std::string& family, const BackendEntry& b, const std::vector<std::string>& what,
                       int k, size_t bytes = 0);

// The all-reduce sweep's message sizes up to cap bytes: 8 B doubling, plus every model's
// gradient size (the real ones), sorted.
std::vector<size_t> allreduce_sizes(size_t cap);

// Registration, one function per benchmark family (each in its own file).
void register_membw(BenchEnv& env, const BackendEntry& b);  // allreduce_bench.cpp
// allreduce/, reducescatter/ and allgather/ (in that order): register_collective for each.
void register_allreduce(BenchEnv& env, const BackendEntry& b);
void register_collective(BenchEnv& env, const BackendEntry& b, Collective op);
// Elements of rank r's result (got, n floats) off the exact one for the benchmarks' pattern (rank
// r holds (r+1)*((i%5)+1)): all-reduce, the sum everywhere; reduce-scatter, the sum on r's shard
// only; all-gather, the owner's value everywhere.
long count_wrong_host(Collective op, const float* got, size_t n, int k, int r);
// allreduce_procs_bench.cpp: allreduce/, reducescatter/, allgather/ with one rank per process.
void register_allreduce_procs(BenchEnv& env, const BackendEntry& b);
void register_collective_procs(BenchEnv& env, const BackendEntry& b, Collective op);
void register_gradsync(BenchEnv& env, const BackendEntry& b);  // gradsync_bench.cpp
void register_overlap(BenchEnv& env, const BackendEntry& b);   // overlap_bench.cpp

// The framework's loop for a benchmark whose iterations run on the rank threads: one(r) runs one
// timed iteration on rank r and returns that rank's seconds; each framework iteration gets the
// slowest rank's time (SetIterationTime). Iterations are handed to the threads in batches (grown
// while a batch takes under ~5 ms) so that the hand-off is paid per batch, not per iteration.
// Returns the sum of the iteration times; on an exception, skips the benchmark with its message
// (check st.error_occurred()).
double run_timed_loop(benchmark::State& st, RankThreads& pool, const std::function<double(int)>& one);

// Runs body(); on a dpb::Error or other exception, skips the benchmark with its message.
// Returns false when it skipped.
bool guarded(benchmark::State& st, const std::function<void()>& body);

// The command line (flags.cpp): the --dpb_* flags taken out of argv (Google Benchmark rejects
// flags it does not know) into a BenchConfig; a bad value is exit 2 naming the flag (die).
BenchConfig parse_dpb_flags(int* argc, char** argv);
void print_usage();  // --help: our flags, then Google Benchmark's
// a is Google Benchmark's boolean flag `name` turned on ("--name", "--name=true", ...).
bool flag_on(const std::string& a, const std::string& name);
[[noreturn]] void die(const std::string& msg);  // "dpbench-micro: msg (see --help)", exit 2

}  // namespace dpb::bench
