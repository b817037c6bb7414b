// shard.h: sharded data parallelism (--shard), ZeRO's three stages written once over the
// reduce-scatter and all-gather of collectives/shard.h and the Device interface.
//
//   none        replicated: every rank holds parameters, gradients and optimizer state (16P bytes
//               with fp32 Adam); gradients all-reduced (GradSync).
//   optimizer   ZeRO-1: gradients all-reduced (GradSync, every --grad-sync mode, overlap); each
//               rank updates only its shard of the parameters with its shard of the optimizer
//               state; the parameters are then all-gathered. 8P + 8P/k.
//   gradients   ZeRO-2: each unit's gradients reduce-scattered as soon as backward has produced
//               them (overlap on: on the communication thread while backward goes on; off: on
//               the backward thread, in turn), into one of two gradient buckets; each rank keeps
//               its shard of the sums. 4P + 12P/k + two buckets.
//   parameters  ZeRO-3 / FSDP's full shard: parameters sharded at rest; each unit all-gathered
//               (into one of two slots) when forward, then backward, first asks for one of its
//               parameters, the next unit's gather prefetched meanwhile; gradients as ZeRO-2.
//               16P/k + two gathered units + two buckets.
// A unit is a run of whole layers (param_layers in model.h): the gradient sync plan (--grad-sync,
// --bucket-mb) over the layers, per-param becoming per layer; rank r's shard is chunk r of every
// unit (chunk_begin / chunk_size, as the collectives split a buffer), so shards differ by at most
// one float per unit. A rank's shard of parameters, gradients and optimizer state is compact: the
// chunks one after the other.
//
// Every rank makes the same sequence of collective calls in the same order (one CommQueue per
// rank): forward asks for the units in the table's order, backward in reverse; ShardedStep checks
// it and throws naming the model otherwise. A rank with no examples in a step still takes part
// (skip_forward; step_backward asks for every parameter). Tested by tests/test_shard.cpp.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "collectives/allreduce.h"
#include "collectives/comm_queue.h"
#include "collectives/grad_sync.h"
#include "collectives/shard.h"
#include "src/model/model.h"
#include "src/train/optimizer.h"

namespace dpb {

enum class ShardMode { None, Optimizer, Gradients, Parameters };

// The table of modes (--shard's choices, --help, validation, the suites read it). Adding a mode:
// an enum value, its paths in shard.cpp and one entry.
struct ShardModeEntry {
  std::string name;  // --shard value
  std::string help;  // one line for --help
  ShardMode mode;
  int zero_stage;  // DeepSpeed's name for it: 0 (replicated), 1, 2, 3
};
const std::vector<ShardModeEntry>& shard_modes();
// The entry called name; throws "--shard: unknown mode 'x' (valid: ...)".
const ShardModeEntry& find_shard_mode(const std::string& name);
const ShardModeEntry& shard_mode_entry(ShardMode m);
std::string to_string(ShardMode m);
// Sharded modes shard the optimizer state, and from gradients on the gradients.
inline bool shards_gradients(ShardMode m) { return m == ShardMode::Gradients || m == ShardMode::Parameters; }

struct AllReduceEntry;
// The entry of c's table (reduce-scatter, all-gather) that --shard `m` runs for --allreduce's
// `algorithm`; throws "--shard M: runs C with --allreduce's algorithm, and 'x' has none (valid: ...)".
const AllReduceEntry& shard_collective(ShardMode m, Collective c, const std::string& algorithm);

// How rank `rank` of k shards a model (no device needed: planners and tests use it too).
struct ShardLayout {
  int k = 1, rank = 0;
  size_t total = 0;              // the model's floats
  std::vector<size_t> param_offset;  // per parameter, in the flat layout
  std::vector<Unit> units;       // backward's (launch) order, whole layers each
  std::vector<int> unit_of_param;
  std::vector<int> forward_order;  // unit indices in the order forward uses them
  // Per unit: this rank's chunk [own_begin, + own_size) of the flat layout, and where it lies in
  // the rank's compact shard.
  std::vector<size_t> own_begin, own_size, compact;
  size_t shard_floats = 0;  // the rank's shard: sum of own_size
  size_t largest_unit = 0;  // floats of the largest unit (a gathered slot, a gradient bucket)
};
ShardLayout make_shard_layout(const std::vector<ParamInfo>& params, const GradSyncConfig& cfg,
                              int k, int rank);

// What one step of a sharded mode moves per rank: the collective calls and their floats (the
// schedule's count; comm_bytes in results files is measured by the transport).
struct ShardTraffic {
  long allreduce_calls = 0, reducescatter_calls = 0, allgather_calls = 0;
  size_t allreduce_floats = 0, reducescatter_floats = 0, allgather_floats = 0;  // whole buffers
};

// One rank's sharded step: a ParamSource for the model (parameters from the full buffer or the
// gathered slots, gradients into the full buffer or the buckets) and the update. Buffers:
// w: the full parameters (optimizer, gradients) or the rank's compact shard (parameters);
// g: the full gradients (optimizer) or the compact shard (gradients, parameters); opt: over the
// rank's shard_floats. rs, ag: the group's reduce-scatter and all-gather (shard.h).
class ShardedStep final : public ParamSource {
 public:
  ShardedStep(ShardMode mode, ShardLayout layout, CommGroup& group, AllReduce& rs, AllReduce& ag,
              Device& dev, float* w, float* g, Optimizer& opt, bool overlap);

  ShardMode mode() const { return mode_; }
  const ShardLayout& layout() const { return layout_; }

  // ParamSource.
  const float* param(int i) override;
  float* grad(int i) override;

  // A forward (training or evaluation) begins: parameters parameters' units are asked for anew.
  void begin_forward();
  // A forward without examples: gathers every unit in forward's order, as a forward would.
  void skip_forward();
  void begin_backward();
  // Parameter i's gradient is final (gradients, parameters: the unit's reduce-scatter starts
  // when its last parameter is; optimizer: GradSync's business, nothing here).
  void grad_ready(int i);
  // After backward: waits for the reduce-scatters, orders the compute stream after them.
  void finish_backward();
  // The optimizer on this rank's shard, then (optimizer, gradients) the parameters all-gathered.
  void update(float lr);

  // Forgets the gathered units (parameters), so that the next training step gathers what it uses
  // whatever ran before it (evaluation, download_full): every step sends the same bytes.
  void release_gathered();
  // parameters: this rank's chunks of the full host parameters into its shard (initialization).
  void load_shard(const float* host_full);
  // The full parameters to host (every rank calls it: parameters gathers each unit).
  void download_full(float* host_full);

  // Communication of the steps so far (comm stream time in jobs, compute stream time waiting for
  // them, jobs) and this mode's schedule per step.
  double comm_seconds() { return q_.comm_seconds(); }
  double exposed_seconds();
  long calls() const { return q_.calls(); }
  void reset_times();
  // Records its jobs (comm stream) and its exposed waits ("comm wait", compute stream) in tl.
  void set_timeline(RankTimeline* tl) { tl_ = tl, q_.set_timeline(tl); }
  void wait_idle() { q_.wait_all(); }  // every job submitted so far has run
  static ShardTraffic traffic(ShardMode mode, const ShardLayout& layout);

 private:
  int expect_unit(int i);   // the phase's next unit when i starts it (checks the order)
  void gather(int slot, int unit);
  int bucket_for(int unit);  // the gradient bucket of unit, free for backward to write
  void wait_exposed(long ticket);
  // Queues a job; inline (overlap off) the compute side stands still while it runs: exposed.
  // what, c, count, unit: the collective it runs, for its timeline span.
  long submit(CommQueue::Job job, const char* what, const AllReduce& c, size_t count, int unit);

  const ShardMode mode_;
  const ShardLayout layout_;
  CommGroup& group_;
  AllReduce &rs_, &ag_;
  Device& dev_;
  const int rank_;
  float *w_, *g_;
  Optimizer& opt_;
  std::unique_ptr<StreamTimer> exposed_timer_;
  RankTimeline* tl_ = nullptr;

  enum class Phase { Idle, Forward, Backward } phase_ = Phase::Idle;
  int pos_ = -1;  // index of the current unit in the phase's order
  struct Slot {
    Buffer buf;
    int unit = -1;
    long ticket = 0;  // the job that last wrote (gather) or read (reduce-scatter) it
  };
  Slot pslot_[2], gslot_[2];  // gathered parameters; gradient buckets
  int cur_ = -1;              // pslot_ of the current unit
  std::vector<int> pending_;  // per unit: parameters whose gradient is not final yet
  std::vector<int> launch_pos_;  // per unit: its place in backward's order
  CommQueue q_;  // last: destroyed (its thread joined) before the slots its jobs use
};

// ---- the memory and traffic models (issue 22 item 4; tested by tests/test_shard_models.cpp) ----

// A rank's model states in bytes (fp32): what ZeRO shards.
struct ShardMemory {
  size_t parameters = 0, gradients = 0, optimizer_state = 0;
  size_t total() const;
};

// ZeRO's textbook arithmetic (Rajbhandari et al., 2020) for P fp32 parameters over k ranks with
// state_floats floats of optimizer state per parameter (Adam: 2, s below; SGD: 0):
//   none        4P + 4P + 4sP            (Adam: 16P)
//   optimizer   4P + 4P + 4sP/k          (8P + 8P/k)
//   gradients   4P + 4P/k + 4sP/k        (4P + 12P/k)
//   parameters  (4P + 4P + 4sP)/k        (16P/k)
// Each sharded term rounded up (the largest rank's share of an even split).
ShardMemory zero_formula(ShardMode m, size_t P, int k, int state_floats);

// What rank L.rank actually allocates for mode m (make_replica and ShardedStep's constructor):
// its compact shard where the mode shards a state (L.shard_floats floats; the full L.total where
// it does not), plus the two gathered-parameter slots (parameters) and the two gradient buckets
// (gradients, parameters) of L.largest_unit floats each: one of each when there is one unit.
// The measured peak per category equals it (MLP; ResNet-18's BatchNorm statistics are charged
// as parameters too) with granule = the device's allocation granule (each buffer's bytes rounded
// up to it: 64 on the CPU and meta devices; the optimizer state as state_floats buffers of the
// shard, Adam's m and v); granule 1: the buffers' exact floats times 4.
ShardMemory shard_model_states(ShardMode m, const ShardLayout& L, int state_floats,
                               size_t granule = 1);

// One collective call of a training step: its collective and whole-buffer floats.
struct ShardCall {
  Collective op = Collective::AllReduce;
  size_t floats = 0;
};
// The calls every rank makes in each training step of mode m, grouped by kind (not in issue
// order): none and optimizer, an all-reduce per unit of
// GradSync's plan over the parameters (sync: its mode and bucket size); optimizer and gradients,
// an all-gather per unit of L; gradients and parameters, a reduce-scatter per unit of L;
// parameters, an all-gather per unit of L for forward and one per unit but the last two of
// forward's order (still in their slots) for backward. The reduce-scatter and all-gather calls
// and floats are ShardedStep::traffic's.
std::vector<ShardCall> shard_step_calls(ShardMode m, const ShardLayout& L,
                                        const std::vector<size_t>& param_sizes,
                                        const GradSyncConfig& sync);

}  // namespace dpb
