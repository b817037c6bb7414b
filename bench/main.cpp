// main.cpp: dpbench-micro, the Google Benchmark microbenchmarks of dpbench.
//   build/dpbench-micro                                   # everything, JSON to results/
//   build/dpbench-micro --benchmark_filter='allreduce/cpu/ring/ranks:2/'
//       --benchmark_out=results/ring.json --benchmark_repetitions=5   (one command line)
//   build/dpbench-micro --help                            # our flags, then Google Benchmark's
//   mpirun -np 2 build/dpbench-micro --benchmark_filter='allreduce/cpu/(ring|mpi)/'
//       # one rank per process: allreduce/<backend>/<alg>/procs:2/bytes:<n>; rank 0 reports
// Families (one file each): membw + allreduce, reducescatter, allgather (allreduce_bench.cpp), gradsync
// (gradsync_bench.cpp), overlap (overlap_bench.cpp). Registered per backend present (cpu always,
// cuda when a GPU is found) and per rank count. scripts/bench_to_csv.py turns the JSON into CSV.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "collectives/mpi/mpi_transport.h"
#include "collectives/registry.h"
#include "src/core/check.h"
#include "src/core/cpu_info.h"
#include "src/core/files.h"
#include "src/core/registry.h"
#include "src/core/launcher.h"
#include "src/core/watchdog.h"
#include "kernels/machine_info.h"
#include "src/data/dataset.h"
#include "src/model/model.h"
#include "src/train/agree.h"
#include "src/train/run_options.h"


namespace {

using dpb::bench::BenchConfig;
using dpb::bench::die;
using dpb::bench::flag_on;
using dpb::bench::parse_dpb_flags;
using dpb::bench::print_usage;

// The machine and build facts every dpbench output shares (kernels/machine_info.h), then this
// run's settings.
void add_context(const BenchConfig& cfg, const std::vector<const dpb::BackendEntry*>& backends) {
  for (const auto& [key, value] : dpb::machine_info_text()) benchmark::AddCustomContext(key, value);
  std::string b;
  for (const dpb::BackendEntry* e : backends) b += (b.empty() ? "" : ",") + e->name;
  benchmark::AddCustomContext("backends", b);
  benchmark::AddCustomContext("overlap_cpu_threads_per_rank",
                              cfg.run.threads > 0 ? std::to_string(cfg.run.threads) : "cores/k");
  benchmark::AddCustomContext("link", cfg.run.link.label());
  benchmark::AddCustomContext("link_gbps", std::to_string(cfg.run.link.gbps));
  benchmark::AddCustomContext("link_latency_us", std::to_string(cfg.run.link.latency_us));
  const char* spin = std::getenv("DPB_SPIN_US");
  benchmark::AddCustomContext("barrier_spin_us",
                              spin ? spin : "default (100 if ranks (+ comm threads) <= cores)");
  benchmark::AddCustomContext("allreduce_auto_table",
                              cfg.run.tune_file.empty() ? "default (collectives/tuning/default.json)"
                                                    : cfg.run.tune_file);
  const std::string dir = dpb::resolve_data_dir(cfg.data_dir);
  benchmark::AddCustomContext("dataset", std::filesystem::exists(dir) ? "fashion-mnist:" + dir
                                                                      : "random pixels (seed 0)");
}

// The load seen over the run into the JSON's context (the file is still our .tmp; rewritten in
// place before the rename). busy: "" or why the machine was busy (cpu_info.h).
// The fields are inserted as text right after `"context": {`: Google Benchmark's JSON may hold
// NaN (the cv of a counter whose mean is 0), which a JSON parser refuses and Python reads.
void add_load_context(const std::string& path, const dpb::CpuLoad& l) {
  std::string text;
  {
    std::ifstream in(path, std::ios::binary);
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const std::string key = "\"context\": {";
  const size_t at = text.find(key);
  if (at == std::string::npos) die("cannot read back " + path + " to add the load: no context object");
  nlohmann::ordered_json c;
  c["cpus_allowed"] = l.cpus;
  c["load_avg_end"] = l.load_avg_end;
  c["steal_pct"] = l.steal_pct;
  c["cpu_pressure_pct"] = l.pressure_pct;
  c["others_runnable"] = l.others_runnable;
  c["busy"] = l.why_busy();
  std::string fields;
  for (auto it = c.begin(); it != c.end(); ++it)
    fields += "\n    " + nlohmann::json(it.key()).dump() + ": " + it.value().dump() + ",";
  text.insert(at + key.size(), fields);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out.flush()) die("cannot write " + path + " (adding the load)");
  if (l.busy())
    std::fprintf(stderr, "dpbench-micro: measured on a busy machine: %s\n", l.why_busy().c_str());
}

// What every process under mpirun must agree on before the first collective (src/train/agree.h):
// the shared run options, our own --dpb_* values, Google Benchmark's flags that pick and size the
// benchmarks (not those that only shape rank 0's report), the environment and the binary. Ranks
// with different selections would enter different collectives and hang or report wrong sums.
dpb::AgreeFields micro_agree_fields(const BenchConfig& cfg,
                                    const std::vector<const dpb::BackendEntry*>& backends,
                                    const std::vector<std::string>& args) {
  dpb::AgreeFields f = dpb::run_option_fields(cfg.run, /*micro=*/true);
  std::string ranks, names;
  for (int k : cfg.ranks) ranks += (ranks.empty() ? "" : ",") + std::to_string(k);
  for (const dpb::BackendEntry* b : backends) names += (names.empty() ? "" : ",") + b->name;
  f.emplace_back("--dpb_ranks", ranks);
  f.emplace_back("--dpb_backends", names);
  f.emplace_back("--dpb_max_bytes", std::to_string(cfg.max_bytes));
  f.emplace_back("--dpb_max_total_bytes", std::to_string(cfg.max_total_bytes));
  for (const dpb::ModelEntry& m : dpb::models()) {
    const auto it = cfg.model_batch.find(m.name);
    f.emplace_back("--dpb_" + m.name + "_batch",
                   it == cfg.model_batch.end() ? "(default)" : std::to_string(it->second));
  }
  f.emplace_back("--benchmark_filter", benchmark::GetBenchmarkFilter());
  static const char* const kReportOnly[] = {"--benchmark_format", "--benchmark_out_format",
                                            "--benchmark_color", "--benchmark_counters_tabular"};
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    const std::string name = a.substr(0, a.find('='));
    if (name == "--benchmark_filter" || name == "--benchmark_out") continue;
    if (std::find(std::begin(kReportOnly), std::end(kReportOnly), name) != std::end(kReportOnly))
      continue;
    f.emplace_back(name, a.size() > name.size() ? a.substr(name.size() + 1) : "(given)");
  }
  for (const dpb::AgreeFields& more : {dpb::env_fields(), dpb::build_fields()})
    f.insert(f.end(), more.begin(), more.end());
  return f;
}

// Under mpirun: the processes compare micro_agree_fields over a group of their own (a CPU rank
// each); a mismatch ends every process with exit 2 naming the field and the ranks' values.
void check_processes_agree(const BenchConfig& cfg, const dpb::AgreeFields& fields) {
  try {
    auto dev = dpb::make_device("cpu", cfg.proc_rank, dpb::DeviceOptions{1, false, cfg.local_rank});
    dpb::CommGroup group(dpb::make_mpi_transport(*dev, cfg.proc_rank, cfg.procs));
    dpb::check_ranks_agree(group, cfg.proc_rank, fields);
  } catch (const std::exception& e) {
    dpb::mpi_abort_job(cfg.proc_rank, e.what());  // exit 2 on every process
  }
}

std::string utc_stamp() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  return buf;
}

}  // namespace

// Ranks other than 0 under mpirun run every benchmark (they are collectives) but report nothing.
class NullReporter final : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

int main(int argc, char** argv) {
  dpb::prefer_yielding_openmp(argv);  // GOMP_SPINCOUNT before libgomp reads it: re-executes once
  std::string command;  // for --dpb_trace's description of the run
  for (int i = 0; i < argc; ++i) command.append(i ? " " : "").append(argv[i]);
  BenchConfig cfg = parse_dpb_flags(&argc, argv);
  // Under mpirun/srun: one rank per process, the allreduce, reducescatter and allgather families
  // only (allreduce_procs_bench.cpp).
  std::optional<dpb::MpiSession> mpi;
  try {
    if (dpb::detect_launch_env().processes) {
      mpi.emplace();
      cfg.procs = mpi->size();
      cfg.proc_rank = mpi->rank();
      cfg.local_rank = mpi->local_rank();
    }
  } catch (const std::exception& e) {
    die(e.what());
  }
  const bool root = cfg.proc_rank == 0;
  // Each process would need the others' spans and their clocks (the trainer's --trace gathers
  // them; the micro does not yet).
  if (mpi && !cfg.trace_path.empty())
    die("--dpb_trace: ranks as threads only, not under mpirun/srun (one rank per process)");

  // Our defaults for --benchmark_min_time and --benchmark_out; the JSON goes to FILE.tmp.<pid>
  // and is renamed to FILE when the run ends, so a results file is never half-written.
  std::vector<std::string> args = {argv[0]};
  bool min_time = false, listing = false;
  std::string out_path;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--benchmark_min_time", 0) == 0) min_time = true;
    if (flag_on(a, "--benchmark_list_tests")) listing = true;
    // Each process would shuffle with its own seed (Google Benchmark takes it from
    // std::random_device): the ranks would enter different collectives and hang.
    if (mpi && flag_on(a, "--benchmark_enable_random_interleaving"))
      die("--benchmark_enable_random_interleaving: not under mpirun/srun (each process would "
          "shuffle the benchmarks in its own order and the collectives would not match); "
          "interleave by running mpirun several times");
    if (a.rfind("--benchmark_out=", 0) == 0) {
      out_path = a.substr(16);
      continue;
    }
    args.push_back(a);
  }
  if (!min_time) args.insert(args.begin() + 1, "--benchmark_min_time=0.1");
  if (out_path.empty() && !listing && root) out_path = "results/micro-" + utc_stamp() + ".json";
  if (!root) out_path.clear();  // only rank 0 writes
  const std::string tmp_path = out_path.empty() ? "" : out_path + ".tmp." + std::to_string(getpid());
  if (!tmp_path.empty()) args.push_back("--benchmark_out=" + tmp_path);
  std::vector<char*> av;
  for (auto& a : args) av.push_back(a.data());
  av.push_back(nullptr);
  int ac = int(args.size());
  benchmark::Initialize(&ac, av.data(), print_usage);  // --help prints and exits here
  if (benchmark::ReportUnrecognizedArguments(ac, av.data())) return 2;
  if (!tmp_path.empty()) {
    const auto parent = std::filesystem::path(out_path).parent_path();
    std::error_code ec;
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    if (ec) die("cannot create " + parent.string() + ": " + ec.message());
    // FILE.tmp.<pid> of runs killed by SIGKILL; this run's goes if SIGTERM, SIGINT or SIGHUP ends it.
    if (const int stale = dpb::remove_stale_temps(out_path))
      std::fprintf(stderr, "dpbench-micro: removed %d temporary file(s) of killed runs beside %s\n",
                   stale, out_path.c_str());
    dpb::remove_on_termination_signal(tmp_path);
  }

  // Default: the CPU, plus what --backend auto picks (the CUDA backend when it can run here).
  std::vector<const dpb::BackendEntry*> backends = cfg.backends;
  if (backends.empty()) {
    backends.push_back(&dpb::backend_of_kind(dpb::BackendKind::Cpu));
    if (&dpb::auto_backend() != backends[0]) backends.push_back(&dpb::auto_backend());
  }
  for (const dpb::BackendEntry* b : backends) {
    if (const std::string why = b->unavailable(); !why.empty())
      die("--dpb_backends=" + b->name + ": " + why);
    if (!b->runs_math)
      die("--dpb_backends=" + b->name + ": the planning backend runs no math, so there is nothing "
          "to time (plan memory with dpbench train --backend " + b->name + " or dpbench fit)");
  }

  // A stalled rank ends every rank with exit 5 (src/core/watchdog.h), leaving no partial output.
  dpb::WatchdogOptions wo;
  wo.timeout_s = cfg.run.timeout_s;
  wo.flag = "--dpb_timeout";
  wo.on_timeout = [&tmp_path, rank = cfg.proc_rank, procs = mpi ? cfg.procs : 0](const std::string& msg) {
    if (!tmp_path.empty()) std::remove(tmp_path.c_str());
    if (procs > 1) dpb::mpi_abort_job(rank, "watchdog: " + msg, dpb::kExitStalled);
    std::fflush(stdout);
    std::fprintf(stderr, "dpbench-micro: error: watchdog: %s\n", msg.c_str());
    std::fflush(stderr);
    std::_Exit(dpb::kExitStalled);
  };
  std::optional<dpb::Watchdog> dog(std::in_place, std::move(wo));

  if (mpi && cfg.procs > 1) check_processes_agree(cfg, micro_agree_fields(cfg, backends, args));

  dpb::bench::BenchEnv env(cfg);
  add_context(cfg, backends);
  if (mpi) {
    benchmark::AddCustomContext("launcher", "mpi");
    benchmark::AddCustomContext("processes", std::to_string(cfg.procs));
    benchmark::AddCustomContext("mpi_library", mpi->library());
    if (root)
      std::fprintf(stderr, "dpbench-micro: %d processes (one rank each): the all-reduce family "
                           "only (membw, gradsync and overlap run with ranks as threads)\n",
                   cfg.procs);
    for (const dpb::BackendEntry* b : backends) dpb::bench::register_allreduce_procs(env, *b);
  } else {
    benchmark::AddCustomContext("launcher", "threads");
    for (const dpb::BackendEntry* b : backends) dpb::bench::register_membw(env, *b);  // run order: the bound first
    for (const dpb::BackendEntry* b : backends) dpb::bench::register_allreduce(env, *b);
    for (const dpb::BackendEntry* b : backends) dpb::bench::register_gradsync(env, *b);
    for (const dpb::BackendEntry* b : backends) dpb::bench::register_overlap(env, *b);
  }
  const size_t left_out = root ? env.report_not_registered() : 0;

  // The load around the whole run (issue 25 item 5): the start now, the rest added to the JSON's
  // context at the end (Google Benchmark writes the context before the first benchmark).
  const dpb::CpuSample load0 = dpb::sample_cpu();
  benchmark::AddCustomContext("load_avg_start", std::to_string(load0.load1));
  benchmark::AddCustomContext("rank_placement",
                              dpb::pin_mode_from_env() == dpb::PinMode::Never
                                  ? "unbound (DPB_PIN=0)"
                                  : "rank threads bound to their own CPUs (more ranks than CPUs: in "
                                    "blocks, r on CPU r * CPUs / ranks) when "
                                    "(DPB_PIN unset) no other process was runnable (counters "
                                    "pinned, cpu_rank<r>: the CPU each ran on)");
  size_t ran = 0;
  if (root) {
    ran = benchmark::RunSpecifiedBenchmarks();
  } else {
    NullReporter null_display;
    ran = benchmark::RunSpecifiedBenchmarks(&null_display);
  }
  benchmark::Shutdown();
  // An empty selection is the user's error (a typo in the filter), not a result: Google Benchmark
  // has opened (emptied) its output file by then, so drop that and leave --benchmark_out as it was.
  if (ran == 0) {
    std::error_code ec;
    if (!tmp_path.empty()) std::filesystem::remove(tmp_path, ec);
    die("--benchmark_filter=" + benchmark::GetBenchmarkFilter() + ": no benchmark matches" +
        (left_out ? " that can run (" + std::to_string(left_out) + " left out, why above)" : "") +
        (out_path.empty() ? "" : " (nothing written to " + out_path + ")"));
  }
  if (!tmp_path.empty() && std::filesystem::exists(tmp_path)) {
    add_load_context(tmp_path, dpb::cpu_load_between(load0, dpb::sample_cpu()));
    std::error_code ec;
    std::filesystem::rename(tmp_path, out_path, ec);
    dpb::remove_on_termination_signal("");  // renamed: nothing to remove any more
    if (ec) die("could not rename " + tmp_path + " to " + out_path + ": " + ec.message());
    std::fprintf(stderr, "dpbench-micro: wrote %s\n", out_path.c_str());
  }
  if (env.tracing() && !listing) {
    try {
      env.write_trace(command);
    } catch (const std::exception& e) {
      die(e.what());
    }
  }
  return 0;
}
