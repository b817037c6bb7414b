// main.cpp: dpbench-micro, the Google Benchmark microbenchmarks of dpbench.
//   build/dpbench-micro                                   # everything, JSON to results/
//   build/dpbench-micro --benchmark_filter='allreduce/cpu/ring/ranks:2/'
//       --benchmark_out=results/ring.json --benchmark_repetitions=5   (one command line)
//   build/dpbench-micro --help                            # our flags, then Google Benchmark's
//   mpirun -np 2 build/dpbench-micro --benchmark_filter='allreduce/cpu/(ring|mpi)/'
//       # one rank per process: allreduce/<backend>/<alg>/procs:2/bytes:<n>; rank 0 reports
// Families (one file each): membw + allreduce (allreduce_bench.cpp), gradsync
// (gradsync_bench.cpp), overlap (overlap_bench.cpp). Registered per backend present (cpu always,
// cuda when a GPU is found) and per rank count. scripts/bench_to_csv.py turns the JSON into CSV.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "collectives/mpi/mpi_transport.h"
#include "collectives/registry.h"
#include "collectives/tuning.h"
#include "src/core/registry.h"
#include "src/core/launcher.h"
#include "kernels/machine_info.h"
#include "src/data/dataset.h"
#include "src/model/model.h"
#include "kernels/cuda/cuda_backend.h"


namespace {

using dpb::bench::BenchConfig;

void print_usage() {
  const std::string algs = dpb::entry_names(dpb::allreduce_algorithms(), "|");
  const std::string models = dpb::entry_names(dpb::models(), "|");
  std::printf(R"(dpbench-micro: microbenchmarks of dpbench's collectives and training steps.

Benchmarks (names are filterable with --benchmark_filter=REGEX):
  membw/<backend>/copy/threads:<k>                    copy bandwidth bound, read + written
                                                      (CPU: memcpy; CUDA: device-to-device on
                                                      the comm stream, timed by its events)
  allreduce/<backend>/<%s>/ranks:<k>/bytes:<n>
                                                      every algorithm of the table that runs on
                                                      the backend with k ranks (dpbench train
                                                      --help lists them); counters algbw_GBps,
                                                      busbw_GBps, wrong, CPU: traffic_GBps,
                                                      membw_GBps, bw_fraction
  gradsync/<backend>/<%s>/<per-param|fused|bucket1MB|bucket5MB|bucket25MB>/ranks:<k>
                                                      counters calls, bytes, busbw_GBps, wrong
  overlap/<backend>/<lenet|resnet18>/<fused-after|per-param-after|per-param-overlap|
          bucket25MB-overlap>/ranks:<k>               counters compute_s, backward_s,
                                                      exposed_comm_s, exposed_comm_median_s and
                                                      its 95%% interval (exposed_comm_ci95_lo_s,
                                                      _hi_s), comm_s, calls; compare modes with
                                                      scripts/overlap_report.py
  CUDA ranks beyond the GPU count share GPUs: their names carry "ranks:<k>/shared".
  Under mpirun/srun (one rank per process): allreduce/<backend>/<alg>/procs:<K>/bytes:<n>
                                                      the time is the slowest rank's; counters
                                                      also rank_min_us, rank_avg_us, rank_max_us
                                                      (each rank's mean, over the ranks); only
                                                      rank 0 prints and writes the JSON;
                                                      --benchmark_enable_random_interleaving is
                                                      refused (each process would shuffle in its
                                                      own order): run mpirun several times
  Times are manual (suffix /manual_time): the slowest rank's time per iteration.

dpbench flags (--name=value):
  --dpb_ranks=LIST          rank counts (default 1,2,4,8)
  --dpb_backends=LIST       cpu, cuda and/or async (default: cpu, plus cuda when a GPU is
                            found; async is the test backend: checks, not timings)
  --dpb_max_bytes=N         largest all-reduce message in the sweep, bytes; K/M/G suffixes are
                            binary (default 256M). The sweep for k ranks also stops where
                            k * n > --dpb_max_total_bytes (default 1G, so k = 8 stops at 128 MiB)
                            or where the CPU buffers would exceed half the available memory.
  --dpb_lenet_batch=N       overlap: LeNet global batch (default 256)
  --dpb_resnet18_batch=N    overlap: ResNet-18 global batch (default 32)
  --dpb_bucket_mb=X         overlap: bucket cap of the bucketed mode, MB = 1e6 B (default 25)
  --dpb_cpu_threads=N       overlap, CPU: math threads per rank (default cores / k, at least
                            1). Fewer leave cores to the communication threads: on the CPU a
                            collective is CPU work, so overlap hides it only on spare cores.
  --dpb_tune_file=FILE      allreduce/<backend>/auto: tuning table (JSON written by
                            scripts/tune_allreduce.py; default: the compiled-in
                            collectives/tuning/default.json). Each auto benchmark's label
                            names the algorithm it ran; the context has the table's rules.
  --dpb_link_gbps=G         emulated link between CPU ranks: Gb/s per direction (default 0: no
                            limit); every transfer between ranks takes L + bytes / G and the
                            waiting thread sleeps (collectives/link.h). all-reduce benchmarks
                            then add link_model_s (the algorithm's alpha-beta cost) and
                            link_ratio (measured / model)
  --dpb_link_latency_us=L   emulated link: microseconds per transfer (default 0)
  --dpb_data_dir=DIR        Fashion-MNIST (default $DPBENCH_DATA or
                            /usr/share/datasets/fashion-mnist; random pixels when absent)
Defaults that differ from Google Benchmark's:
  --benchmark_min_time      0.1 s unless given (the full default set then runs in minutes)
  --benchmark_out           results/micro-<UTC time>.json unless given (format json). The file is
                            written beside as FILE.tmp.<pid> and renamed into place at the end.
Environment:
  DPB_SPIN_US=X             how long a rank waiting at a collective's barrier polls before it
                            sleeps, microseconds (default 100 when the ranks, and with overlap
                            their communication threads, fit the hardware threads; else 0)
  DPB_SHM=0|1               under mpirun, CPU processes of one node: 0 = MPI messages, 1 = shared
                            memory required (default: shared memory when it can serve)
  DPB_SHM_ARENA_MB=N        the shared arena's address space per process (default 65536)

)", algs.c_str(), models.c_str());
  benchmark::PrintDefaultHelp();
}

// A Google Benchmark boolean flag's value that means false ("--flag" alone is true).
bool flag_false(const std::string& v) {
  return v == "false" || v == "0" || v == "f" || v == "no" || v == "n";
}

// a is Google Benchmark's boolean flag `name` turned on ("--name", "--name=true", ...).
bool flag_on(const std::string& a, const std::string& name) {
  const size_t eq = a.find('=');
  return a.substr(0, eq) == name && (eq == std::string::npos || !flag_false(a.substr(eq + 1)));
}

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "dpbench-micro: %s (see --help)\n", msg.c_str());
  std::exit(2);
}

size_t parse_bytes(const std::string& flag, const std::string& v) {
  size_t pos = 0;
  unsigned long long x = 0;
  try {
    x = std::stoull(v, &pos);
  } catch (...) {
    die(flag + ": not a byte count: '" + v + "'");
  }
  std::string suffix = v.substr(pos);
  int shift = suffix.empty() ? 0 : suffix == "K" ? 10 : suffix == "M" ? 20 : suffix == "G" ? 30 : -1;
  if (shift < 0) die(flag + ": unknown suffix in '" + v + "' (use K, M or G)");
  if (x == 0) die(flag + ": must be positive, got '" + v + "'");
  return size_t(x) << shift;
}

int parse_int(const std::string& flag, const std::string& v, int lo, int hi) {
  size_t pos = 0;
  int x = 0;
  try {
    x = std::stoi(v, &pos);
  } catch (...) {
    pos = 0;
  }
  if (pos == 0 || pos != v.size() || x < lo || x > hi)
    die(flag + ": expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
        "], got '" + v + "'");
  return x;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// Takes the --dpb_* flags out of argv (Google Benchmark rejects flags it does not know).
BenchConfig parse_dpb_flags(int* argc, char** argv) {
  BenchConfig cfg;
  int out = 1;
  for (int i = 1; i < *argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--dpb_", 0) != 0) {
      argv[out++] = argv[i];
      continue;
    }
    const size_t eq = a.find('=');
    if (eq == std::string::npos) die(a + ": expected --name=value");
    const std::string k = a.substr(0, eq), v = a.substr(eq + 1);
    if (k == "--dpb_ranks") {
      cfg.ranks.clear();
      for (const auto& s : split(v)) cfg.ranks.push_back(parse_int(k, s, 1, 64));
      if (cfg.ranks.empty()) die(k + ": empty list");
    } else if (k == "--dpb_backends") {
      cfg.backends = split(v);
      for (const auto& b : cfg.backends)
        if (b != "cpu" && b != "cuda" && b != "async")
          die(k + ": unknown backend '" + b + "' (valid: cpu, cuda, async)");
    } else if (k == "--dpb_max_bytes") {
      cfg.max_bytes = parse_bytes(k, v);
    } else if (k == "--dpb_max_total_bytes") {
      cfg.max_total_bytes = parse_bytes(k, v);
    } else if (k == "--dpb_lenet_batch") {
      cfg.lenet_batch = parse_int(k, v, 1, 60000);
    } else if (k == "--dpb_resnet18_batch") {
      cfg.resnet18_batch = parse_int(k, v, 1, 60000);
    } else if (k == "--dpb_cpu_threads") {
      cfg.cpu_threads = parse_int(k, v, 1, 4096);
    } else if (k == "--dpb_bucket_mb") {
      char* end = nullptr;
      cfg.bucket_mb = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end != '\0' || !(cfg.bucket_mb > 0))
        die(k + ": expected a positive number, got '" + v + "'");
    } else if (k == "--dpb_link_gbps" || k == "--dpb_link_latency_us") {
      char* end = nullptr;
      const double x = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end != '\0' || !(x >= 0) || x > 1e7)
        die(k + ": expected a number >= 0, got '" + v + "'");
      (k == "--dpb_link_gbps" ? cfg.link.gbps : cfg.link.latency_us) = x;
    } else if (k == "--dpb_data_dir") {
      cfg.data_dir = v;
    } else if (k == "--dpb_tune_file") {
      cfg.tune_file = v;
      try {
        dpb::load_tune_file(v);
      } catch (const std::exception& e) {
        die(e.what());
      }
    } else {
      die("unknown flag " + k);
    }
  }
  *argc = out;
  argv[out] = nullptr;
  return cfg;
}

// The machine and build facts every dpbench output shares (kernels/machine_info.h), then this
// run's settings.
void add_context(const BenchConfig& cfg, const std::vector<std::string>& backends) {
  for (const auto& [key, value] : dpb::machine_info_text()) benchmark::AddCustomContext(key, value);
  std::string b;
  for (const auto& s : backends) b += (b.empty() ? "" : ",") + s;
  benchmark::AddCustomContext("backends", b);
  benchmark::AddCustomContext("overlap_cpu_threads_per_rank",
                              cfg.cpu_threads > 0 ? std::to_string(cfg.cpu_threads) : "cores/k");
  benchmark::AddCustomContext("link", cfg.link.label());
  benchmark::AddCustomContext("link_gbps", std::to_string(cfg.link.gbps));
  benchmark::AddCustomContext("link_latency_us", std::to_string(cfg.link.latency_us));
  const char* spin = std::getenv("DPB_SPIN_US");
  benchmark::AddCustomContext("barrier_spin_us",
                              spin ? spin : "default (100 if ranks (+ comm threads) <= cores)");
  benchmark::AddCustomContext("allreduce_auto_table",
                              cfg.tune_file.empty() ? "default (collectives/tuning/default.json)"
                                                    : cfg.tune_file);
  const std::string dir = dpb::resolve_data_dir(cfg.data_dir);
  benchmark::AddCustomContext("dataset", std::filesystem::exists(dir) ? "fashion-mnist:" + dir
                                                                      : "random pixels (seed 0)");
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
  BenchConfig cfg = parse_dpb_flags(&argc, argv);
  // Under mpirun/srun: one rank per process, the all-reduce family only (allreduce_procs_bench.cpp).
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
  }

  std::vector<std::string> backends = cfg.backends;
  if (backends.empty()) {
    backends.push_back("cpu");
    if (dpb::cuda_device_count() > 0) backends.push_back("cuda");
  }
  for (const auto& b : backends)
    if (b == "cuda" && dpb::cuda_device_count() == 0)
      die("--dpb_backends=cuda: no CUDA GPU found (or this build has no CUDA backend)");

  dpb::bench::BenchEnv env(cfg);
  add_context(cfg, backends);
  using dpb::bench::Backend;
  std::vector<Backend> bs;
  for (const auto& b : backends)
    bs.push_back(b == "cpu" ? Backend::Cpu : b == "cuda" ? Backend::Cuda : Backend::Async);
  if (mpi) {
    benchmark::AddCustomContext("launcher", "mpi");
    benchmark::AddCustomContext("processes", std::to_string(cfg.procs));
    benchmark::AddCustomContext("mpi_library", mpi->library());
    if (root)
      std::fprintf(stderr, "dpbench-micro: %d processes (one rank each): the all-reduce family "
                           "only (membw, gradsync and overlap run with ranks as threads)\n",
                   cfg.procs);
    for (Backend b : bs) dpb::bench::register_allreduce_procs(env, b);
  } else {
    benchmark::AddCustomContext("launcher", "threads");
    for (Backend b : bs) dpb::bench::register_membw(env, b);  // run order: the bound first
    for (Backend b : bs) dpb::bench::register_allreduce(env, b);
    for (Backend b : bs) dpb::bench::register_gradsync(env, b);
    for (Backend b : bs) dpb::bench::register_overlap(env, b);
  }

  if (root) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    NullReporter null_display;
    benchmark::RunSpecifiedBenchmarks(&null_display);
  }
  benchmark::Shutdown();
  if (!tmp_path.empty() && std::filesystem::exists(tmp_path)) {
    std::error_code ec;
    std::filesystem::rename(tmp_path, out_path, ec);
    if (ec) die("could not rename " + tmp_path + " to " + out_path + ": " + ec.message());
    std::fprintf(stderr, "dpbench-micro: wrote %s\n", out_path.c_str());
  }
  return 0;
}
