// fit_cmd.cpp: `dpbench fit` (see fit_cmd.h). A plan is what `dpbench train` would run for one
// step at the value tried: train() itself (src/train/trainer.h) on one global batch of examples
// and one full evaluation batch, so its peak is the real run's (the step, evaluation and rank 0's
// evaluation-sized replica), on devices of the --device-mem capacity; an OutOfMemory means the
// value does not fit. Memory grows with the batch and with the depth, so the search doubles from
// 1 until a plan does not fit, then bisects. The plans run on the meta backend (counts what the
// CPU backend allocates, runs no math); --check runs the answer and the next value for real.
#include "src/cli/fit_cmd.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "kernels/backends.h"
#include "src/core/check.h"
#include "src/core/files.h"
#include "src/core/memory.h"
#include "src/core/registry.h"
#include "src/data/synthetic.h"
#include "src/model/model.h"
#include "src/train/run_data.h"
#include "src/train/run_options.h"
#include "src/train/step.h"
#include "src/train/trainer.h"

namespace dpb {
namespace {

// Every plan of the search runs here (and nowhere else: a plan's answer is the meta backend's).
constexpr const char* kPlanBackend = "meta";

using Clock = std::chrono::steady_clock;

// What the search varies (--vary): one entry per axis.
struct FitAxis {
  std::string name, help;
  std::string unit;  // the answer's words: "batch per device"
  // The largest value the search tries for cfg, and what that limit is.
  int (*limit)(const TrainConfig& cfg);
  std::string limit_why;
  void (*set)(TrainConfig& cfg, int value);  // cfg for the value
  // Refuses what the axis cannot vary, naming the option (run after the shared checks).
  void (*validate)(const TrainConfig& cfg, const CliRunOptions& opts);
};

// The largest value o's check accepts: the run-option table's own limit (bisected on its check,
// so that fit and train cannot disagree about it).
int largest_accepted(const RunOption& o) {
  int lo = 1, hi = 1 << 30;  // lo accepted (checked below), hi refused or untried
  DPB_CHECK(o.check("1").empty(), "--" << o.name << " refuses 1");
  if (o.check(std::to_string(hi)).empty()) return hi;
  while (hi - lo > 1) {
    const int mid = lo + (hi - lo) / 2;
    (o.check(std::to_string(mid)).empty() ? lo : hi) = mid;
  }
  return lo;
}

// Whether --mlp-layers changes the model's parameters (its depth).
bool has_layers(const std::string& model, ModelOptions opts) {
  opts.mlp_layers = 1;
  const size_t one = model_param_layout(model, opts).size();
  opts.mlp_layers = 2;
  return model_param_layout(model, opts).size() != one;
}

const std::vector<FitAxis>& fit_axes() {
  static const std::vector<FitAxis> axes = {
      {"batch", "the largest batch per device (global batch = devices x it)", "batch per device",
       [](const TrainConfig& c) { return kMaxBatch / c.devices; },
       "the global batch limit " + std::to_string(kMaxBatch) + " (kMaxBatch) over the devices",
       [](TrainConfig& c, int b) { c.batch = b * c.devices; },
       [](const TrainConfig&, const CliRunOptions& o) {
         DPB_CHECK(!o.given("batch"), "--batch: fit searches the batch per device; --batch (the "
                                      "global batch) is for --vary layers");
       }},
      {"layers", "the deepest MLP (--mlp-layers) at the global --batch", "depth (hidden layers)",
       [](const TrainConfig&) { return largest_accepted(run_option("mlp-layers")); },
       "the --mlp-layers limit",
       [](TrainConfig& c, int n) { c.model_opts.mlp_layers = n; },
       [](const TrainConfig& c, const CliRunOptions& o) {
         std::string deep;
         for (const ModelEntry& m : models())
           if (has_layers(m.name, c.model_opts)) deep += (deep.empty() ? "" : ", ") + m.name;
         DPB_CHECK(has_layers(c.model, c.model_opts),
                   "--vary layers: --model " << c.model << " has no depth that --mlp-layers sets "
                                             "(models that have: " << deep << ")");
         DPB_CHECK(!o.given("mlp-layers"), "--mlp-layers: fit --vary layers searches it; leave "
                                           "it out");
       }},
  };
  return axes;
}

// The data one plan reads: one global batch of training examples (one step) and one full
// evaluation batch (rank 0 evaluates in batches of max(shard, 64): step.h, trainer.cpp), of the
// model's input size. Memory does not depend on the values, so the notebook's batch of ones
// (stored once, src/data/synthetic.h) stands for any source: nothing is read from disk.
Dataset plan_data(const TrainConfig& cfg) {
  const int shard = (cfg.batch + cfg.devices - 1) / cfg.devices;
  return synthetic_dataset(model_input_size(cfg.model, cfg.model_opts), cfg.batch,
                           std::max(shard, 64));
}

struct Plan {
  int value = 0;
  bool fits = false;
  MemoryUsage peak;   // the highest rank's peak (when it fits)
  int peak_rank = 0;
  std::string oom;    // the out-of-memory message (when it does not)
  double seconds = 0;
};

// One step of `dpbench train` with cfg at `value` of the axis, on `backend`, each device holding
// `capacity` bytes (0: unlimited).
Plan run_plan(TrainConfig cfg, const FitAxis& axis, int value, const std::string& backend,
              size_t capacity) {
  axis.set(cfg, value);
  cfg.backend = backend;
  cfg.device_mem = capacity;
  cfg.epochs = 1;
  cfg.warmup_epochs = 0;
  cfg.progress = false;
  const Dataset data = plan_data(cfg);
  Plan p;
  p.value = value;
  const auto t0 = Clock::now();
  try {
    const TrainResult r = train(cfg, data);
    p.fits = true;
    for (size_t i = 0; i < r.peak_mem.size(); ++i)
      if (i == 0 || r.peak_mem[i].total() > p.peak.total()) p.peak = r.peak_mem[i], p.peak_rank = int(i);
  } catch (const OutOfMemory& e) {
    p.oom = e.what();
  }
  p.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return p;
}

struct Search {
  std::vector<Plan> plans;  // in the order run
  int limit = 0;
  int best = -1;            // index into plans of the largest value that fits; -1: none
  int first_no = -1;        // ... of the smallest value that does not; -1: none tried
  double seconds = 0;
  bool limit_hit() const { return best >= 0 && plans[best].value == limit; }
};

// Exponential (1, 2, 4, ...) then binary search for the largest value in [1, limit] that fits.
Search search(const TrainConfig& cfg, const FitAxis& axis) {
  Search s;
  s.limit = axis.limit(cfg);
  const auto t0 = Clock::now();
  int lo = 0, hi = s.limit + 1;  // lo fits (0: none known), hi does not (limit + 1: none known)
  auto tryv = [&](int v) {
    s.plans.push_back(run_plan(cfg, axis, v, kPlanBackend, cfg.device_mem));
    const int i = int(s.plans.size()) - 1;
    if (s.plans[i].fits) lo = v, s.best = i;
    else hi = v, s.first_no = i;
    return s.plans[i].fits;
  };
  for (int v = 1; tryv(v) && v < s.limit; v = int(std::min<long long>(2LL * v, s.limit))) {}
  while (hi - lo > 1) tryv(lo + (hi - lo) / 2);
  s.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return s;
}

std::string mib(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", double(bytes) / (1 << 20));
  return buf;
}

// "lenet, sgd, xent loss" and, for a model with options, its shape.
std::string run_words(const TrainConfig& c) {
  return c.model + " (optimizer " + c.optimizer + ", loss " + c.loss + ", data " + c.data + ")";
}

std::string global_words(const TrainConfig& c, const FitAxis& axis, int value) {
  TrainConfig t = c;
  axis.set(t, value);
  return "global batch " + std::to_string(t.batch) + " on " + std::to_string(t.devices) +
         " device" + (t.devices == 1 ? "" : "s");
}

void print_breakdown(const MemoryUsage& m) {
  for (MemCategory c : kMemCategoryList)
    std::printf("    %-16s %12s MiB\n", mem_category_name(c), mib(m[c]).c_str());
  std::printf("    %-16s %12s MiB\n", "total", mib(m.total()).c_str());
}

nlohmann::ordered_json breakdown_json(const MemoryUsage& m) {
  nlohmann::ordered_json j;
  for (MemCategory c : kMemCategoryList) j[mem_category_name(c)] = m[c];
  return j;
}

struct CheckRun {
  int value = 0;
  bool expect_fit = false;
  Plan plan;
};

// The tidy CSV of --out: one row per fit (appended, so the runs of a suite share a file).
const char* kCsvHeader =
    "impl,model,optimizer,loss,data,mlp_layers,mlp_hidden,mlp_input,devices,shard,device_mem_bytes,"
    "vary,plan_backend,fits,answer,batch_per_device,global_batch,limit,limit_hit,peak_mem_bytes,"
    "peak_mem_parameters_bytes,peak_mem_gradients_bytes,peak_mem_optimizer_state_bytes,"
    "peak_mem_activations_bytes,peak_mem_temporaries_bytes,peak_mem_workspace_bytes,"
    "peak_mem_comm_bytes,peak_mem_data_bytes,plans,search_s,check_backend,check";
static_assert(kMemCategories == 8, "a memory category needs its column in fit's CSV");

}  // namespace

CLI::App* add_fit_command(CLI::App& app, FitArgs& a) {
  auto* f = app.add_subcommand(
      "fit", "the largest batch per device (or deepest MLP) that fits devices of --device-mem");
  std::string axes;
  for (const FitAxis& x : fit_axes()) axes += "  " + x.name + std::string(8 - x.name.size(), ' ') + x.help + "\n";
  f->footer(
      "Each value tried is planned as one step of `dpbench train` with the same options (the "
      "step, evaluation and rank 0's evaluation replica) on the " + std::string(kPlanBackend) +
      " backend, devices of --device-mem each; memory grows with the value, so the search "
      "doubles from 1, then bisects. Prints the answer, the global batch, the peak per device by "
      "category, the plans and their time. Options of train that do not change memory (--epochs, "
      "--lr, --warmup-epochs, --train-limit, --test-limit, --data-dir) are accepted and ignored.\n"
      "--vary:\n" + axes +
      "Exit status: 0 an answer (and --check agreed); 1 --check disagreed with the plan; 2 bad "
      "input; 3 not even 1 fits (the breakdown at 1 is printed).\n");
  // Every run option of `dpbench train`: a train command line becomes a fit command line.
  std::vector<std::string> names;
  for (const RunOption& o : run_options()) names.push_back(o.name);
  a.run.backend = kAutoBackend;  // --check's backend: train's default
  a.opts = std::make_unique<CliRunOptions>(f, a.run, names);
  f->add_option("--vary", a.vary, "what to search: " + entry_names(fit_axes(), " | "))
      ->capture_default_str();
  f->add_flag("--check", a.check,
              "then run one real step at the answer and at the next value on --backend and "
              "report fits / out of memory for each");
  f->add_option("--json", a.json, "write the result as JSON to this file");
  f->add_option("--out", a.out,
                "append the result as one row of a CSV to this file (header written once)");
  return f;
}

int run_fit(FitArgs& a) {
  a.opts->apply();  // the shared checks, as `dpbench train` makes them
  settle_data_features(a.run, a.opts->given("mlp-input"));  // Fashion-MNIST: the MLP takes 784
  DPB_CHECK(a.opts->given("device-mem") && a.run.device_mem > 0,
            "--device-mem: required by fit: each device's capacity, e.g. 24GiB, 80GB, 512MiB");
  const FitAxis& axis = lookup_entry(fit_axes(), a.vary, "--vary", "axis");
  axis.validate(a.run, *a.opts);
  if (!a.json.empty()) check_output_path(a.json);  // before any work
  std::optional<CsvAppender> csv;
  if (!a.out.empty()) csv.emplace(a.out, kCsvHeader);
  const TrainConfig& cfg = a.run;
  const size_t cap = cfg.device_mem;

  const Search s = search(cfg, axis);
  const bool fits = s.best >= 0;
  const int answer = fits ? s.plans[s.best].value : 0;
  Plan at1;  // nothing fits: the run at 1 without a capacity, for its breakdown
  if (!fits) at1 = run_plan(cfg, axis, 1, kPlanBackend, 0);
  const Plan& top = fits ? s.plans[s.best] : at1;

  std::printf("dpbench fit: %s on %d device%s of %s (%zu bytes) each; planned on %s\n",
              run_words(cfg).c_str(), cfg.devices, cfg.devices == 1 ? "" : "s",
              format_mem_bytes(cap).c_str(), cap, kPlanBackend);
  if (fits) {
    std::printf("  largest %s that fits: %d (%s)\n", axis.unit.c_str(), answer,
                global_words(cfg, axis, answer).c_str());
    if (s.limit_hit())
      std::printf("  the search hit its limit: %d is %s; larger values were not tried\n",
                  s.limit, axis.limit_why.c_str());
    else
      std::printf("  %s %d: out of memory\n", axis.unit.c_str(), s.plans[s.first_no].value);
    std::printf("  peak per device at %d: %s on rank %d, %.1f%% of the capacity:\n", answer,
                format_mem_bytes(top.peak.total()).c_str(), top.peak_rank,
                100.0 * double(top.peak.total()) / double(cap));
  } else {
    std::printf("  nothing fits: %s 1 (%s) needs %s on rank %d, more than the %s capacity:\n",
                axis.unit.c_str(), global_words(cfg, axis, 1).c_str(),
                format_mem_bytes(top.peak.total()).c_str(), top.peak_rank,
                format_mem_bytes(cap).c_str());
  }
  print_breakdown(top.peak);
  std::printf("  search: %zu plans in %.2f s\n", s.plans.size(), s.seconds);
  std::fflush(stdout);

  // --check: the answer and the next value, for real on --backend.
  std::vector<CheckRun> checks;
  std::string check_backend;
  bool check_ok = true;
  if (a.check) {
    const BackendEntry& b = resolve_backend(cfg.backend);
    check_backend = b.name;
    if (fits) checks.push_back({answer, true, {}});
    if (!s.limit_hit()) checks.push_back({fits ? answer + 1 : 1, false, {}});
    for (CheckRun& c : checks) {
      c.plan = run_plan(cfg, axis, c.value, check_backend, cap);
      const bool ok = c.plan.fits == c.expect_fit;
      check_ok = check_ok && ok;
      std::printf("  check on %s: %s %d: %s (%s)\n", check_backend.c_str(), axis.unit.c_str(),
                  c.value, c.plan.fits ? "fits" : "out of memory",
                  ok ? "as planned"
                     : c.expect_fit ? "MISMATCH: planned to fit" : "MISMATCH: planned not to fit");
      if (c.plan.fits && !ok)
        std::printf("    peak %s on rank %d\n", format_mem_bytes(c.plan.peak.total()).c_str(),
                    c.plan.peak_rank);
      if (!c.plan.fits && !ok) std::printf("    %s\n", c.plan.oom.c_str());
    }
    if (s.limit_hit())
      std::printf("  check: %d + 1 is past the limit, not run\n", answer);
    std::fflush(stdout);
  }

  if (!a.json.empty()) {
    nlohmann::ordered_json j;
    j["model"] = cfg.model;
    j["optimizer"] = cfg.optimizer;
    j["loss"] = cfg.loss;
    j["data"] = cfg.data;
    j["mlp"] = {{"layers", cfg.model_opts.mlp_layers}, {"hidden", cfg.model_opts.mlp_hidden},
                {"input", cfg.model_opts.mlp_input}};
    j["devices"] = cfg.devices;
    j["shard"] = to_string(cfg.shard);
    j["device_mem_bytes"] = cap;
    j["vary"] = axis.name;
    j["plan_backend"] = kPlanBackend;
    j["fits"] = fits;
    j["answer"] = answer;
    TrainConfig at = cfg;
    axis.set(at, std::max(answer, 1));
    j["batch_per_device"] = fits ? (at.batch + at.devices - 1) / at.devices : 0;
    j["global_batch"] = fits ? at.batch : 0;
    j["limit"] = s.limit;
    j["limit_hit"] = s.limit_hit();
    j["peak_at"] = fits ? answer : 1;
    j["peak_mem_bytes"] = top.peak.total();
    j["peak_rank"] = top.peak_rank;
    j["peak_mem"] = breakdown_json(top.peak);
    nlohmann::ordered_json plans = nlohmann::ordered_json::array();
    for (const Plan& p : s.plans)
      plans.push_back({{"value", p.value}, {"fits", p.fits},
                       {"peak_mem_bytes", p.fits ? p.peak.total() : 0}, {"seconds", p.seconds}});
    j["plans"] = plans;
    j["search_s"] = s.seconds;
    if (a.check) {
      nlohmann::ordered_json runs = nlohmann::ordered_json::array();
      for (const CheckRun& c : checks)
        runs.push_back({{"value", c.value}, {"expected", c.expect_fit ? "fits" : "out of memory"},
                        {"got", c.plan.fits ? "fits" : "out of memory"},
                        {"peak_mem_bytes", c.plan.fits ? c.plan.peak.total() : 0}});
      j["check"] = {{"backend", check_backend}, {"ok", check_ok}, {"runs", runs}};
    }
    write_file_atomic(a.json, j.dump(2) + "\n");
  }
  if (csv) {
    TrainConfig at = cfg;
    axis.set(at, std::max(answer, 1));
    std::ostringstream r;
    r << "dpbench," << cfg.model << ',' << cfg.optimizer << ',' << cfg.loss << ',' << cfg.data
      << ',' << at.model_opts.mlp_layers << ',' << cfg.model_opts.mlp_hidden << ','
      << cfg.model_opts.mlp_input << ',' << cfg.devices << ',' << to_string(cfg.shard) << ','
      << cap << ',' << axis.name << ','
      << kPlanBackend << ',' << int(fits) << ',' << answer << ','
      << (fits ? (at.batch + at.devices - 1) / at.devices : 0) << ',' << (fits ? at.batch : 0)
      << ',' << s.limit << ',' << int(s.limit_hit()) << ',' << top.peak.total();
    for (MemCategory c : kMemCategoryList) r << ',' << top.peak[c];
    r << ',' << s.plans.size() << ',' << s.seconds << ',' << check_backend << ','
      << (a.check ? (check_ok ? "ok" : "mismatch") : "");
    csv->append({r.str()});
  }

  if (!check_ok) {
    std::fprintf(stderr, "dpbench fit: --check on %s disagrees with the plan (see above)\n",
                 check_backend.c_str());
    return 1;
  }
  if (!fits) {
    std::fprintf(stderr,
                 "dpbench fit: out of memory: not even %s 1 fits a device of %s (%s needs %s)\n",
                 axis.unit.c_str(), format_mem_bytes(cap).c_str(),
                 global_words(cfg, axis, 1).c_str(), format_mem_bytes(top.peak.total()).c_str());
    return 3;
  }
  return 0;
}

}  // namespace dpb
