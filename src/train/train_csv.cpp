// train_csv.cpp: the training CSV's column table (see train_csv.h).
#include "src/train/train_csv.h"

#include <cmath>

#include <nlohmann/json.hpp>
#include <sstream>

#include "collectives/allreduce.h"
#include "kernels/backends.h"
#include "src/core/registry.h"
#include "src/model/model.h"
#include "src/core/check.h"
#include "src/train/loss.h"
#include "src/train/optimizer.h"
#include "src/train/shard.h"
#include "src/train/run_data.h"

namespace dpb {
namespace {

using Run = const TrainCsvRun&;
using Ep = const EpochStats&;
constexpr CsvType kNum = CsvType::Number, kText = CsvType::Text;

// A cell as RFC 4180 writes it: quoted when it holds a comma, a quote or a line break (the
// inject column's "delay:rank=1,phase=backward,ms=30"), so every row keeps the header's columns.
std::string csv_cell(const std::string& v) {
  if (v.find_first_of(",\"\r\n") == std::string::npos) return v;
  std::string q = "\"";
  for (char ch : v) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return q + "\"";
}

std::string num(double v) {  // 6 significant digits: every CSV and baseline is written so
  std::ostringstream o;
  o.precision(6);
  o << v;
  return o.str();
}
std::string integer(long long v) { return std::to_string(v); }
// A figure a backend that runs no math (meta: memory only) did not measure: left empty.
std::string measured(Run r, const std::string& v) {
  return find_backend(r.cfg.backend).runs_math ? v : "";
}
// A load figure (cpu_info.h): empty where it could not be read (negative). The machine's facts
// are written on every backend (meta too: a plan made on a busy machine took longer, nothing more).
std::string known(Run, double v) { return v < 0 ? "" : num(v); }

// A ModelOptions value, for the models sized by them (the MLP); empty for the others.
std::string mlp_option(Run r, int v) {
  return lookup_entry(models(), r.cfg.model, "--model", "model").takes_options ? integer(v) : "";
}

// The bytes of category C at the peak (peak_mem_<category>_bytes).
template <MemCategory C>
std::string peak_of(Run, Ep e) {
  return std::to_string(e.peak_mem[C]);
}
// The per-rank breakdown (breakdown.h): phase P's epoch total, min (W 0) / mean (1) / max (2)
// over the ranks.
// The breakdown's figures: empty where none was recorded (--breakdown off, the meta backend).
std::string recorded(Run r, Ep e, const std::string& v) {
  return e.breakdown.steps > 0 ? measured(r, v) : "";
}
template <size_t P, int W>
std::string spread(Run r, Ep e) {
  if (e.breakdown.phases.size() <= P || e.breakdown.steps == 0) return "";
  const PhaseSpread& s = e.breakdown.phases[P];
  return measured(r, num(W == 0 ? s.min : W == 1 ? s.avg : s.max));
}
#define DPB_SPREAD(P, NAME, WHAT)                                                             \
  {NAME "_min_s", kNum, "the least over the ranks of their epoch total of " WHAT ", seconds",   \
   spread<P, 0>},                                                                             \
      {NAME "_avg_s", kNum, "the mean over the ranks of " WHAT ", seconds", spread<P, 1>},      \
      {NAME "_max_s", kNum, "the most over the ranks of " WHAT ", seconds", spread<P, 2>}
std::string straggler_num(Run r, Ep e, double v) {
  return recorded(r, e, e.breakdown.straggler.rank >= 0 ? num(v) : "");
}

// One column per category, named after mem_category_name (tests/test_memory.cpp checks).
static_assert(kMemCategories == 8, "a memory category needs its peak_mem_<name>_bytes column");

}  // namespace

const std::vector<CsvColumn>& train_csv_columns() {
  static const std::vector<CsvColumn> cols = {
      {"impl", kText, "what produced the row: dpbench (peer baselines write their own name)",
       [](Run, Ep) -> std::string { return "dpbench"; }},
      {"model", kText, entry_names(models(), " | "), [](Run r, Ep) { return r.cfg.model; }},
      {"model_params", kNum, "the model's parameters (floats)",
       [](Run r, Ep) {
         size_t n = 0;
         for (const ParamInfo& p : model_param_layout(r.cfg.model, r.cfg.model_opts)) n += p.size;
         return std::to_string(n);
       }},
      {"mlp_layers", kNum, "--mlp-layers: the MLP's hidden layers (empty for the other models)",
       [](Run r, Ep) { return mlp_option(r, r.cfg.model_opts.mlp_layers); }},
      {"mlp_hidden", kNum, "--mlp-hidden: the MLP's hidden width (empty for the other models)",
       [](Run r, Ep) { return mlp_option(r, r.cfg.model_opts.mlp_hidden); }},
      {"mlp_input", kNum,
       "the MLP's input features: --mlp-input on synthetic data, 784 on Fashion-MNIST (empty for "
       "the other models)",
       [](Run r, Ep) { return mlp_option(r, r.cfg.model_opts.mlp_input); }},
      {"optimizer", kText, entry_names(optimizers(), " | "),
       [](Run r, Ep) { return r.cfg.optimizer; }},
      {"loss", kText, entry_names(losses(), " | "), [](Run r, Ep) { return r.cfg.loss; }},
      {"data", kText, entry_names(data_sources(), " | "),
       [](Run r, Ep) { return r.cfg.data; }},
      {"backend", kText, entry_names(backends(), " | "), [](Run r, Ep) { return r.cfg.backend; }},
      {"devices", kNum, "ranks (logical devices)",
       [](Run r, Ep) { return integer(r.cfg.devices); }},
      {"launcher", kText, "threads (ranks are threads of one process) | mpi (one process per rank, "
                          "mpirun/srun)",
       [](Run r, Ep) { return std::string(launcher_name(r.cfg.launcher())); }},
      {"processes", kNum, "processes the ranks ran in (1 for threads)",
       [](Run r, Ep) { return integer(r.cfg.procs.active() ? r.cfg.procs.size : 1); }},
      {"shared_gpu", kNum, "1 when CUDA ranks share GPUs",
       [](Run r, Ep) { return integer(r.shared_gpu); }},
      {"quick", kNum, "1 when data subsets were used", [](Run r, Ep) { return integer(r.quick); }},
      {"allreduce", kText, "--allreduce: an entry of the all-reduce table, or auto",
       [](Run r, Ep) { return r.cfg.allreduce; }},
      {"allreduce_resolved", kText,
       "what ran: the algorithm, or auto's choice per message size and its table",
       [](Run r, Ep) { return r.allreduce_resolved; }},
      {"shard", kText, entry_names(shard_modes(), " | ") + " (--shard: ZeRO stage 0-3)",
       [](Run r, Ep) { return to_string(r.cfg.shard); }},
      {"grad_sync", kText, "per-param | fused | bucketed",
       [](Run r, Ep) { return to_string(r.cfg.sync.mode); }},
      {"overlap", kText, "on | off: gradients all-reduced during backward",
       [](Run r, Ep) -> std::string { return r.cfg.sync.overlap ? "on" : "off"; }},
      {"bucket_mb", kNum, "bucket cap, MB (1e6 bytes)",
       [](Run r, Ep) { return num(r.cfg.sync.bucket_mb); }},
      {"global_batch", kNum, "global minibatch (examples)",
       [](Run r, Ep) { return integer(r.cfg.batch); }},
      {"lr", kNum, "learning rate after warmup", [](Run r, Ep) { return num(r.cfg.lr); }},
      {"warmup_epochs", kNum, "epochs of linear lr warmup",
       [](Run r, Ep) { return num(r.cfg.warmup_epochs); }},
      {"seed", kNum, "initialization and shuffling seed",
       [](Run r, Ep) { return std::to_string(r.cfg.seed); }},
      {"train_examples", kNum, "training examples used",
       [](Run r, Ep) { return integer(r.train_examples); }},
      {"test_examples", kNum, "test examples used",
       [](Run r, Ep) { return integer(r.test_examples); }},
      {"epoch", kNum, "epoch, from 1", [](Run, Ep e) { return integer(e.epoch); }},
      {"lr_end", kNum, "learning rate at the epoch's last step",
       [](Run, Ep e) { return num(e.lr_end); }},
      {"train_loss", kNum, "mean training loss over the epoch's steps",
       [](Run r, Ep e) { return measured(r, num(e.train_loss)); }},
      {"train_acc", kNum, "training accuracy over the epoch",
       [](Run r, Ep e) { return measured(r, num(e.train_acc)); }},
      {"test_acc", kNum, "test accuracy after the epoch",
       [](Run r, Ep e) { return measured(r, num(e.test_acc)); }},
      {"epoch_s", kNum, "training time of the epoch, seconds (evaluation excluded)",
       [](Run r, Ep e) { return measured(r, num(e.epoch_s)); }},
      {"images_per_s", kNum, "train_examples / epoch_s",
       [](Run r, Ep e) { return measured(r, num(e.images_per_s)); }},
      {"data_s", kNum, "rank 0's data loading, timed on its compute stream (CUDA events), seconds",
       [](Run r, Ep e) { return measured(r, num(e.data_s)); }},
      {"compute_s", kNum, "epoch_s - data_s - exposed_comm_s, seconds",
       [](Run r, Ep e) { return measured(r, num(e.compute_s)); }},
      {"comm_s", kNum, "rank 0's comm stream time inside gradient (and --shard's parameter) collectives (CUDA events), seconds",
       [](Run r, Ep e) { return measured(r, num(e.comm_s)); }},
      {"exposed_comm_s", kNum, "rank 0's compute stream wait for gradient (and --shard's parameter) communication (CUDA events), seconds",
       [](Run r, Ep e) { return measured(r, num(e.exposed_comm_s)); }},
      {"comm_calls", kNum, "rank 0's collective calls in the epoch",
       [](Run, Ep e) { return integer(e.comm_calls); }},
      {"comm_bytes", kNum,
       "bytes rank 0 sent per training step, counted by its transport (library collectives: "
       "their ring-equivalent count)",
       [](Run, Ep e) { return integer(std::llround(e.comm_bytes)); }},
      {"replicas_in_sync", kNum, "1 when all replicas' parameters are bitwise equal",
       [](Run r, Ep e) { return measured(r, integer(e.replicas_in_sync)); }},
      {"max_replica_diff", kNum, "largest |difference| of a parameter between replicas",
       [](Run r, Ep e) { return measured(r, num(e.max_replica_diff)); }},
      {"link_gbps", kNum, "emulated link between ranks, Gb/s per direction (0: none)",
       [](Run r, Ep) { return num(r.cfg.link.gbps); }},
      {"link_latency_us", kNum, "emulated link latency per transfer, us (0: none)",
       [](Run r, Ep) { return num(r.cfg.link.latency_us); }},
      // Two levels (issue 26, collectives/link.h): the nodes as the run split its ranks.
      {"nodes", kNum,
       "emulated nodes the ranks were split into (--nodes, else DPB_NODES; 1: one node)",
       [](Run r, Ep) { return integer(with_env_nodes(r.cfg.link).nodes); }},
      {"node_link_gbps", kNum,
       "emulated link between nodes, Gb/s per direction (0 with node_link_latency_us 0: the "
       "link_gbps of a node)",
       [](Run r, Ep) { return num(r.cfg.link.node_gbps); }},
      {"node_link_latency_us", kNum,
       "emulated link between nodes: latency per transfer, us (0 with node_link_gbps 0: the "
       "link_latency_us of a node)",
       [](Run r, Ep) { return num(r.cfg.link.node_latency_us); }},
      {"device_mem_bytes", kNum, "--device-mem: each device's capacity, bytes (0: its own memory)",
       [](Run r, Ep) { return std::to_string(r.cfg.device_mem); }},
      {"peak_mem_bytes", kNum,
       "device memory at the peak so far, bytes: the highest over the ranks (processes: rank 0's "
       "process)",
       [](Run, Ep e) { return std::to_string(e.peak_mem.total()); }},
      {"peak_mem_parameters_bytes", kNum, "at that peak: parameters and model state, bytes",
       peak_of<MemCategory::Parameters>},
      {"peak_mem_gradients_bytes", kNum, "at that peak: gradients, bytes",
       peak_of<MemCategory::Gradients>},
      {"peak_mem_optimizer_state_bytes", kNum, "at that peak: optimizer state, bytes",
       peak_of<MemCategory::OptimizerState>},
      {"peak_mem_activations_bytes", kNum, "at that peak: activations saved for backward, bytes",
       peak_of<MemCategory::Activations>},
      {"peak_mem_temporaries_bytes", kNum, "at that peak: temporaries (gradient scratch), bytes",
       peak_of<MemCategory::Temporaries>},
      {"peak_mem_workspace_bytes", kNum,
       "at that peak: kernel workspaces (oneDNN scratchpads, cuDNN workspace), bytes",
       peak_of<MemCategory::Workspace>},
      {"peak_mem_comm_bytes", kNum, "at that peak: communication buffers (staging), bytes",
       peak_of<MemCategory::Comm>},
      {"peak_mem_data_bytes", kNum, "at that peak: the input batch and its staging, bytes",
       peak_of<MemCategory::Data>},
      DPB_SPREAD(0, "data", "data loading (compute stream)"),
      DPB_SPREAD(1, "forward", "forward (less nested comm waits)"),
      DPB_SPREAD(2, "backward", "backward (less nested comm waits)"),
      DPB_SPREAD(3, "optimizer", "the optimizer step (less nested comm waits)"),
      DPB_SPREAD(4, "exposed_comm", "compute waiting on comm"),
      DPB_SPREAD(5, "comm_busy", "comm stream time in collectives"),
      DPB_SPREAD(6, "wait", "waiting in collectives for the last peer to arrive"),
      DPB_SPREAD(7, "comm_own", "own communication (emulated link: its links' busy time; else comm_busy - wait)"),
      {"step_p50_s", kNum, "median step time (per step: the slowest rank's), seconds",
       [](Run r, Ep e) { return recorded(r, e, num(e.breakdown.step_p50)); }},
      {"step_p95_s", kNum, "95th percentile of the step time, seconds",
       [](Run r, Ep e) { return recorded(r, e, num(e.breakdown.step_p95)); }},
      {"step_p99_s", kNum, "99th percentile of the step time, seconds",
       [](Run r, Ep e) { return recorded(r, e, num(e.breakdown.step_p99)); }},
      {"straggler_rank", kNum,
       "the epoch's straggler (src/train/breakdown.h: a phase > 10% of the median step longer "
       "than the other ranks' mean in 3/4 of the steps); -1: none; empty: not recorded (--breakdown off)",
       [](Run r, Ep e) { return recorded(r, e, integer(e.breakdown.straggler.rank)); }},
      {"straggler_phase", kText, "data | forward | backward | optimizer | comm (empty: none)",
       [](Run r, Ep e) { return recorded(r, e, e.breakdown.straggler.phase); }},
      {"straggler_loss_s", kNum, "its median excess per step in that phase, seconds",
       [](Run r, Ep e) { return straggler_num(r, e, e.breakdown.straggler.loss_s); }},
      {"straggler_wait_s", kNum, "the other ranks' median waiting for peers per step, seconds",
       [](Run r, Ep e) { return straggler_num(r, e, e.breakdown.straggler.others_wait_s); }},
      {"inject", kText, "--inject: faults injected on purpose (empty: none)",
       [](Run r, Ep) { return r.cfg.inject.describe(); }},
      {"diverged", kNum,
       "1: the epoch's loss or parameters were not finite and training stopped after it "
       "(--allow-divergence; src/train/divergence.h); 0: finite",
       [](Run r, Ep e) { return measured(r, integer(e.diverged ? 1 : 0)); }},
      {"stalled_s", kNum,
       "the longest wait of a rank for its peers in the epoch, seconds, when it passed the "
       "watchdog's warn threshold, min(--timeout/4, 30 s): a stalled rank stretched the epoch, "
       "whose time is then no measurement (src/core/watchdog.h); 0: none did",
       [](Run r, Ep e) { return measured(r, num(e.stalled_s)); }},
      // The machine around the epoch (src/core/cpu_info.h; empty where unknown): was it busy?
      {"load_avg_start", kNum, "1-minute load average (/proc/loadavg) when the epoch started",
       [](Run r, Ep e) { return known(r, e.load.load_avg_start); }},
      {"load_avg_end", kNum, "1-minute load average when it ended",
       [](Run r, Ep e) { return known(r, e.load.load_avg_end); }},
      {"steal_pct", kNum, "CPU time stolen by the hypervisor over the epoch (/proc/stat), %",
       [](Run r, Ep e) { return known(r, e.load.steal_pct); }},
      {"cpu_pressure_pct", kNum,
       "time some runnable task waited for a CPU over the epoch (/proc/pressure/cpu), % of wall",
       [](Run r, Ep e) { return known(r, e.load.pressure_pct); }},
      {"others_runnable", kNum,
       "runnable tasks of other processes (not this job's other ranks: the same binary started "
       "by the same parent), the more of the samples at the epoch's start and end",
       [](Run r, Ep e) { return known(r, double(e.load.others_runnable)); }},
      {"busy", kText,
       "why the machine was busy (load above the CPUs at the start, steal > 2%, other "
       "processes runnable); empty: it was not",
       [](Run, Ep e) { return e.load.why_busy(); }},
      {"rank_cpus", kText,
       "the CPU each of this process's rank threads was on at the epoch's end, by rank, "
       "blank-separated (-1: unknown)",
       [](Run, Ep e) {
         std::string t;
         for (int c : e.rank_cpus) t.append(t.empty() ? "" : " ").append(std::to_string(c));
         return t;
       }},
  };
  static const bool phases_match = [] {  // DPB_SPREAD's indices against the phase table
    const auto& p = breakdown_phases();
    const char* names[] = {"data", "forward", "backward", "optimizer", "exposed_comm",
                           "comm_busy", "wait", "comm_own"};
    DPB_CHECK(p.size() == std::size(names), "train CSV: the breakdown has " << p.size() << " phases");
    for (size_t i = 0; i < p.size(); ++i)
      DPB_CHECK(std::string(p[i].name) == names[i], "train CSV: breakdown phase " << i << " is "
                                                         << p[i].name << ", not " << names[i]);
    return true;
  }();
  (void)phases_match;
  return cols;
}

std::string train_csv_header() {
  std::string h;
  for (const CsvColumn& c : train_csv_columns()) {
    if (!h.empty()) h += ',';
    h += c.name;
  }
  return h;
}

std::string train_csv_row(const TrainCsvRun& run, const EpochStats& epoch) {
  std::string row;
  for (const CsvColumn& c : train_csv_columns()) {
    if (!row.empty()) row += ',';
    row += csv_cell(c.format(run, epoch));
  }
  return row;
}

std::string train_csv_schema_json() {
  nlohmann::ordered_json cols = nlohmann::ordered_json::array();
  for (const CsvColumn& c : train_csv_columns())
    cols.push_back({{"name", c.name},
                    {"type", c.type == CsvType::Number ? "number" : "text"},
                    {"doc", c.doc}});
  nlohmann::ordered_json j;
  j["columns"] = cols;
  return j.dump(2) + "\n";
}

}  // namespace dpb
