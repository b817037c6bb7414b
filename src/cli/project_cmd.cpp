// project_cmd.cpp: `dpbench project`: predicted epoch time of k devices on a link, from a profile
// of one device (measured here in a few steps, or read with --profile from a file written by
// --profile-out, e.g. on a GPU machine). The profiled step is the trainer's (the --optimizer and
// --loss table entries, the model of --model/--mlp-*/--data).
//   dpbench project --model resnet18 --devices 4 --grad-sync bucketed --overlap on
//                   --link-gbps 100 --link-latency-us 5 [--shard parameters]
// Two levels (G devices per node x N nodes, issue 26): --devices G*N --nodes N, the links by name
// (--link nvlink-h100 --node-link ib-ndr400) or by number (--node-link-gbps ...); flat against
// hierarchical in one table:
//   dpbench project --model resnet18 --devices 64 --nodes 8 --link nvlink-h100
//                   --node-link ib-ndr400 --compare-allreduce ring,hier
#include "src/cli/project_cmd.h"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <thread>

#include "collectives/allreduce.h"
#include "collectives/registry.h"
#include "src/core/check.h"
#include "src/core/registry.h"
#include "src/core/files.h"
#include "src/train/run_data.h"
#include "src/train/run_options.h"

namespace dpb {
namespace {

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// A named link's name as the JSON and the table say it: the name when the user gave it and
// neither of its numbers was given explicitly (they win over the name).
std::string given_link_name(const CliRunOptions& o, const char* name, const char* gbps,
                            const char* latency) {
  return o.given(name) && !o.given(gbps) && !o.given(latency) ? o.text(name) : "";
}

// "nvlink-h100 (3600 Gb/s, 3.4 us)" or "100 Gb/s, 5 us" or "unlimited".
std::string link_text(const std::string& name, double gbps, double latency_us) {
  char buf[96];
  if (gbps <= 0 && latency_us <= 0) return "unlimited (no link given)";
  std::snprintf(buf, sizeof buf, "%g Gb/s, %g us", gbps, latency_us);
  return name.empty() ? buf : name + " (" + buf + ")";
}

// "" when the algorithm (and, sharded, its reduce-scatter and all-gather) can run on k devices
// of this kind and has a cost model, else why not.
std::string row_refusal(const ProjectConfig& cfg, BackendKind kind) {
  try {
    const AllReduceEntry& e = find_allreduce(cfg.allreduce);
    std::string no = allreduce_refusal(e, cfg.devices, kind);
    if (no.empty() && cfg.shard != ShardMode::None)
      for (Collective c : {Collective::ReduceScatter, Collective::AllGather}) {
        no = allreduce_refusal(shard_collective(cfg.shard, c, cfg.allreduce), cfg.devices, kind);
        if (!no.empty()) break;
      }
    if (no.empty()) check_cost_models(cfg, kind);
    return no;
  } catch (const Error& e) {
    return e.what();
  }
}

// --compare-allreduce: every algorithm x shard mode from one profile, as a table or one JSON.
int print_comparison(const ProjectArgs& a, const StepProfile& prof, const ProjectConfig& base,
                     BackendKind kind) {
  const std::vector<std::string> algs = split_list(a.compare_allreduce);
  std::vector<ShardMode> modes;
  if (a.compare_shard.empty() && a.opts->given("shard")) {
    modes.push_back(base.shard);
  } else if (a.compare_shard.empty() || a.compare_shard == "all") {
    for (const ShardModeEntry& m : shard_modes()) modes.push_back(m.mode);
  } else {
    for (const std::string& m : split_list(a.compare_shard)) modes.push_back(find_shard_mode(m).mode);
  }
  struct Row {
    ProjectConfig cfg;
    Projection p;
    std::string refused;
  };
  std::vector<Row> rows;
  double best = 0;
  for (const std::string& alg : algs)
    for (ShardMode m : modes) {
      Row r;
      r.cfg = base;
      r.cfg.allreduce = alg;
      r.cfg.shard = m;
      // As `dpbench train --shard` (CliRunOptions::apply): gradients and parameters move
      // bucket by bucket unless --grad-sync says otherwise.
      if (shards_gradients(m) && !a.opts->given("grad-sync")) r.cfg.sync.mode = SyncMode::Bucketed;
      r.refused = row_refusal(r.cfg, kind);
      if (r.refused.empty()) {
        r.p = project(prof, r.cfg);
        best = best > 0 ? std::min(best, r.p.epoch_s) : r.p.epoch_s;
      }
      rows.push_back(std::move(r));
    }
  const LinkSpec& l = base.link;
  const LinkSpec x = l.inter();
  if (a.format == "json") {
    nlohmann::json j = {{"model", prof.model},
                        {"devices", base.devices},
                        {"nodes", l.nodes},
                        {"devices_per_node", base.devices / l.nodes},
                        {"link", l.label()},
                        {"rows", nlohmann::json::array()}};
    for (const Row& r : rows) {
      nlohmann::json row = r.refused.empty() ? projection_to_json(prof, r.cfg, r.p)
                                             : nlohmann::json{{"allreduce", r.cfg.allreduce},
                                                              {"shard", to_string(r.cfg.shard)}};
      row["refused"] = r.refused;
      j["rows"].push_back(row);
    }
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("dpbench project: %s, %d x %d devices (%d per node x %d nodes), global batch %d, "
              "%d examples per epoch; grad-sync %s, overlap %s\n",
              prof.model.c_str(), base.devices / l.nodes, l.nodes, base.devices / l.nodes, l.nodes,
              base.batch, base.train_examples, to_string(base.sync.mode).c_str(),
              base.sync.overlap ? "on" : "off");
  std::printf("  inside a node: %s; between nodes: %s\n",
              link_text(base.link_name, l.gbps, l.latency_us).c_str(),
              l.nodes > 1 ? link_text(base.node_link_name, x.gbps, x.latency_us).c_str()
                          : "(one node)");
  std::printf("  profile: %s (%s), batch %d per device, %d thread(s)\n", prof.backend.c_str(),
              prof.device.c_str(), prof.batch, prof.threads);
  std::printf("%-10s %-11s %10s %10s %10s %10s %10s %8s\n", "allreduce", "shard", "step ms",
              "epoch s", "comm s", "exposed s", "calls/step", "x best");
  for (const Row& r : rows) {
    if (!r.refused.empty()) {
      std::printf("%-10s %-11s refused: %s\n", r.cfg.allreduce.c_str(),
                  to_string(r.cfg.shard).c_str(), r.refused.c_str());
      continue;
    }
    std::printf("%-10s %-11s %10.3f %10.3f %10.3f %10.3f %10ld %7.2fx\n", r.cfg.allreduce.c_str(),
                to_string(r.cfg.shard).c_str(), r.p.step_s * 1e3, r.p.epoch_s, r.p.comm_s,
                r.p.exposed_comm_s, r.p.calls, best > 0 ? r.p.epoch_s / best : 1.0);
  }
  return 0;
}

}  // namespace

CLI::App* add_project_command(CLI::App& app, ProjectArgs& a) {
  auto* p = app.add_subcommand(
      "project", "predict the epoch time of k devices on a link from a one-device profile (JSON)");
  p->footer(
      "Prints {epoch_s, compute_s, comm_s, exposed_comm_s, ...}. The profile (forward, each "
      "parameter's gradient-ready time, optimizer) is measured on the fly with the math threads "
      "per rank that `dpbench train` would use, or read with --profile. All-reduce cost: "
      "alpha-beta per algorithm, e.g. ring 2(k-1)(L + n/(kG)); see collectives/link.h. --shard: "
      "the mode's reduce-scatters and all-gathers (ring: (k-1)(L + n/(kG)) each) scheduled as "
      "`dpbench train --shard` runs them (src/train/projection.h). Two levels: --devices G*N "
      "--nodes N, the link inside a node (--link NAME or --link-gbps/--link-latency-us) and "
      "between nodes (--node-link NAME or --node-link-gbps/--node-link-latency-us); a flat "
      "schedule's step that crosses nodes waits for the slow link, hier crosses with 1/G of the "
      "data. --compare-allreduce ring,hier prints every algorithm x shard mode in one table.\n"
      "Environment:\n" + run_env_help());
  // The run options `dpbench train` takes, with its names, limits and help; --backend is the
  // device the profile is measured on, --train-limit the training examples per epoch (0: all).
  // The named links come before their numbers, which win (applied in this order).
  a.opts = std::make_unique<CliRunOptions>(
      p, a.run,
      std::vector<std::string>{"model", "mlp-layers", "mlp-hidden", "mlp-input", "data",
                               "optimizer", "loss", "backend",
                               "devices", "batch", "allreduce", "tune-file", "grad-sync",
                               "overlap", "bucket-mb", "link", "node-link", "link-gbps",
                               "link-latency-us", "nodes", "node-link-gbps",
                               "node-link-latency-us", "train-limit", "threads", "shard"});
  p->add_option("--cores", a.cores,
                "CPU profiles: cores the ranks share (-1: this machine's; 0: a device per rank)")
      ->check(CLI::Range(-1, 1 << 20))->capture_default_str();
  p->add_option("--profile", a.profile_in, "read the one-device profile from this JSON file");
  p->add_option("--profile-out", a.profile_out, "write the profile used to this JSON file");
  p->add_option("--profile-steps", a.profile_steps, "steps to measure (after one warm-up)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  p->add_option("--compare-allreduce", a.compare_allreduce,
                "comma list of all-reduce algorithms (" + entry_names(allreduce_algorithms(), ", ") +
                    "): one row per algorithm x shard mode from one profile, e.g. ring,hier")
      ->type_name("LIST");
  p->add_option("--compare-shard", a.compare_shard,
                "with --compare-allreduce: comma list of --shard modes (" +
                    entry_names(shard_modes(), ", ") + "), or all (default; --shard: its mode)")
      ->type_name("LIST");
  p->add_option("--format", a.format,
                "with --compare-allreduce: table (default) or json (one object, a row each)")
      ->check(CLI::IsMember({"table", "json"}))->capture_default_str();
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
  cfg.link = with_env_nodes(run.link);  // DPB_NODES when --nodes is not given, as train splits
  cfg.link_name = given_link_name(*a.opts, "link", "link-gbps", "link-latency-us");
  cfg.node_link_name =
      given_link_name(*a.opts, "node-link", "node-link-gbps", "node-link-latency-us");
  cfg.shard = run.shard;
  validate_link(cfg.link, "--link-gbps", "--link-latency-us");
  DPB_CHECK(cfg.devices % cfg.link.nodes == 0,
            "--nodes " << cfg.link.nodes << ": the " << cfg.devices
                       << " devices must split into nodes of equal size (a divisor of --devices "
                       << cfg.devices << ")");
  DPB_CHECK(cfg.batch >= cfg.devices, "--batch: the global batch (" << cfg.batch
                                          << ") is smaller than the device count (" << cfg.devices
                                          << ")");
  const bool compare = !a.compare_allreduce.empty();
  DPB_CHECK(compare || (a.compare_shard.empty() && a.format == "table"),
            "--compare-shard and --format go with --compare-allreduce");
  if (compare) {  // the names, before measuring
    DPB_CHECK(!split_list(a.compare_allreduce).empty(), "--compare-allreduce: no algorithm given");
    for (const std::string& alg : split_list(a.compare_allreduce))
      DPB_CHECK(find_entry(allreduce_algorithms(), alg),
                "--compare-allreduce: unknown algorithm '" << alg << "' (valid: "
                                                           << entry_names(allreduce_algorithms())
                                                           << ")");
    if (a.compare_shard != "all")
      for (const std::string& m : split_list(a.compare_shard))
        DPB_CHECK(find_entry(shard_modes(), m), "--compare-shard: unknown mode '"
                                                    << m << "' (valid: all, "
                                                    << entry_names(shard_modes()) << ")");
  } else {
    // Refuses an algorithm without a cost model (--shard: its reduce-scatter and all-gather
    // too), and a bad tuning file, before measuring.
    check_cost_models(cfg, backend.kind);
  }
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
  if (compare) return print_comparison(a, prof, cfg, backend.kind);
  const Projection p = project(prof, cfg);
  std::printf("%s\n", projection_to_json(prof, cfg, p).dump().c_str());
  return 0;
}

}  // namespace dpb
