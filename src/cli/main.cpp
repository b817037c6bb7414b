// main.cpp: the `dpbench` command line.
//   dpbench train --model lenet --devices 2 --batch 256 --lr 0.2 --epochs 10 --csv out.csv
//   mpirun -np 2 dpbench train --model lenet ...   # one rank per process (also srun -n 2)
//   dpbench info            # this machine and build: CPU, memory, OS, compiler, library versions,
//                           # GPUs, commit, backends (kernels/machine_info.h)
//   dpbench info --csv-columns  # the training CSV's columns (name, type, meaning) as JSON
//   dpbench project --model resnet18 --devices 4 --link-gbps 100   # predicted epoch (JSON)
//   dpbench fit --model resnet18 --devices 4 --device-mem 24GiB   # largest batch that fits
//   dpbench selftest        # every op and a 2-rank all-reduce per device vs the CPU reference
// Every invalid argument is refused before any work starts, with a message naming it.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <system_error>

#include "collectives/mpi/mpi_transport.h"
#include "collectives/named_links.h"
#include "collectives/registry.h"
#include "kernels/backends.h"
#include "src/cli/selftest.h"
#include "src/core/check.h"
#include "src/core/cpu_info.h"
#include "src/core/registry.h"
#include "src/core/files.h"
#include "src/core/memory.h"
#include "src/core/launcher.h"
#include "kernels/machine_info.h"
#include "src/data/dataset.h"
#include "src/model/model.h"
#include "src/cli/project_cmd.h"
#include "src/cli/fit_cmd.h"
#include "src/cli/run_options_cli.h"
#include "src/train/loss.h"
#include "src/train/optimizer.h"
#include "src/core/trace_json.h"
#include "src/core/watchdog.h"
#include "src/train/breakdown.h"
#include "src/train/divergence.h"
#include "src/train/train_csv.h"
#include "src/train/run_options.h"
#include "src/train/run_data.h"
#include "src/train/trainer.h"
#include "kernels/cuda/cuda_backend.h"

namespace {

using namespace dpb;

// The all-reduce table for --help: name, help and where each algorithm runs.
std::string allreduce_table_help() {
  std::string s;
  for (const AllReduceEntry& e : allreduce_algorithms())
    s += "  " + e.name + std::string(e.name.size() < 10 ? 10 - e.name.size() : 1, ' ') + e.help +
         " [" + allreduce_runs_on(e) + "; ranks as " + allreduce_launchers(e) + "]\n";
  return s;
}

// --backend auto: the table's pick (src/train/run_options.h), said on stderr with the reason.
std::string pick_backend(const std::string& b, bool say) {
  const BackendEntry& pick = resolve_backend(b);
  if (b == pick.name) return b;
  const bool gpu = pick.kind == BackendKind::Cuda;
  if (say)
    std::fprintf(stderr, "dpbench: --backend auto picked %s (%s)\n", pick.name.c_str(),
               gpu ? "CUDA build and a GPU are present"
                   : (cuda_built() ? "no CUDA GPU found" : "built without CUDA"));
  return pick.name;
}

// Outputs of `dpbench train` besides stdout (rank 0 writes them).
struct TrainOutputs {
  std::string csv, dump, steps_csv, trace;
};

// --trace: every rank's spans, one process per rank, named by its device.
void write_run_trace(const std::string& path, const TrainConfig& cfg, const TrainResult& res) {
  TraceInfo info;
  for (int r = 0; r < cfg.devices; ++r) {
    const std::string dev = size_t(r) < res.device_names.size() ? res.device_names[size_t(r)] : "";
    info.process_names.push_back("rank " + std::to_string(r) + (dev.empty() ? "" : ": " + dev));
  }
  info.other = {{"tool", "dpbench train"},
                {"model", cfg.model},
                {"devices", std::to_string(cfg.devices)},
                {"launcher", launcher_name(cfg.launcher())},
                {"backend", cfg.backend},
                {"global_batch", std::to_string(cfg.batch)},
                {"allreduce", res.allreduce_resolved},
                {"grad_sync", to_string(cfg.sync.mode)},
                {"overlap", cfg.sync.overlap ? "on" : "off"},
                {"shard", to_string(cfg.shard)},
                {"link", cfg.link.label()},
                {"inject", cfg.inject.describe()}};
  write_chrome_trace(path, res.trace, info);
}

int run_train(const TrainConfig& cfg_in, const std::string& data_dir, int train_limit,
              int test_limit, const TrainOutputs& out, bool quiet) {
  TrainConfig cfg = cfg_in;
  const std::string& csv_in = out.csv;
  const std::string& dump_in = out.dump;
  // Process mode: only rank 0 prints, writes the CSV and the parameters.
  const bool root = !cfg.procs.active() || cfg.procs.rank == 0;
  const std::string csv = root ? csv_in : "", dump = root ? dump_in : "";
  quiet = quiet || !root;
  // Output paths are checked before any work: a bad --csv must not cost a training run.
  const std::string steps_csv = root ? out.steps_csv : "", trace = root ? out.trace : "";
  check_distinct_outputs({{"--csv", csv}, {"--dump-params", dump}, {"--steps-csv", steps_csv},
                          {"--trace", trace}});
  if (!steps_csv.empty()) check_output_path(steps_csv);
  if (!trace.empty()) check_output_path(trace);
  cfg.trace = !out.trace.empty();  // every rank records its host track for rank 0's file
  DPB_CHECK(cfg.breakdown || out.steps_csv.empty(), "--steps-csv: needs --breakdown on");
  std::optional<CsvAppender> csv_out;
  if (!csv.empty()) csv_out.emplace(csv, train_csv_header());
  if (!dump.empty()) check_output_path(dump);
  cfg.backend = pick_backend(cfg.backend, root);
  DPB_CHECK(dump.empty() || find_backend(cfg.backend).runs_math,
            "--dump-params: --backend " << cfg.backend << " computes no parameters");
  Dataset data = load_run_data(cfg, data_dir, train_limit, test_limit);
  const std::string clamped = clamp_batch_to_data(cfg, data);  // the batch that runs
  if (!clamped.empty() && root) std::fprintf(stderr, "dpbench: %s\n", clamped.c_str());
  validate(cfg, data);
  const bool quick = train_limit > 0 || test_limit > 0;
  if (!quiet)
    std::printf("dpbench train: %s on %d %s device(s) (%s), global batch %d, lr %g, %d epoch(s), "
                "allreduce %s, grad-sync %s, overlap %s, link %s; %d train / %d test examples from "
                "%s\n",
                cfg.model.c_str(), cfg.devices, cfg.backend.c_str(),
                cfg.procs.active() ? (std::to_string(cfg.procs.size) + " processes").c_str()
                                   : "threads of one process",
                cfg.batch, cfg.lr, cfg.epochs,
                cfg.allreduce.c_str(), to_string(cfg.sync.mode).c_str(),
                cfg.sync.overlap ? "on" : "off", cfg.link.label().c_str(), data.train.n,
                data.test.n, data.dir.c_str());
  std::fflush(stdout);
  // A backend that runs no math (meta) planned the run: memory figures only.
  const bool math = find_backend(cfg.backend).runs_math;
  TrainResult res = train(cfg, data, [&](const EpochStats& s, const TrainResult& so_far) {
    if (!quiet && !math)
      std::printf("epoch %2d  planned: peak %s on rank %d (no math ran: no loss, accuracy or "
                  "time)\n",
                  s.epoch, format_mem_bytes(s.peak_mem.total()).c_str(), s.peak_mem_rank);
    if (!quiet && math)
      std::printf("epoch %2d  loss %.4f  train acc %.4f  test acc %.4f  %.2f s  %.0f img/s  "
                  "comm %.3f s  exposed %.3f s  in sync %s%s%s\n",
                  s.epoch, s.train_loss, s.train_acc, s.test_acc, s.epoch_s, s.images_per_s,
                  s.comm_s, s.exposed_comm_s, s.replicas_in_sync ? "yes" : "NO",
                  s.diverged ? "  DIVERGED" : "",
                  s.stalled_s > 0 ? ("  STALLED (a rank waited " + std::to_string(int(s.stalled_s + 0.5)) +
                                     " s for a peer: not a measurement)").c_str() : "");
    std::fflush(stdout);
    // A row per finished epoch (the file replaced atomically), so an interrupted run keeps them.
    if (csv_out)
      csv_out->append(
          {train_csv_row({cfg, data.train.n, data.test.n, quick, so_far.shared_gpu,
                          so_far.allreduce_resolved}, s)});
  });
  if (!root) return 0;  // rank 0 reports (other ranks' results have no epochs)
  if (!dump.empty()) {
    std::string bytes(reinterpret_cast<const char*>(res.final_params.data()),
                      res.final_params.size() * sizeof(float));
    write_file_atomic(dump, bytes);
  }
  if (!quiet && res.allreduce_resolved != cfg.allreduce)
    std::printf("allreduce %s\n", res.allreduce_resolved.c_str());
  double best = 0;
  for (const auto& s : res.epochs) best = std::max(best, s.test_acc);
  if (!quiet && !math)
    std::printf("planned on %s%s: every step of %d epoch(s), the broadcast, gradient sync and "
                "evaluation, allocating what the cpu backend would\n",
                res.device_names[0].c_str(), res.device_names.size() > 1 ? ", ..." : "",
                cfg.epochs);
  if (!quiet && math)
    std::printf("final test acc %.4f, best %.4f; devices: %s%s\n", res.epochs.back().test_acc,
                best, res.device_names[0].c_str(), res.device_names.size() > 1 ? ", ..." : "");
  // Peak device memory, one line per local rank: the total and its categories at that peak.
  if (!quiet)
    for (size_t i = 0; i < res.peak_mem.size(); ++i)
      std::printf("peak memory rank %zu: %s (%s)%s\n", cfg.procs.active() ? size_t(cfg.procs.rank) : i,
                  format_mem_bytes(res.peak_mem[i].total()).c_str(),
                  res.peak_mem[i].breakdown().c_str(),
                  cfg.device_mem ? (" of " + format_mem_bytes(cfg.device_mem)).c_str() : "");
  // Where the time went, per rank (breakdown.h), and the files of it.
  if (!quiet && math && !res.steps.empty()) {
    std::printf("%s", format_breakdown(res.steps).c_str());
    if (!res.waits_known)
      std::printf("(waiting for peers unknown: the ranks' collectives did not match one to one)\n");
  }
  if (!steps_csv.empty() && math) write_steps_csv(steps_csv, res.steps);
  if (!trace.empty() && math) write_run_trace(trace, cfg, res);
  if (!res.epochs.empty() && res.epochs.back().diverged) {  // --allow-divergence: a result
    const int steps = (data.train.n + cfg.batch - 1) / cfg.batch;
    std::fprintf(stderr, "dpbench: %s; stopped after it (--allow-divergence)\n",
                 divergence_message(res.epochs.back(), steps).c_str());
  }
  for (const auto& s : res.epochs)
    if (!s.replicas_in_sync && !s.diverged) {  // non-finite parameters compare as nothing
      std::fprintf(stderr, "dpbench: replicas diverged in epoch %d (max |diff| %g)\n", s.epoch,
                   s.max_replica_diff);
      return 3;
    }
  return 0;
}

// machine_info() and, for planners (scripts/suitelib.py), each all-reduce (reduce-scatter,
// all-gather) algorithm's backends,
// launchers and the most ranks it lets share one GPU (null: any); then the backend, model,
// grad-sync, optimizer and loss tables (tests/registry_lists_test.py checks them against --help).
int run_info() {
  nlohmann::ordered_json j = machine_info();
  // allreduce_algorithms, reducescatter_algorithms, allgather_algorithms (collectives/shard.h).
  for (Collective c : kCollectives) {
    nlohmann::ordered_json algs = nlohmann::ordered_json::array();
    for (const AllReduceEntry& e : collective_algorithms(c)) {
      nlohmann::ordered_json runs_on = nlohmann::ordered_json::array(), launchers = runs_on;
      for (const BackendEntry& b : backends())
        if (e.runs_on.empty() || std::count(e.runs_on.begin(), e.runs_on.end(), b.kind))
          runs_on.push_back(b.name);
      if (e.launchers & AllReduceEntry::kThreads) launchers.push_back("threads");
      if (e.launchers & AllReduceEntry::kProcesses) launchers.push_back("processes");
      algs.push_back({{"name", e.name}, {"runs_on", runs_on}, {"launchers", launchers},
                      {"max_ranks_per_gpu", e.max_ranks_per_gpu
                                                ? nlohmann::ordered_json(e.max_ranks_per_gpu())
                                                : nlohmann::ordered_json()}});
    }
    j[std::string(collective_family(c)) + "_algorithms"] = algs;
  }
  // The other tables, so that scripts and tests iterate the binaries' lists, not their own.
  nlohmann::ordered_json bs = nlohmann::ordered_json::array(), ms = bs, ss = bs;
  for (const BackendEntry& b : backends()) {
    const std::string why = b.unavailable();
    bs.push_back({{"name", b.name}, {"help", b.help}, {"available", why.empty()},
                  {"unavailable", why}, {"emulated_link", b.emulated_link},
                  {"runs_math", b.runs_math}});
  }
  for (const ModelEntry& m : models())
    ms.push_back({{"name", m.name}, {"help", m.help}, {"bench_batch", m.bench_batch}});
  for (const SyncModeEntry& m : sync_modes()) ss.push_back({{"name", m.name}, {"help", m.help}});
  j["backends"] = bs;
  j["max_ranks"] = kMaxRanks;  // --devices's limit (run_suite.py checks its --devices)
  j["models"] = ms;
  j["grad_sync_modes"] = ss;
  nlohmann::ordered_json os = nlohmann::ordered_json::array(), ls = os;
  for (const OptimizerEntry& o : optimizers())
    os.push_back({{"name", o.name}, {"help", o.help}, {"state_floats", o.state_floats}});
  for (const LossEntry& l : losses()) ls.push_back({{"name", l.name}, {"help", l.help}});
  j["optimizers"] = os;
  j["losses"] = ls;
  nlohmann::ordered_json nl = nlohmann::ordered_json::array();  // --link, --node-link
  for (const NamedLink& l : named_links())
    nl.push_back({{"name", l.name}, {"help", l.help}, {"gbps", l.gbps},
                  {"latency_us", l.latency_us}});
  j["named_links"] = nl;
  std::fputs((j.dump(2) + "\n").c_str(), stdout);
  return 0;
}

// `dpbench train`'s flags: the shared run options (src/train/run_options.h) and its own outputs.
struct TrainArgs {
  TrainConfig cfg;
  TrainOutputs out;
  bool quiet = false;
  std::unique_ptr<CliRunOptions> run;
};

CLI::App* add_train_command(CLI::App& app, TrainArgs& a) {
  CLI::App* tr = app.add_subcommand("train", "train a model data-parallel and report per epoch");
  tr->footer(
      "Models:\n" + entry_help(models()) + "Backends:\n" + entry_help(backends()) +
      "All-reduce algorithms (where they run):\n" + allreduce_table_help() +
      "Gradient sync modes:\n" + entry_help(sync_modes()) + "Optimizers:\n" +
      entry_help(optimizers()) + "Losses:\n" + entry_help(losses()) +
      "\nOne process per rank: mpirun -np K dpbench train ... (or srun -n K): detected from the "
      "launcher's environment (OMPI_COMM_WORLD_*, PMI_*/PMIX_*, SLURM_* in a job step); only rank 0 "
      "prints and writes files; an error on any rank ends the job (README: Running on a cluster)."
      "\nEnvironment:\n" + run_env_help());
  a.cfg.backend = kAutoBackend;  // train's default; project measures on cpu unless told
  a.run = std::make_unique<CliRunOptions>(
      tr, a.cfg,
      std::vector<std::string>{"model", "mlp-layers", "mlp-hidden", "mlp-input", "data", "backend",
                               "devices", "batch", "lr", "optimizer", "loss", "epochs",
                               "warmup-epochs", "allreduce",
                               "tune-file", "grad-sync", "overlap", "bucket-mb", "shard", "seed", "threads",
                               "link", "node-link", "link-gbps", "link-latency-us", "nodes",
                               "node-link-gbps", "node-link-latency-us", "tf32", "device-mem", "train-limit",
                               "test-limit", "data-dir", "inject", "breakdown",
                               "allow-divergence", "timeout"});
  tr->add_option("--steps-csv", a.out.steps_csv,
                 "write one row per rank and step: each phase's seconds (data, forward, backward, "
                 "optimizer, exposed comm, comm busy, waiting for peers, own comm)");
  tr->add_option("--trace", a.out.trace,
                 "write every rank's timeline as a Chrome trace (JSON: Perfetto, chrome://tracing): "
                 "a process per rank, tracks host / compute / comm");
  tr->add_option("--csv", a.out.csv,
                 "append one row per epoch to this CSV as each epoch ends (header written once)");
  tr->add_option("--dump-params", a.out.dump,
                 "write replica 0's final parameters as raw little-endian float32, model order");
  tr->add_flag("--quiet", a.quiet, "no per-epoch lines on stdout");
  return tr;
}

// `dpbench train`: ranks as threads, or (started by mpirun/srun) this process's one rank. In
// process mode an error on this rank is printed as "rank R: ..." and ends the whole job.
int train_main(TrainArgs& t) {
  LaunchEnv env;
  std::optional<MpiSession> mpi;
  std::optional<Watchdog> dog;  // after mpi: stopped before MPI_Finalize
  // Exit 3, one message (every process ends: the job's abort).
  auto out_of_memory = [&](const std::string& msg) {
    if (mpi && mpi->size() > 1) mpi_abort_job(mpi->rank(), msg, 3);
    std::fprintf(stderr, "dpbench: %s\n", msg.c_str());
    return 3;
  };
  // Exit `code`, the message with its rank under mpirun ("error: " for bad input, code 2).
  auto failed = [&](const std::string& msg, int code) {
    if (mpi && mpi->size() > 1) mpi_abort_job(mpi->rank(), msg, code);  // ends every process
    if (env.processes)
      std::fprintf(stderr, "dpbench: %s\n", rank_error_message(env.rank, msg).c_str());
    else
      std::fprintf(stderr, "dpbench: %s%s\n", code == 2 ? "error: " : "", msg.c_str());
    return code;
  };
  try {
    env = detect_launch_env();
    t.run->apply();  // every value checked by the shared table, before any work
    settle_data_features(t.cfg, t.run->given("mlp-input"));  // Fashion-MNIST: the MLP takes 784
    if (env.processes) {
      mpi.emplace();
      if (mpi->size() > 1) {  // one process (a PMIx launch without a size): ranks as threads
        t.cfg.procs = {mpi->size(), mpi->rank(), mpi->local_rank(), mpi->local_size()};
        if (!t.run->given("devices")) t.cfg.devices = mpi->size();
      }
    }
    // A stalled rank ends every rank with exit 5 (src/core/watchdog.h); processes: the job.
    WatchdogOptions wo;
    wo.timeout_s = t.cfg.timeout_s;
    if (mpi && mpi->size() > 1)
      wo.on_timeout = [rank = mpi->rank()](const std::string& msg) {
        mpi_abort_job(rank, "watchdog: " + msg, kExitStalled);
      };
    dog.emplace(std::move(wo));
    return run_train(t.cfg, t.run->text("data-dir"), t.run->int_value("train-limit", 0),
                     t.run->int_value("test-limit", 0), t.out, t.quiet);
  } catch (const Diverged& e) {  // every rank stopped after the same epoch: no abort, rank 0 says
    if (!env.processes || env.rank == 0) std::fprintf(stderr, "dpbench: %s\n", e.what());
    return 4;
  } catch (const OutOfMemory& e) {  // emulated (--device-mem) or real: exit 3, one message
    return out_of_memory(e.what());
  } catch (const std::bad_alloc&) {  // the host heap refused (ulimit -v) outside the ledger
    return out_of_memory("out of memory: the host heap refused an allocation" + address_limit_note());
  } catch (const std::system_error& e) {
    // A thread that could not start (EAGAIN): under ulimit -v its stack was refused, memory.
    if (e.code() == std::errc::resource_unavailable_try_again && address_space_limit())
      return failed(std::string("out of memory: could not start a thread (") + e.what() +
                        "): its stack could not be mapped" + address_limit_note(),
                    3);
    return failed(e.what(), 2);
  } catch (const std::exception& e) {
    return failed(e.what(), 2);
  }
}

}  // namespace

int main(int argc, char** argv) {
  dpb::prefer_yielding_openmp(argv);  // GOMP_SPINCOUNT before libgomp reads it: re-executes once
  dpb::exit_3_on_crash_under_address_limit("dpbench");  // ulimit -v: exit 3, never a signal
  CLI::App app{"dpbench: data-parallel training benchmarks (LeNet and ResNet-18 on Fashion-MNIST)"};
  app.require_subcommand(1);
  TrainArgs train_args;
  add_train_command(app, train_args);
  auto* info = app.add_subcommand(
      "info", "print this machine and build (CPU, memory, OS, compiler, library versions, GPUs, "
              "commit) as JSON");
  bool csv_columns = false;
  info->add_flag("--csv-columns", csv_columns,
                 "print the training CSV's columns instead (scripts/train_csv_columns.json)");
  ProjectArgs project_args;
  auto* project = add_project_command(app, project_args);
  FitArgs fit_args;
  auto* fit = add_fit_command(app, fit_args);
  SelftestOptions selftest;
  auto* selftest_cmd = add_selftest_command(app, selftest);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every bad command line (unknown or repeated flag, bad value)
    // is exit 2 like other bad input, not CLI11's own codes (105-114).
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    if (info->parsed() && csv_columns) {
      std::fputs(train_csv_schema_json().c_str(), stdout);
      return 0;
    }
    if (info->parsed()) return run_info();
    if (project->parsed()) return run_project(project_args);
    if (fit->parsed()) return run_fit(fit_args);
    if (selftest_cmd->parsed()) return run_selftest(selftest);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dpbench: error: %s\n", e.what());
    return 2;
  }
  return train_main(train_args);
}
