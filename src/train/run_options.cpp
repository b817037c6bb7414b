// run_options.cpp: the table of run options (see run_options.h) and the one environment help.
#include "src/train/run_options.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "collectives/named_links.h"
#include "collectives/registry.h"
#include "collectives/tuning.h"
#include "kernels/backends.h"
#include "src/core/check.h"
#include "src/core/memory.h"
#include "src/core/registry.h"
#include "src/model/model.h"
#include "src/train/inject.h"
#include "src/train/loss.h"
#include "src/train/optimizer.h"
#include "src/train/run_data.h"
#include "src/train/shard.h"

namespace dpb {

bool parse_int_text(const std::string& text, long long& out) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  out = std::strtoll(text.c_str(), &end, 10);
  return errno == 0 && end != text.c_str() && *end == '\0';
}

bool parse_double_text(const std::string& text, double& out) {
  if (text.empty()) return false;
  char* end = nullptr;
  out = std::strtod(text.c_str(), &end);
  return end != text.c_str() && *end == '\0';
}

const BackendEntry& auto_backend() {
  const BackendEntry& gpu = backend_of_kind(BackendKind::Cuda);
  return gpu.unavailable().empty() ? gpu : backend_of_kind(BackendKind::Cpu);
}

const BackendEntry& resolve_backend(const std::string& name) {
  return name == kAutoBackend ? auto_backend() : find_backend(name);
}

namespace {

std::string fmt(double x) {
  std::ostringstream o;
  o << x;
  return o.str();
}

// "" when text is an integer in [lo, hi], else why not.
std::string int_in(const std::string& text, long long lo, long long hi) {
  long long x = 0;
  if (parse_int_text(text, x) && x >= lo && x <= hi) return "";
  return "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" +
         text + "'";
}
int to_int(const std::string& text) { return int(std::strtoll(text.c_str(), nullptr, 10)); }
double to_double(const std::string& text) { return std::strtod(text.c_str(), nullptr); }

std::string positive_number(const std::string& text) {
  double x = 0;
  if (parse_double_text(text, x) && std::isfinite(x) && x > 0) return "";
  return "expected a positive number, got '" + text + "'";
}

// A name of a table (or one of `extra`).
template <class Entry>
std::string member(const std::vector<Entry>& table, const std::string& text, const char* what,
                   const char* extra = nullptr) {
  if (find_entry(table, text) || (extra && text == extra)) return "";
  return std::string("unknown ") + what + " '" + text + "' (valid: " + (extra ? extra + std::string(", ") : "") +
         entry_names(table) + ")";
}

// An error's message without check.h's " [file:line]" suffix: the reason a user reads.
std::string reason_of(const std::exception& e) {
  std::string m = e.what();
  const size_t at = m.rfind(" [");
  if (!m.empty() && m.back() == ']' && at != std::string::npos && m.find(':', at) != std::string::npos)
    m.resize(at);
  return m;
}

// The emulated link's limits are validate_link's (collectives/link.h), so every caller agrees.
std::string link_value(const std::string& text, bool gbps) {
  double x = 0;
  if (!parse_double_text(text, x)) return "expected a number, got '" + text + "'";
  LinkSpec l;
  (gbps ? l.gbps : l.latency_us) = x;
  try {
    validate_link(l, "--link-gbps", "--link-latency-us");
  } catch (const std::exception& e) {
    return reason_of(e);
  }
  return "";
}

// The inter-node link's (--node-link-gbps, --node-link-latency-us): validate_link's limits too.
std::string node_link_value(const std::string& text, bool gbps) {
  double x = 0;
  if (!parse_double_text(text, x)) return "expected a number, got '" + text + "'";
  LinkSpec l;
  (gbps ? l.node_gbps : l.node_latency_us) = x;
  try {
    validate_link(l, "--link-gbps", "--link-latency-us");
  } catch (const std::exception& e) {
    return reason_of(e);
  }
  return "";
}

std::string any_text(const std::string&) { return ""; }

std::string entry_list(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : " | ") + n;
  return s;
}

const std::string kOnOff[] = {"on", "off"};

std::vector<RunOption> make_table() {
  using C = TrainConfig;
  return {
      {"model", "", false, "NAME", "model: " + entry_names(models(), " | "),
       [](const std::string& t) { return member(models(), t, "model"); },
       [](C& c, const std::string& t) { c.model = t; }, [](const C& c) { return c.model; }},
      // The MLP's shape (src/model/mlp.cpp); the other models ignore them. dpbench-micro sizes its
      // mlp benchmarks with them too (its data are 28x28 images: input 784).
      {"mlp-layers", "mlp_layers", false, "N", "mlp: hidden layers, 1 to 10000 (the notebook's 90)",
       [](const std::string& t) { return int_in(t, 1, 10000); },
       [](C& c, const std::string& t) { c.model_opts.mlp_layers = to_int(t); },
       [](const C& c) { return std::to_string(c.model_opts.mlp_layers); }},
      {"mlp-hidden", "mlp_hidden", false, "N",
       "mlp: width of each hidden layer, 1 to 1000000 (the notebook's 2056)",
       [](const std::string& t) { return int_in(t, 1, 1000000); },
       [](C& c, const std::string& t) { c.model_opts.mlp_hidden = to_int(t); },
       [](const C& c) { return std::to_string(c.model_opts.mlp_hidden); }},
      {"mlp-input", "", false, "N",
       "mlp: input features on --data synthetic, 1 to 10000000 (the notebook's 1024); "
       "Fashion-MNIST's input is its 784 pixels",
       [](const std::string& t) { return int_in(t, 1, 10000000); },
       [](C& c, const std::string& t) { c.model_opts.mlp_input = to_int(t); },
       [](const C& c) { return std::to_string(c.model_opts.mlp_input); }},
      {"backend", "backends", true, "NAME",
       "device backend: " + std::string(kAutoBackend) + " | " + entry_names(backends(), " | ") +
           " (auto: cuda when built and a GPU is found)",
       [](const std::string& t) { return member(backends(), t, "backend", kAutoBackend); },
       [](C& c, const std::string& t) { c.backend = t; }, [](const C& c) { return c.backend; }},
      {"devices", "ranks", true, "N",
       "number of logical devices (ranks), 1 to " + std::to_string(kMaxRanks) +
           ". Under mpirun/srun: one rank per process, default (and only value) the process count",
       [](const std::string& t) { return int_in(t, 1, kMaxRanks); },
       [](C& c, const std::string& t) { c.devices = to_int(t); },
       [](const C& c) { return std::to_string(c.devices); }},
      {"batch", "", false, "N",
       "global minibatch size, split across devices (1 to " + std::to_string(kMaxBatch) + ")",
       [](const std::string& t) { return int_in(t, 1, kMaxBatch); },
       [](C& c, const std::string& t) { c.batch = to_int(t); },
       [](const C& c) { return std::to_string(c.batch); }},
      {"lr", "", false, "X", "learning rate (of --optimizer)", positive_number,
       [](C& c, const std::string& t) { c.lr = to_double(t); }, [](const C& c) { return fmt(c.lr); }},
      {"optimizer", "", false, "NAME", "optimizer: " + entry_names(optimizers(), " | ") +
           " (adam: optax's b1 0.9, b2 0.999, eps 1e-8; lr is --lr, e.g. 1e-3)",
       [](const std::string& t) { return member(optimizers(), t, "optimizer"); },
       [](C& c, const std::string& t) { c.optimizer = t; }, [](const C& c) { return c.optimizer; }},
      {"loss", "", false, "NAME", "loss: " + entry_names(losses(), " | ") +
           " (xent: softmax cross-entropy; mse: mean squared error against one-hot labels)",
       [](const std::string& t) { return member(losses(), t, "loss"); },
       [](C& c, const std::string& t) { c.loss = t; }, [](const C& c) { return c.loss; }},
      {"epochs", "", false, "N", "epochs", [](const std::string& t) { return int_in(t, 1, 1000000); },
       [](C& c, const std::string& t) { c.epochs = to_int(t); },
       [](const C& c) { return std::to_string(c.epochs); }},
      {"warmup-epochs", "", false, "X",
       "gradual warmup: lr ramps linearly from lr/devices to lr over these epochs",
       [](const std::string& t) {
         double x = 0;
         return parse_double_text(t, x) && std::isfinite(x) && x >= 0
                    ? std::string()
                    : "expected a number >= 0, got '" + t + "'";
       },
       [](C& c, const std::string& t) { c.warmup_epochs = to_double(t); },
       [](const C& c) { return fmt(c.warmup_epochs); }},
      {"allreduce", "", false, "NAME", "all-reduce algorithm: " + entry_names(allreduce_algorithms(), " | "),
       [](const std::string& t) { return member(allreduce_algorithms(), t, "algorithm"); },
       [](C& c, const std::string& t) { c.allreduce = t; }, [](const C& c) { return c.allreduce; }},
      {"tune-file", "tune_file", false, "FILE",
       "--allreduce auto: tuning table (JSON from scripts/tune_allreduce.py; default: the "
       "compiled-in collectives/tuning/default.json)",
       [](const std::string& t) {
         try {
           load_tune_file(t);  // its messages name "--tune-file PATH"
         } catch (const std::exception& e) {
           return reason_of(e);
         }
         return std::string();
       },
       [](C& c, const std::string& t) { c.tune_file = t; }, [](const C& c) { return c.tune_file; }},
      {"grad-sync", "", false, "NAME", "gradient sync mode: " + entry_names(sync_modes(), " | "),
       [](const std::string& t) { return member(sync_modes(), t, "mode"); },
       [](C& c, const std::string& t) { c.sync.mode = parse_sync_mode(t); },
       [](const C& c) { return to_string(c.sync.mode); }},
      {"overlap", "", false, "on|off", "on | off: all-reduce gradients while backward runs",
       [](const std::string& t) {
         return t == kOnOff[0] || t == kOnOff[1] ? std::string()
                                                 : "expected on or off, got '" + t + "'";
       },
       [](C& c, const std::string& t) { c.sync.overlap = t == kOnOff[0]; },
       [](const C& c) { return kOnOff[c.sync.overlap ? 0 : 1]; }},
      {"bucket-mb", "bucket_mb", false, "X", "bucket cap in MB (1e6 bytes) for bucketed",
       positive_number, [](C& c, const std::string& t) { c.sync.bucket_mb = to_double(t); },
       [](const C& c) { return fmt(c.sync.bucket_mb); }},
      {"shard", "", false, "MODE",
       "sharded data parallelism: " + entry_names(shard_modes(), " | ") +
           " (ZeRO stages 0-3; units: --grad-sync's plan over whole layers, bucketed by default "
           "for gradients and parameters)",
       [](const std::string& t) { return member(shard_modes(), t, "mode"); },
       [](C& c, const std::string& t) { c.shard = find_shard_mode(t).mode; },
       [](const C& c) { return to_string(c.shard); }},
      {"seed", "", false, "N", "seed for initialization and shuffling",
       [](const std::string& t) {
         char* end = nullptr;
         errno = 0;
         std::strtoull(t.c_str(), &end, 10);
         return !t.empty() && t[0] != '-' && errno == 0 && *end == '\0'
                    ? std::string()
                    : "expected an integer >= 0, got '" + t + "'";
       },
       [](C& c, const std::string& t) { c.seed = std::strtoull(t.c_str(), nullptr, 10); },
       [](const C& c) { return std::to_string(c.seed); }},
      {"threads", "cpu_threads", false, "N",
       "CPU math threads per device, 0 to " + std::to_string(kMaxThreads) +
           " (0: cores / devices, at least 1)",
       [](const std::string& t) { return int_in(t, 0, kMaxThreads); },
       [](C& c, const std::string& t) { c.threads = to_int(t); },
       [](const C& c) { return std::to_string(c.threads); }},
      // Named interconnects (collectives/named_links.h): G and L of a real link. Before
      // --link-gbps and --link-latency-us in every front end's list, so an explicit one wins.
      {"link", "", false, "NAME",
       "the link between ranks (inside a node) by name, setting --link-gbps and "
       "--link-latency-us (either given explicitly wins): " + entry_names(named_links(), " | "),
       [](const std::string& t) { return member(named_links(), t, "link"); },
       [](C& c, const std::string& t) {
         const NamedLink& l = find_named_link(t);
         c.link.gbps = l.gbps;
         c.link.latency_us = l.latency_us;
       },
       nullptr},
      {"node-link", "", false, "NAME",
       "the link between nodes (--nodes) by name, setting --node-link-gbps and "
       "--node-link-latency-us (either given explicitly wins): " +
           entry_names(named_links(), " | "),
       [](const std::string& t) { return member(named_links(), t, "link"); },
       [](C& c, const std::string& t) {
         const NamedLink& l = find_named_link(t, "--node-link");
         c.link.node_gbps = l.gbps;
         c.link.node_latency_us = l.latency_us;
       },
       nullptr},
      {"link-gbps", "link_gbps", false, "G",
       "emulated link between ranks: Gb/s per direction (0: no emulation); CPU backend",
       [](const std::string& t) { return link_value(t, true); },
       [](C& c, const std::string& t) { c.link.gbps = to_double(t); },
       [](const C& c) { return fmt(c.link.gbps); }},
      {"link-latency-us", "link_latency_us", false, "L",
       "emulated link: latency of each transfer between ranks, us (0: none)",
       [](const std::string& t) { return link_value(t, false); },
       [](C& c, const std::string& t) { c.link.latency_us = to_double(t); },
       [](const C& c) { return fmt(c.link.latency_us); }},
      // Emulated nodes (issue 26, collectives/link.h): DPB_NODES when not given.
      {"nodes", "nodes", false, "N",
       "emulated nodes: the ranks (threads, or processes under mpirun) split into N nodes of "
       "equal size, numbered node by "
       "node; --allreduce hier runs on them, the emulated link charges --node-link-* between them "
       "(default: DPB_NODES, else 1)",
       [](const std::string& t) { return int_in(t, 1, 4096); },
       [](C& c, const std::string& t) { c.link.nodes = to_int(t); },
       [](const C& c) { return std::to_string(c.link.nodes); }},
      {"node-link-gbps", "node_link_gbps", false, "G",
       "emulated link between nodes (--nodes): Gb/s per direction (0: the --link-gbps of a node)",
       [](const std::string& t) { return node_link_value(t, true); },
       [](C& c, const std::string& t) { c.link.node_gbps = to_double(t); },
       [](const C& c) { return fmt(c.link.node_gbps); }},
      {"node-link-latency-us", "node_link_latency_us", false, "L",
       "emulated link between nodes: latency of each transfer, us (0 with --node-link-gbps 0: "
       "the --link-latency-us of a node)",
       [](const std::string& t) { return node_link_value(t, false); },
       [](C& c, const std::string& t) { c.link.node_latency_us = to_double(t); },
       [](const C& c) { return fmt(c.link.node_latency_us); }},
      // A flag: the front ends pass "true"; get() gives "true" or "false" (the ranks compare it).
      {"tf32", "", false, "", "allow TF32 tensor-core math (CUDA backend)", any_text,
       [](C& c, const std::string& t) { c.tf32 = t != "false"; },
       [](const C& c) { return std::string(c.tf32 ? "true" : "false"); }},
      {"device-mem", "device_mem", false, "SIZE",
       "each device's memory capacity, e.g. 24GiB, 80GB, 512MiB (KB/MB/GB: powers of 1000, "
       "KiB/MiB/GiB: of 1024); an allocation past it fails as on a device of that size (exit 3). "
       "0: the device's own memory",
       [](const std::string& t) {
         size_t b = 0;
         return t == "0" || parse_bytes(t, b)
                    ? std::string()
                    : "expected a size such as 24GiB, 80GB, 512MiB or a byte count, got '" + t + "'";
       },
       [](C& c, const std::string& t) {
         size_t b = 0;
         c.device_mem = t != "0" && parse_bytes(t, b) ? b : 0;
       },
       [](const C& c) { return std::to_string(c.device_mem); }},
      {"train-limit", "", false, "N", "use only the first N training examples (0: all)",
       [](const std::string& t) { return int_in(t, 0, 1 << 30); }, nullptr, nullptr},
      {"test-limit", "", false, "N", "use only the first N test examples (0: all)",
       [](const std::string& t) { return int_in(t, 0, 1 << 30); }, nullptr, nullptr},
      {"data", "", false, "NAME", "data: " + entry_names(data_sources(), " | ") +
           " (synthetic: the sharding notebook's batch of ones, sized to the model's input)",
       [](const std::string& t) { return member(data_sources(), t, "data source"); },
       [](C& c, const std::string& t) { c.data = t; }, [](const C& c) { return c.data; }},
      // The per-rank breakdown's timelines (src/train/breakdown.h); off measures their cost.
      {"breakdown", "", false, "on|off",
       "on | off: record every rank's phases per step (the breakdown, straggler report, "
       "--steps-csv, --trace)",
       [](const std::string& t) {
         return t == kOnOff[0] || t == kOnOff[1] ? std::string()
                                                 : "expected on or off, got '" + t + "'";
       },
       [](C& c, const std::string& t) { c.breakdown = t == kOnOff[0]; },
       [](const C& c) { return kOnOff[c.breakdown ? 0 : 1]; }},
      // A non-finite loss or parameter (src/train/divergence.h): a finding, or an error (exit 4).
      {"allow-divergence", "", false, "",
       "a non-finite loss or parameter ends training after that epoch, its CSV row marked "
       "diverged, with exit 0 (without: exit 4 naming the epoch, step and rank)",
       any_text, [](C& c, const std::string& t) { c.allow_divergence = t != "false"; },
       [](const C& c) { return std::string(c.allow_divergence ? "true" : "false"); }},
      // The watchdog (src/core/watchdog.h): a stalled rank ends the run instead of hanging it.
      {"timeout", "timeout", false, "S",
       "watchdog: a rank that waits this long (seconds) for a peer in a collective ends the run "
       "with exit 5 naming the rank that never arrived (0: off; default 300); a wait past "
       "min(S/4, 30 s) is warned about and its epoch flagged (CSV stalled_s)",
       [](const std::string& t) {
         double x = 0;
         return parse_double_text(t, x) && std::isfinite(x) && (x == 0 || (x >= 1 && x <= 1e6))
                    ? std::string()
                    : "expected 0 (off) or seconds in [1, 1e6], got '" + t + "'";
       },
       [](C& c, const std::string& t) { c.timeout_s = to_double(t); },
       [](const C& c) { return fmt(c.timeout_s); }},
      // Faults on purpose, to prove the straggler report (src/train/inject.h); train only.
      {"inject", "", false, "SPEC",
       "a fault on purpose: delay:rank=R,phase=P,ms=D[,every=N] (rank R sleeps D ms at the start "
       "of phase P: " + entry_list(injectable_phases()) + ", every N-th step) or "
       "link:rank=R,gbps=G (rank R's links run at G Gb/s on the emulated link); repeat the flag "
       "or join specs with ';'",
       [](const std::string& t) {
         Injections inj;
         try {
           parse_injections(t, inj);  // its messages name --inject
         } catch (const std::exception& e) {
           return reason_of(e);
         }
         return std::string();
       },
       [](C& c, const std::string& t) {
         if (!t.empty()) parse_injections(t, c.inject);  // "": none (get()'s text for none)
       },
       [](const C& c) { return c.inject.describe(); }, true},
      {"data-dir", "data_dir", false, "DIR",
       "Fashion-MNIST IDX directory (default: $DPBENCH_DATA, else /usr/share/datasets/fashion-mnist)",
       any_text, nullptr, nullptr},
  };
}

}  // namespace

void check_thread_budget(int ranks, int threads) {
  const long long total = (long long)ranks * threads;
  DPB_CHECK(threads <= 0 || total <= kMaxThreads,
            "--devices " << ranks << " x --threads " << threads << " = " << total
                         << " CPU math threads in one process, more than " << kMaxThreads
                         << ": lower --threads (0: cores / devices) or --devices");
}

const std::vector<RunOption>& run_options() {
  static const std::vector<RunOption> table = make_table();
  return table;
}

const RunOption& run_option(const std::string& name) {
  return lookup_entry(run_options(), name, "run_option", "run option");
}

const RunOption* find_micro_option(const std::string& micro) {
  for (const RunOption& o : run_options())
    if (!o.micro.empty() && o.micro == micro) return &o;
  return nullptr;
}

std::string run_option_error(const RunOption& o, const std::string& flag, const std::string& why) {
  const std::string own = "--" + o.name;
  if (why.rfind(own, 0) == 0 && (why.size() == own.size() || why[own.size()] == ' ' ||
                                 why[own.size()] == ':'))
    return flag + why.substr(own.size());  // the reason names the option: spell it as flag
  return flag + ": " + why;
}

void check_run_option(const RunOption& o, const std::string& flag, const std::string& text) {
  const std::string why = o.check(text);
  if (!why.empty()) throw Error(run_option_error(o, flag, why));  // a user's error: no file:line
}

void apply_run_option(const RunOption& o, const std::string& flag, const std::string& text,
                      TrainConfig& cfg) {
  check_run_option(o, flag, text);
  if (o.set) o.set(cfg, text);
}

const std::vector<RunEnvVar>& run_env_vars() {
  static const std::vector<RunEnvVar> table = {
      {"DPBENCH_DATA", "DIR",
       "Fashion-MNIST directory (default /usr/share/datasets/fashion-mnist; --data-dir wins)",
       false},
      {"DPB_SPIN_US", "X",
       "how long a rank waiting at a collective's barrier polls before it sleeps, microseconds "
       "(default 100 when the ranks, and with overlap their communication threads, fit the "
       "hardware threads; else 0)"},
      {"DPB_SHM", "0|1",
       "under mpirun, CPU processes of one node: 0 = MPI messages, 1 = shared memory required "
       "(default: shared memory when it can serve)"},
      {"DPB_NODES", "N",
       "emulated nodes when --nodes (--dpb_nodes) is not given: the ranks split into N nodes "
       "(collectives/link.h; default 1)"},
      {"DPB_SHM_ARENA_MB", "N", "the shared arena's address space per process (default 65536)"},
      {"OMP_WAIT_POLICY", "", "OpenMP's, for the CPU backend's math threads"},
      {"GOMP_SPINCOUNT", "N",
       "libgomp's poll before an idle math thread sleeps (default here 10000 unless "
       "OMP_WAIT_POLICY is set: src/core/cpu_info.h)", false},
      {"DPB_PIN", "0|1",
       "rank threads bound to their own CPUs (more ranks than CPUs: in blocks): 1 always, 0 never "
       "(default: while no other process is runnable)",
       false},
  };
  return table;
}

std::string run_env_help() {
  std::string s;
  for (const RunEnvVar& v : run_env_vars()) {
    const std::string head = v.name + (v.value.empty() ? "" : "=" + v.value);
    s += "  " + head + std::string(head.size() < 26 ? 26 - head.size() : 1, ' ') + v.help + "\n";
  }
  return s;
}

}  // namespace dpb
