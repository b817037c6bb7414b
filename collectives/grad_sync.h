// grad_sync.h: how a replica's gradients are all-reduced during a training step.
//
// Gradients of all parameters live in one flat buffer per replica, parameters in model order.
// Modes (the DDP design space):
//   per-param: one all-reduce per parameter tensor (d2l's loop over the parameter list);
//   fused:     one all-reduce over the whole flat buffer;
//   bucketed:  parameters grouped in reverse order (the order backward produces them, as PyTorch
//              DDP does) into contiguous buckets of at most bucket_mb * 1e6 bytes (a parameter
//              larger than the cap gets a bucket of its own).
// Overlap: when on, each unit (parameter or bucket) is handed to the rank's communication thread
// as soon as backward has produced all of its gradients, so communication runs while backward
// goes on; when off, all units are reduced after backward, on the calling thread. The comm thread
// calls dev.comm_wait_compute() before each unit: on CUDA that orders the unit after all compute
// issued by then, which may be more than the unit needs (the host runs ahead of the GPU). After
// each such wait the all-reduce is told when the unit's comm work was issued (AllReduce::issue:
// an emulated link's comm stream starts there; collectives/link.h, "Two clocks").
// Units are always launched in plan order (a unit whose gradients are ready waits for the units
// before it), so every rank makes the same sequence of collective calls.
// Errors: an exception in the communication thread aborts the collective (so peers do not hang)
// and is rethrown by finish(); the GradSync is then unusable.
// Implemented in collectives/grad_sync.cpp; tested by tests/test_grad_sync.cpp.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "collectives/allreduce.h"
#include "collectives/comm_queue.h"

namespace dpb {

enum class SyncMode { PerParam, Fused, Bucketed };

struct GradSyncConfig {
  SyncMode mode = SyncMode::Fused;
  bool overlap = false;
  double bucket_mb = 25.0;  // MB = 1e6 bytes
};

struct Unit {  // a contiguous range of the flat gradient buffer, reduced by one collective call
  size_t offset = 0, count = 0;
  int first_param = 0, last_param = 0;  // inclusive range of parameter indices
};

// The table of modes (the --grad-sync choices, --help, validation and tests read it). Adding a
// mode: an enum value, its plan function and one entry in grad_sync.cpp.
struct SyncModeEntry {
  std::string name;  // --grad-sync value
  std::string help;  // one line for --help
  SyncMode mode;
  // Units in launch order; offset[p] is parameter p's start in the flat buffer (P + 1 values).
  std::vector<Unit> (*plan)(const std::vector<size_t>& offset, const GradSyncConfig& cfg);
};
const std::vector<SyncModeEntry>& sync_modes();
SyncMode parse_sync_mode(const std::string& s);  // throws "--grad-sync: unknown ..." naming s
std::string to_string(SyncMode m);

// Units in launch order. param_sizes in model order (floats).
std::vector<Unit> plan_units(const std::vector<size_t>& param_sizes, const GradSyncConfig& cfg);

// Sets the barrier polling of `group` for ranks that run GradSync with cfg: with overlap each
// rank adds a communication thread that competes for the cores while ranks wait, so the polling
// is that of 2k threads (see default_barrier_spin_ns). Call before any rank runs.
void adapt_barrier_spin(CommGroup& group, const GradSyncConfig& cfg);

struct SyncTimes {
  // Measured on the device's streams (Device::make_timer: CUDA events; CPU: the host clock).
  double comm_s = 0;     // the comm stream's time inside collective calls (this rank)
  double exposed_s = 0;  // the compute stream's wait for them in finish() (CPU: time in finish())
  long calls = 0;        // collective calls
};

class GradSync {
 public:
  // grads: this rank's flat gradient buffer on its device. One GradSync per rank.
  GradSync(const GradSyncConfig& cfg, const std::vector<size_t>& param_sizes, AllReduce& ar,
           Device& dev, int rank, float* grads);
  ~GradSync() = default;
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  // Optional: finish() re-arms for the next step. Throws if communication is in flight.
  void begin_step();
  // Backward calls this once per parameter as its gradient is final (any order; normally reverse).
  void grad_ready(int param);
  // After backward: launches what is left, waits for all communication of this step, then orders
  // the compute stream after it (dev.compute_wait_comm()). Rethrows a communication error.
  void finish();
  // The steps' times so far; waits for their timed device work. Not while a step is in flight.
  const SyncTimes& times();
  void reset_times();
  // Records its all-reduces in tl (comm stream spans: algorithm, bytes, unit). No job in flight.
  void set_timeline(RankTimeline* tl) { q_.set_timeline(tl); }
  void wait_idle() { q_.wait_all(); }  // every all-reduce submitted so far has run
  const std::vector<Unit>& units() const { return units_; }

 private:
  void arm();             // reset per-step state
  void launch(int unit);  // submit the unit's all-reduce to the comm queue

  GradSyncConfig cfg_;
  std::vector<Unit> units_;
  std::vector<int> unit_of_param_;
  std::vector<int> pending_;  // per unit: params not yet ready this step
  std::vector<char> ready_;   // per param: grad_ready seen this step
  AllReduce& ar_;
  Device& dev_;
  int rank_;
  float* grads_;
  SyncTimes times_;
  std::unique_ptr<StreamTimer> exposed_timer_;  // around finish()'s wait, on the compute stream
  int launched_ = 0;
  // The units' all-reduces, in plan order: on the rank's communication thread (overlap on) or
  // inline in finish() (off). Last: destroyed (thread joined, aborting what is in flight) first.
  CommQueue q_;
};

}  // namespace dpb
