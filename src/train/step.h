// step.h: one data-parallel training step and what surrounds it (setup per rank, broadcast,
// step, epoch statistics, evaluation), written once and called alike by the trainer
// (src/train/trainer.cpp), the overlap benchmark (bench/overlap_bench.cpp) and the tests, as
// llm.c's trainer, test and profiler call the same gpt2_forward / backward_and_reduce / update.
//
//   RankSet ranks(make_devices("cpu", k, threads), "ring");          // shared by the k ranks
//   Replica rep = make_replica(ranks[r], *ranks.group, "lenet", ModelOptions{}, max_batch, sync,
//                              *ranks.allreduce);                    // per rank
//   broadcast_params(rep, *ranks.group);                               // rank 0's w everywhere
//   train_step(rep, n, global_batch, lr);  // = step_forward, step_backward, step_sync_wait, step_update
//
// Every phase is an NVTX range ("broadcast parameters", "data", "forward", "backward",
// "gradient sync wait", "optimizer step", "evaluate") on the rank's thread and, once
// attach_timeline has given the replica a timeline, a span of it (the breakdown, --trace).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collectives/allreduce.h"
#include "collectives/grad_sync.h"
#include "src/core/device.h"
#include "src/data/dataset.h"
#include "src/model/model.h"
#include "src/core/timeline.h"
#include "src/train/inject.h"
#include "src/train/loss.h"
#include "src/train/optimizer.h"
#include "src/train/shard.h"
#include "src/train/trainer.h"

namespace dpb {

constexpr int kClasses = 10;
constexpr int kPixels = 28 * 28;

// The ranks of this process and what they share with the others. Threads: k devices, ranks 0..k-1,
// all local. Processes: this process's one rank of a group over MPI (collectives/mpi/mpi_transport.h).
// Members are destroyed in reverse order of declaration: the all-reduce before the group it uses,
// the group before the devices. Whatever uses them (replicas, whose GradSync has a communication
// thread) must be destroyed first: declare it after a RankSet.
struct RankSet {
  // link: the emulated link the transport paces its steps with (disabled: none), for threads and
  // processes alike (collectives/link.h).
  RankSet(std::vector<std::unique_ptr<Device>> devices, const std::string& allreduce,
          const AllReduceOptions& opts = {}, const LinkSpec& link = {});
  // Rank dev->rank() of `processes` processes, one rank each (MPI must be initialized).
  RankSet(std::unique_ptr<Device> dev, int processes, const std::string& allreduce,
          const AllReduceOptions& opts = {}, const LinkSpec& link = {});
  std::vector<std::unique_ptr<Device>> devs;  // the local ranks' devices
  std::unique_ptr<CommGroup> group;
  std::unique_ptr<AllReduce> allreduce;
  // The sharded modes' reduce-scatter and all-gather (--allreduce's algorithm in their tables),
  // made by add_shard_collectives().
  std::unique_ptr<AllReduce> reducescatter, allgather;
  void add_shard_collectives();
  int size() const { return int(devs.size()); }  // local ranks
  Device& operator[](int i) const { return *devs[i]; }  // local rank i (rank devs[i]->rank())
  // On a rank's failure: wakes every rank blocked in the all-reduce or the group (they throw).
  void abort(int rank, const std::string& why);

 private:
  std::string algorithm_;
  AllReduceOptions opts_;
};

// Everything one rank owns. The GradSync and the ShardedStep are declared after the buffers they
// use, so that they (and their communication threads) go first.
struct Replica {
  Device* dev = nullptr;
  // Its phases and comm jobs, per step (attach_timeline); before sync and shard, which record in it.
  std::unique_ptr<RankTimeline> timeline;
  std::unique_ptr<Model> model;
  // Parameters, gradients, batch, logits gradient, {loss, correct}. w and g hold the whole model,
  // or this rank's compact shard where --shard shards them (shard.h).
  Buffer w, g, x, y, dlogits, stats;
  std::unique_ptr<Optimizer> opt;     // its state (Adam's moments) on dev: the whole or a shard
  const LossEntry* loss = nullptr;    // of the loss table
  std::unique_ptr<FlatParams> flat;   // the model's view of w and g (replicated)
  std::unique_ptr<GradSync> sync;     // gradients all-reduced: --shard none and optimizer
  std::unique_ptr<ShardedStep> shard; // --shard optimizer, gradients, parameters
  std::vector<uint8_t> host_x, host_y;  // staging for a batch
  std::vector<float> host_w;            // end-of-epoch copy for the replica check
  float host_stats[2] = {0, 0};         // end-of-epoch {loss sum, correct}
  CommGroup* group = nullptr;           // the group its collectives run in
  uint64_t sent_begin = 0, sent_steps = 0;  // bytes this rank sent: at begin_epoch, in the steps
  std::unique_ptr<StreamTimer> data_timer;  // training data loading, on the compute stream
  const Injections* inject = nullptr;       // --inject's delays (the trainer's), or none
  int step = -1;                            // the epoch's step the trainer is in (-1: none)
  std::vector<double> link_send;  // this epoch: its emulated links' busy seconds (sent + received) after each step
  size_t num_params() const { return model->num_floats(); }
  ParamSource& params() { return shard ? static_cast<ParamSource&>(*shard) : *flat; }
};

// The model for up to max_batch examples, its buffers (parameters and gradients from the group)
// a GradSync over `ar` for rank dev.rank(), the optimizer (an entry of optimizers(), its state
// allocated on dev) and the loss (an entry of losses()).
// opts: the model's options (ModelOptions); the batch buffer holds max_batch examples of the
// model's input_size() features. shard: a sharded mode (shard.h) over rs and ag, the group's
// reduce-scatter and all-gather (RankSet::add_shard_collectives).
Replica make_replica(Device& dev, CommGroup& group, const std::string& model,
                     const ModelOptions& opts, int max_batch, const GradSyncConfig& sync,
                     AllReduce& ar, const std::string& optimizer = "sgd",
                     const std::string& loss = "xent", ShardMode shard = ShardMode::None,
                     AllReduce* rs = nullptr, AllReduce* ag = nullptr);

// Records the replica's phases (compute stream, and the host track with host_spans) and its
// comm jobs from here on in rep.timeline (the breakdown and --trace; timeline.h).
void attach_timeline(Replica& rep, bool host_spans);
// The timeline's spans since the last call, with times (waits for its comm jobs and streams).
std::vector<Span> take_timeline(Replica& rep);

// Initial parameters: rank 0's replica (sharded at rest: every replica its shard) from the host's
// full parameters (init_params). Then broadcast_params.
void load_params(Replica& rep, const std::vector<float>& host_full);
// Copies rank 0's parameters to every replica through the group's transport (every rank calls
// it; --shard parameters: nothing, each rank loaded its shard).
void broadcast_params(Replica& rep, CommGroup& group);

// Data: n examples (uint8 features, input_size() each; labels) from the host into the replica's
// batch buffers.
void load_batch(Replica& rep, const uint8_t* images, const uint8_t* labels, int n);
// Examples idx[0..n) of split: gathered on the host, then load_batch, which data_timer times
// (the gather is not in it).
void load_examples(Replica& rep, const Split& split, const int* idx, int n);

// The step, in four parts. n: this rank's examples (may be 0: it then contributes zero
// gradients). loss_scale: 1 / global batch, so that k ranks compute the same update as one.
// via (optional): the model reads its parameters (and writes its gradients) through it instead of
// rep.params(): a wrapper of rep.params(), e.g. the projection's profile clocking each first use.
void step_forward(Replica& rep, int n, float loss_scale, ParamSource* via = nullptr);
// Backward; with reduce, every parameter's gradient is handed to the GradSync as soon as it is
// final (grad_ready), which launches its all-reduce when overlap is on. Without, no communication.
// on_ready (when set; `dpbench project`'s profile clocks it): called with each parameter's index
// once its gradient is final, after the GradSync has it.
void step_backward(Replica& rep, int n, bool reduce,
                   const std::function<void(int)>& on_ready = nullptr, ParamSource* via = nullptr);
// GradSync::finish / ShardedStep::finish_backward: the gradients are summed over the ranks.
void step_sync_wait(Replica& rep);
// The replica's optimizer (sharded: on its shard, then the parameters all-gathered).
void step_update(Replica& rep, float lr);
void train_step(Replica& rep, int n, int global_batch, float lr);  // all four, reducing

// Epoch statistics: begin_epoch zeroes the replica's accumulators and times; end_steps (after
// the epoch's last step) takes the bytes this rank sent in the steps; end_epoch copies
// its parameters and accumulators to the host; epoch_stats (every rank, after its end_epoch; a
// collective over the group: rank 0's parameters are broadcast, every rank compares its own,
// the sums and differences are all-gathered) sums them and compares the replicas; the result is
// the same on every rank, with rank 0's times. steps and examples: the epoch's.
void begin_epoch(Replica& rep);
void end_steps(Replica& rep);
void end_epoch(Replica& rep);
EpochStats epoch_stats(const Replica& rep, CommGroup& group, int steps, int examples,
                       double epoch_s);

// Accuracy on split in batches of at most the model's max_batch (inference mode), or of `batch`
// when it is smaller. --shard parameters: a collective; ranks other than the one that evaluates
// call evaluate_peer with the same split and batch, taking part in the gathers (sharded modes'
// evaluation is rank 0's, as the replicated one).
double evaluate(Replica& rep, const Split& split, int batch = 0);
void evaluate_peer(Replica& rep, const Split& split, int batch);

}  // namespace dpb
