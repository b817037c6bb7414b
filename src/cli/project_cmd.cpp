// project_cmd.cpp: `dpbench project`: predicted epoch time of k devices on a link, from a profile
// of one device (measured here in a few steps, or read with --profile from a file written by
// --profile-out, e.g. on a GPU machine). The profiled step is the trainer's (the --optimizer and
// --loss table entries, the model of --model/--mlp-*/--data).
//   dpbench project --model resnet18 --devices 4 --grad-sync bucketed --overlap on
//                   --link-gbps 100 --link-latency-us 5 [--shard parameters]
#include "src/cli/project_cmd.h"

#include <algorithm>
#include <cstdio>
#include <thread>

#include "collectives/registry.h"
#include "src/core/check.h"
#include "src/core/registry.h"
#include "src/core/files.h"
#include "src/train/run_data.h"
#include "src/train/run_options.h"

namespace dpb {

CLI::App* add_project_command(CLI::App& app, ProjectArgs& a) {
  auto* p = app.add_subcommand(
      "project", "predict the epoch time of k devices on a link from a one-device profile (JSON)");
  p->footer(
      "Prints {epoch_s, compute_s, comm_s, exposed_comm_s, ...}. The profile (forward, each "
      "parameter's gradient-ready time, optimizer) is measured on the fly with the math threads "
      "per rank that `dpbench train` would use, or read with --profile. All-reduce cost: "
      "alpha-beta per algorithm, e.g. ring 2(k-1)(L + n/(kG)); see collectives/link.h. --shard: "
      "the mode's reduce-scatters and all-gathers (ring: (k-1)(L + n/(kG)) each) scheduled as "
      "`dpbench train --shard` runs them (src/train/projection.h).\n"
      "Environment:\n" + run_env_help());
  // The run options `dpbench train` takes, with its names, limits and help; --backend is the
  // device the profile is measured on, --train-limit the training examples per epoch (0: all).
  a.opts = std::make_unique<CliRunOptions>(
      p, a.run,
      std::vector<std::string>{"model", "mlp-layers", "mlp-hidden", "mlp-input", "data",
                               "optimizer", "loss", "backend",
                               "devices", "batch", "allreduce", "tune-file", "grad-sync",
                               "overlap", "bucket-mb", "link-gbps", "link-latency-us",
                               "train-limit", "threads", "shard"});
  p->add_option("--cores", a.cores,
                "CPU profiles: cores the ranks share (-1: this machine's; 0: a device per rank)")
      ->check(CLI::Range(-1, 1 << 20))->capture_default_str();
  p->add_option("--profile", a.profile_in, "read the one-device profile from this JSON file");
  p->add_option("--profile-out", a.profile_out, "write the profile used to this JSON file");
  p->add_option("--profile-steps", a.profile_steps, "steps to measure (after one warm-up)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  return p;
}

int run_project(ProjectArgs& a) {
  a.opts->apply();  // the shared checks, as `dpbench train` makes them
  settle_data_features(a.run, a.opts->given("mlp-input"));  // Fashion-MNIST: the MLP takes 784
  const TrainConfig& run = a.run;
  const BackendEntry& backend = resolve_backend(run.backend);
  DPB_CHECK(backend.runs_math, "--backend " << backend.name
                                            << ": runs no math, so it has no step time to "
                                               "profile; project from cpu or cuda");
  ProjectConfig cfg;
  cfg.devices = run.devices;
  cfg.batch = run.batch;
  cfg.train_examples = a.opts->int_value("train-limit", 0);
  if (cfg.train_examples == 0) cfg.train_examples = kTrainSetSize;
  cfg.allreduce = run.allreduce;
  cfg.tune_file = run.tune_file;
  cfg.sync = run.sync;
  cfg.link = run.link;
  cfg.shard = run.shard;
  DPB_CHECK(cfg.batch >= cfg.devices, "--batch: the global batch (" << cfg.batch
                                          << ") is smaller than the device count (" << cfg.devices
                                          << ")");
  // Refuses an algorithm without a cost model (--shard: its reduce-scatter and all-gather too),
  // and a bad tuning file, before measuring.
  check_cost_models(cfg, backend.kind);
  const int hw = int(std::max(1u, std::thread::hardware_concurrency()));
  cfg.cores = a.cores < 0 ? hw : a.cores;
  const std::string& model = run.model;
  StepProfile prof;
  if (!a.profile_in.empty()) {
    const std::string text = read_file(a.profile_in);
    DPB_CHECK(!text.empty(), "--profile: cannot read '" << a.profile_in << "' (missing or empty)");
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      DPB_CHECK(false, "--profile: '" << a.profile_in << "' is not JSON: " << e.what());
    }
    prof = profile_from_json(j, "--profile " + a.profile_in);
    DPB_CHECK(prof.model == model, "--profile: '" << a.profile_in << "' profiles " << prof.model
                                                  << ", not --model " << model);
    DPB_CHECK(prof.optimizer == run.optimizer && prof.loss == run.loss,
              "--profile: '" << a.profile_in << "' profiles --optimizer " << prof.optimizer
                             << " --loss " << prof.loss << ", not --optimizer " << run.optimizer
                             << " --loss " << run.loss);
  } else {
    // The shard and math threads of rank 0 in `dpbench train` with the same flags.
    const int threads = run.threads > 0 ? run.threads : std::max(1, hw / cfg.devices);
    const int shard = (cfg.batch + cfg.devices - 1) / cfg.devices;
    // CPU ranks that share this machine's cores are measured side by side, as they will run.
    // At most 2 x cores of them (the projection stretches compute for the rest).
    const int ranks = backend.kind == BackendKind::Cpu && cfg.cores > 0
                          ? std::min(cfg.devices, 2 * cfg.cores) : 1;
    check_thread_budget(ranks, threads);  // the ranks measured side by side, in this process
    std::fprintf(stderr, "dpbench project: measuring %s (optimizer %s, loss %s) on %d %s "
                         "device(s) side by side, %d image(s), %d thread(s) each, %d step(s)\n",
                 model.c_str(), run.optimizer.c_str(), run.loss.c_str(), ranks,
                 backend.name.c_str(), shard, threads, a.profile_steps);
    prof = measure_profile(model, run.model_opts, run.optimizer, run.loss, backend.name, threads,
                           shard, a.profile_steps, ranks);
  }
  if (!a.profile_out.empty()) write_file_atomic(a.profile_out, profile_to_json(prof).dump(1) + "\n");
  const Projection p = project(prof, cfg);
  std::printf("%s\n", projection_to_json(prof, cfg, p).dump().c_str());
  return 0;
}

}  // namespace dpb
