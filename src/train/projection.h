// projection.h: "how long would an epoch take on k devices over this link?" from a profile of ONE
// device and the all-reduce cost model of collectives/link.h (`dpbench project`).
//
// Profile (JSON, format "dpbench-profile/1"; written by `dpbench project --profile-out FILE`, so a
// GPU user can measure it on a GPU and project anywhere): medians over a few training steps of
// one device at `batch` images per step:
//   {"format": "dpbench-profile/1", "model": "resnet18", "model_options": {...},
//    "optimizer": "sgd", "loss": "xent", "backend": "cpu", "device": "...",
//    "cpu": "...", "threads": 1, "ranks": 2, "batch": 128, "steps": 4,
//    "data_s": .., "forward_s": .., "backward_s": .., "optimizer_s": ..,
//    "params": [{"name": "conv1.w", "floats": 1728, "ready_s": 0.41,
//                "fwd_at_s": 0.0, "bwd_at_s": 0.38}, ...]}   // model order
// The step is the trainer's own (src/train/step.h: make_replica, load_batch, step_forward,
// step_backward, step_update), so forward_s includes the loss of the loss table's entry and
// optimizer_s is the optimizer table's entry's update (Adam's moments included); profiles without
// "optimizer" / "loss" (older ones) were measured with sgd / xent. ready_s is when backward made
// the parameter's gradient final,
// from the start of backward; fwd_at_s / bwd_at_s when forward / backward first asked for the
// parameter (the model asks right before it issues the op that uses it: a ParamSource whose
// param(i) takes the time), from the start of each phase: the per-layer compute the sharded
// modes' gathers wait for (absent in older profiles: see project()). All times in seconds. ranks: how many replicas ran the same steps at
// once on this machine while it was measured: on a CPU the ranks of a run share the cores and the
// memory bandwidth, and measuring them side by side captures that. With ranks > 1 every phase
// end and gradient-ready time is the slowest replica's in each step (since the common step
// start; medians over steps): the ranks of a run drift apart within a step (time-slicing), and a
// collective, hence the step, waits for the last one.
//
// Timeline of one step on one rank (every rank runs the same):
//   data + forward + backward + exposed communication + optimizer,
// where the gradient units (plan_units: per-param, fused or buckets) each cost
// allreduce_link_cost(algorithm, bytes, k, link); with overlap a unit starts when its last
// gradient is ready and after the unit before it (one communication stream), and what runs past
// the end of backward is exposed; without overlap every unit is exposed. Data, forward and
// backward scale linearly with the images per device (ceil(batch / k) for the global batch);
// the optimizer does not. On the CPU backend k ranks of `threads` math threads share the
// machine's cores: when the profile was measured with fewer side-by-side ranks than k, compute is
// stretched by max(1, k * threads / cores) / max(1, ranks * threads / cores) (cores = 0: every
// rank has its own device, as on k GPUs). The last, partial batch is its own step.
//
// Sharded modes (--shard, src/train/shard.h), as ShardedStep schedules them; "units" are its
// layout's (make_shard_layout: the --grad-sync plan over whole layers), each collective costs its
// reduce-scatter / all-gather table entry's link_cost (collectives/registry.h), and a rank's
// communication jobs run on one queue in submission order (overlap on: beside compute; off:
// inline, compute waits for each):
//   optimizer   the all-reduce as replicated, the update on this rank's shard (optimizer_s x
//               shard / P), then one all-gather per unit, exposed;
//   gradients   each unit's reduce-scatter submitted when backward made its last gradient (a
//               unit's backward waits for the reduce-scatter two units back: two gradient
//               buckets), the update on the shard, the all-gathers as optimizer;
//   parameters  forward: a unit's compute waits for its gather, the next unit's gather is
//               submitted when a unit starts (prefetch depth 1); backward: forward's last two
//               units are resident, the rest gathered the same way, reduce-scatters as
//               gradients on the same queue; the update on the shard, no gather after it.
// Per-unit compute comes from fwd_at_s / bwd_at_s; a profile without them splits forward like
// backward (per-unit backward: from one unit's last gradient to the next's).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "collectives/grad_sync.h"
#include "collectives/link.h"
#include "src/model/model.h"
#include "src/train/shard.h"

namespace dpb {

struct ParamTiming {
  std::string name;
  size_t floats = 0;
  double ready_s = 0;  // since the start of backward
  // When forward / backward first asked for it, since the phase's start; < 0: not measured.
  double fwd_at_s = -1, bwd_at_s = -1;
};

struct StepProfile {
  std::string model, backend, device, cpu;
  ModelOptions model_opts;  // the model's options (JSON "model_options"; absent: the defaults)
  std::string optimizer = "sgd", loss = "xent";  // entries of optimizers() and losses()
  int threads = 1, ranks = 1, batch = 1, steps = 0;
  double data_s = 0, forward_s = 0, backward_s = 0, optimizer_s = 0;
  std::vector<ParamTiming> params;  // model order
};

// Measures `steps` training steps (after one warm-up) of one device of `backend` ("cpu" |
// "cuda") with `threads` math threads at `batch` examples of random features per step; medians.
// optimizer and loss: entries of optimizers() and losses() (names; unknown ones throw).
// ranks > 1 (CPU): that many replicas run the same steps side by side, each on its own thread
// and device, starting every step together; each phase and each gradient counts as done when
// the slowest replica's is (since the common step start), as a collective waits for the last rank.
StepProfile measure_profile(const std::string& model, const ModelOptions& opts,
                            const std::string& optimizer, const std::string& loss,
                            const std::string& backend, int threads, int batch, int steps,
                            int ranks = 1);
nlohmann::json profile_to_json(const StepProfile& p);
// Throws dpb::Error naming `source` and the field when the JSON is not a valid profile.
StepProfile profile_from_json(const nlohmann::json& j, const std::string& source);

struct ProjectConfig {
  int devices = 1;
  int batch = 256;  // global
  int train_examples = 60000;
  std::string allreduce = "ring";
  std::string tune_file;  // --allreduce auto: its tuning table ("": built-in)
  GradSyncConfig sync;
  LinkSpec link;
  int cores = 0;  // CPU profiles: cores the k ranks share (0: a device each)
  ShardMode shard = ShardMode::None;  // --shard
  // --link / --node-link names when the link is a named one as given (collectives/named_links.h;
  // "": explicit G and L); the JSON says them beside the numbers.
  std::string link_name, node_link_name;
};

struct Projection {
  double epoch_s = 0, compute_s = 0, comm_s = 0, exposed_comm_s = 0, data_s = 0;
  double step_s = 0;  // a full step
  int steps = 0, units = 0;     // units: the all-reduce's (GradSync's plan)
  int shard_units = 0;          // sharded modes: the layout's units (gathers, reduce-scatters)
  long calls = 0;               // collective calls per full step
  double compute_stretch = 1;  // the CPU core-sharing factor applied
};

// Two levels (issue 26): cfg.link.nodes nodes of devices / nodes devices each; every collective's
// cost model charges the intra-node link (gbps, latency_us) inside a node and the inter-node one
// (LinkSpec::inter) between nodes: a flat schedule's step that crosses waits for the slow link
// (ring, direct: every step; rhd: the exchanges at distance >= g; naive: rank 0's transfers with
// other nodes), hier runs its node and cross-node levels on each (collectives/hier.cpp).
//
// Throws dpb::Error when cfg's algorithm has no link cost model for a collective cfg.shard runs
// (or, sharded, no reduce-scatter / all-gather of that name), naming it: before measuring.
void check_cost_models(const ProjectConfig& cfg, BackendKind kind);

// Throws dpb::Error when the profile's parameter sizes do not fit its model's layout.
Projection project(const StepProfile& prof, const ProjectConfig& cfg);
nlohmann::json projection_to_json(const StepProfile& prof, const ProjectConfig& cfg,
                                  const Projection& p);

}  // namespace dpb
