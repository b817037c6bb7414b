// divergence.h: a run whose loss or parameters stop being finite ends as a result, not in silence
// (issue 25 item 3). Every rank keeps its running loss sum after each step on its device (one
// float copied on the compute stream: no synchronization in the steps); at the end of the epoch,
// where the trainer synchronizes anyway, each rank looks at its epoch loss sum and its parameters
// and the ranks gather what they saw, so that they all decide alike and stop together.
//
// What is checked: the loss per step, and the parameters once per epoch. A non-finite gradient
// need not show in the next loss (a ReLU maps NaN inputs to 0), but it always leaves a non-finite
// parameter (SGD: w - lr*g; Adam: its moments), and a non-finite parameter stays so (NaN and inf
// absorb every later update): the end-of-epoch parameter check catches every non-finite gradient.
//
//   DivergenceWatch watch(dev, steps);           // per rank, once
//   watch.after_step(rep, s);                    // after each train_step
//   watch.check(rep, group, st);                 // every rank, after epoch_stats (a collective)
//   if (st.diverged) throw Diverged(divergence_message(st, steps));  // unless --allow-divergence
#pragma once
#include <string>

#include "src/core/check.h"
#include "src/train/step.h"

namespace dpb {

// Training diverged and --allow-divergence is off (the CLI exits 4). The message names the epoch,
// the first step whose loss was not finite and its rank (or the parameters, when the loss stayed
// finite).
struct Diverged : Error {
  using Error::Error;
};

class DivergenceWatch {
 public:
  // steps: the epoch's; the slots are temporaries on dev (one float per step).
  DivergenceWatch(Device& dev, int steps);
  // After step s of the epoch: rep's running loss sum into slot s (on dev's compute stream).
  void after_step(const Replica& rep, int s);
  // Every rank, after end_epoch and epoch_stats (st the same on every rank): gathers each rank's
  // first non-finite step (its slots are read only when its epoch sum is not finite) and whether
  // its parameters are finite; sets st.diverged, st.diverged_step and st.diverged_rank alike on
  // every rank.
  void check(const Replica& rep, CommGroup& group, EpochStats& st);

 private:
  Device* dev_;
  int steps_;
  Buffer sums_;
};

// "training diverged in epoch E at step S/N (rank R's loss first not finite; the epoch's loss L)",
// or the parameters' variant when no loss was non-finite. steps: the epoch's.
std::string divergence_message(const EpochStats& st, int steps);

}  // namespace dpb
