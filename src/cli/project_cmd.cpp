// project_cmd.cpp: `dpbench project`: predicted epoch time of k devices on a link, from a profile
// of one device (measured here in a few steps, or read with --profile from a file written by
// --profile-out, e.g. on a GPU machine).
//   dpbench project --model resnet18 --devices 4 --grad-sync bucketed --overlap on
//                   --link-gbps 100 --link-latency-us 5
#include "src/cli/project_cmd.h"

#include <algorithm>
#include <cstdio>
#include <thread>

#include "collectives/registry.h"
#include "src/core/check.h"
#include "src/core/registry.h"
#include "src/core/files.h"

namespace dpb {

CLI::App* add_project_command(CLI::App& app, ProjectArgs& a) {
  auto* p = app.add_subcommand(
      "project", "predict the epoch time of k devices on a link from a one-device profile (JSON)");
  p->footer(
      "Prints {epoch_s, compute_s, comm_s, exposed_comm_s, ...}. The profile (forward, each "
      "parameter's gradient-ready time, optimizer) is measured on the fly with the math threads "
      "per rank that `dpbench train` would use, or read with --profile. All-reduce cost: "
      "alpha-beta per algorithm, e.g. ring 2(k-1)(L + n/(kG)); see collectives/link.h.");
  p->add_option("--model", a.model, "lenet | resnet18")
      ->check(CLI::IsMember({"lenet", "resnet18"}))->capture_default_str();
  p->add_option("--backend", a.backend, "cpu | cuda: the device the profile is measured on")
      ->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  p->add_option("--devices", a.cfg.devices, "number of devices (ranks) to project")
      ->check(CLI::Range(1, 4096))->capture_default_str();
  p->add_option("--batch", a.cfg.batch, "global minibatch size (split across devices)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  p->add_option("--allreduce", a.allreduce, "algorithm whose cost model is used ("
                + entry_names(allreduce_algorithms()) + ")")
      ->check(CLI::IsMember(entry_name_list(allreduce_algorithms())))->capture_default_str();
  p->add_option("--tune-file", a.cfg.tune_file, "--allreduce auto: tuning table (\"\": built-in)");
  p->add_option("--grad-sync", a.sync_mode, "per-param | fused | bucketed")
      ->check(CLI::IsMember({"per-param", "fused", "bucketed"}))->capture_default_str();
  p->add_option("--overlap", a.overlap, "on | off")->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  p->add_option("--bucket-mb", a.cfg.sync.bucket_mb, "bucket cap in MB (1e6 bytes)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  p->add_option("--link-gbps", a.cfg.link.gbps, "link bandwidth, Gb/s per direction (0: no limit)")
      ->capture_default_str();
  p->add_option("--link-latency-us", a.cfg.link.latency_us, "link latency per transfer, us")
      ->capture_default_str();
  p->add_option("--train-limit", a.cfg.train_examples, "training examples per epoch")
      ->check(CLI::PositiveNumber)->capture_default_str();
  p->add_option("--threads", a.threads,
                "CPU math threads per rank for the measured profile (0: cores / devices, as train)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  p->add_option("--cores", a.cores,
                "CPU profiles: cores the ranks share (-1: this machine's; 0: a device per rank)")
      ->check(CLI::Range(-1, 1 << 20))->capture_default_str();
  p->add_option("--profile", a.profile_in, "read the one-device profile from this JSON file");
  p->add_option("--profile-out", a.profile_out, "write the profile used to this JSON file");
  p->add_option("--profile-steps", a.profile_steps, "steps to measure (after one warm-up)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  return p;
}

int run_project(ProjectArgs a) {
  ProjectConfig& cfg = a.cfg;
  cfg.sync.mode = parse_sync_mode(a.sync_mode);
  cfg.sync.overlap = a.overlap == "on";
  cfg.allreduce = a.allreduce;
  validate_link(cfg.link, "--link-gbps", "--link-latency-us");
  DPB_CHECK(cfg.batch >= cfg.devices, "--batch: the global batch (" << cfg.batch
                                          << ") is smaller than the device count (" << cfg.devices
                                          << ")");
  // Refuses an algorithm without a cost model, and a bad tuning file, before measuring.
  allreduce_link_cost(cfg.allreduce, 4, 2, cfg.link,
                      a.backend == "cuda" ? BackendKind::Cuda : BackendKind::Cpu, cfg.tune_file);
  const int hw = int(std::max(1u, std::thread::hardware_concurrency()));
  cfg.cores = a.cores < 0 ? hw : a.cores;
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
    DPB_CHECK(prof.model == a.model, "--profile: '" << a.profile_in << "' profiles " << prof.model
                                                    << ", not --model " << a.model);
  } else {
    // The shard and math threads of rank 0 in `dpbench train` with the same flags.
    const int threads = a.threads > 0 ? a.threads : std::max(1, hw / cfg.devices);
    const int shard = (cfg.batch + cfg.devices - 1) / cfg.devices;
    // CPU ranks that share this machine's cores are measured side by side, as they will run.
    // At most 2 x cores of them (the projection stretches compute for the rest).
    const int ranks = a.backend == "cpu" && cfg.cores > 0 ? std::min(cfg.devices, 2 * cfg.cores) : 1;
    std::fprintf(stderr, "dpbench project: measuring %s on %d %s device(s) side by side, %d "
                         "image(s), %d thread(s) each, %d step(s)\n", a.model.c_str(), ranks,
                 a.backend.c_str(), shard, threads, a.profile_steps);
    prof = measure_profile(a.model, a.backend, threads, shard, a.profile_steps, ranks);
  }
  if (!a.profile_out.empty()) write_file_atomic(a.profile_out, profile_to_json(prof).dump(1) + "\n");
  const Projection p = project(prof, cfg);
  std::printf("%s\n", projection_to_json(prof, cfg, p).dump().c_str());
  return 0;
}

}  // namespace dpb
