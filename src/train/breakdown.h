// breakdown.h: where each rank's time goes, step by step, and which rank holds the others back.
//
// Read from the ranks' timelines (src/core/timeline.h), on each device's clock:
//   data, forward, backward, optimizer  the compute stream's phases, less the comm waits nested in
//                                       them (sharded modes wait for gathers inside forward)
//   exposed_comm   compute waiting on comm: "gradient sync wait" and the nested "comm wait"s
//   comm_busy      the comm stream's time in the step's collectives (waiting inside them included)
//   wait           waiting for peers: in each collective, the time from this rank's arrival (its
//                  comm stream reaching the call) to the last rank's arrival, summed over the step
//   comm_own       the rank's own communication: on an emulated link, the time its send and
//                  receive links were busy with its transfers (a ring's slow rank slows the
//                  sends of its predecessor too: both ends together single it out); otherwise
//                  comm_busy - wait
// A straggler is the rank whose own time in one phase (data, forward, backward, optimizer, or
// comm = comm_own) exceeds the other ranks' mean by more than the threshold in at least 3/4 of
// the steps (its loss: the median excess); the threshold is 10% of the median step time. Noise on
// a shared CPU crosses it in about half the steps; a slow rank in every one. What it costs the
// others is their waiting.
#pragma once
#include <string>
#include <type_traits>
#include <vector>

#include "collectives/allreduce.h"
#include "src/core/timeline.h"

namespace dpb {

// One rank's step. Seconds; start on the run's clock.
struct StepRow {
  int rank = 0, epoch = 0, step = 0;
  double start = 0, step_s = 0;  // the step's first and last compute-stream points
  double data = 0, forward = 0, backward = 0, optimizer = 0;
  double exposed_comm = 0, comm_busy = 0, wait = 0, comm_own = 0;
};
static_assert(std::is_trivially_copyable_v<StepRow>, "gathered as bytes");

// The phases in report and CSV order: name (CSV: <name>_s, <name>_min_s ...), field, help.
struct BreakdownPhase {
  const char* name;
  double StepRow::*field;
  const char* help;
};
const std::vector<BreakdownPhase>& breakdown_phases();

// This rank's steps of one epoch from its timeline's spans (those with step >= 0 and this epoch;
// arrivals: every comm span's start, in order, evaluation's gathers too, for the matching).
// link_send: the rank's cumulative link busy seconds (CommGroup::link_send_seconds +
// link_recv_seconds) at the epoch's start and after each step (empty: not paced).
struct RankSteps {
  std::vector<StepRow> rows;     // one per step
  std::vector<double> arrivals;  // comm spans' starts, in job order
  std::vector<int> arrival_step; // their steps (-1: outside the steps)
};
RankSteps rank_steps(const std::vector<Span>& spans, int rank, int epoch, int steps,
                     const std::vector<double>& link_send = {});

// Collective (every rank of the group, with its own RankSteps): every rank's rows with their
// waits filled in, sorted by (step, rank); the same on every rank. When the ranks' comm jobs do
// not match one to one (they always should), waits stay 0 and waits_known is false.
std::vector<StepRow> gather_steps(CommGroup& group, int rank, RankSteps mine, bool* waits_known);

// Collective: every rank's spans, to every rank (--trace; rank 0 writes them).
std::vector<Span> gather_spans(CommGroup& group, int rank, const std::vector<Span>& mine);

// Collective: what to add to this rank's clock to read rank 0's (processes on several nodes: a
// few rounds of all-gathered clock readings; the tightest round's midpoint). Rank 0: 0.
double clock_offset_to_rank0(CommGroup& group, int rank);

struct Straggler {
  int rank = -1;            // -1: no straggler
  std::string phase;        // data, forward, backward, optimizer, comm
  double loss_s = 0;        // its median excess per step in that phase over the others' mean
  double others_wait_s = 0; // the other ranks' median waiting per step (mean over them)
  double own_wait_s = 0;    // its own median waiting per step
  double step_s = 0;        // median step time (slowest rank per step)
  double threshold_s = 0;   // loss_s must exceed it
  // candidate when rank == -1: the largest excess found, for the "no straggler" line.
  int candidate_rank = -1;
  std::string candidate_phase;
  double candidate_s = 0;
  std::string describe() const;  // one or two lines for the end of `dpbench train`
};

struct PhaseSpread {
  double min = 0, avg = 0, max = 0;  // over ranks, of each rank's total
};
struct BreakdownStats {
  std::vector<PhaseSpread> phases;  // breakdown_phases() order
  double step_p50 = 0, step_p95 = 0, step_p99 = 0;  // over steps of the slowest rank's step
  int ranks = 0, steps = 0;
  Straggler straggler;
};
// rows: every rank's steps (of one epoch, or of the whole run).
BreakdownStats summarize_steps(const std::vector<StepRow>& rows);
Straggler find_straggler(const std::vector<StepRow>& rows);

// The per-rank table (ms per step, medians over steps) and the straggler line.
std::string format_breakdown(const std::vector<StepRow>& rows);

// --steps-csv: one row per rank and step (header: rank,epoch,step,start_s,step_s,<phases>_s).
void write_steps_csv(const std::string& path, const std::vector<StepRow>& rows);

}  // namespace dpb
