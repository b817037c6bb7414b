// flags.cpp: dpbench-micro's command line beside Google Benchmark's: the --dpb_* flags (the shared
// run options of src/train/run_options.h, then dpbench-micro's own), parsed out of argv into a
// BenchConfig, and --help (ours, then Google Benchmark's). See bench.h.
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "collectives/registry.h"
#include "src/core/check.h"
#include "src/core/files.h"
#include "src/core/registry.h"
#include "src/train/run_options.h"

namespace dpb::bench {
namespace {

// What a shared run option means here beyond its help (dpbench-micro's defaults and uses).
std::string micro_note(const dpb::RunOption& o) {
  static const std::map<std::string, std::string> notes = {
      {"ranks", "a comma list of rank counts here (default 1,2,4,8)"},
      {"backends", "a comma list here (default: cpu, plus what auto picks; async is the test "
                   "backend: checks, not timings)"},
      {"bucket_mb", "overlap family (default 25)"},
      {"cpu_threads", "overlap family, CPU. Fewer leave cores to the communication threads: on "
                      "the CPU a collective is CPU work, so overlap hides it only on spare cores"},
      {"tune_file", "allreduce/<backend>/auto; each auto benchmark's label names the algorithm "
                    "it ran, the context has the table's rules"},
      {"link_gbps", "CPU ranks: every transfer takes L + bytes / G and the waiting thread sleeps "
                    "(collectives/link.h); all-reduce benchmarks then add link_model_s (the "
                    "algorithm's alpha-beta cost) and link_ratio (measured / model)"},
      {"data_dir", "random pixels when absent"},
      {"mlp_layers", "default 16 here: the notebook's 90 (1.5 GB of gradients a rank) would not "
                     "fit 8 CPU ranks in a 24 GiB host"},
  };
  const auto it = notes.find(o.micro);
  return it == notes.end() ? "" : "; " + it->second;
}

// The --dpb_* flags: the shared run options (their help as in dpbench train --help), then ours.
std::string dpb_flags_help() {
  std::string s = "dpbench flags (--name=value; those shared with dpbench train take its names' "
                  "meaning, limits and help: src/train/run_options.h):\n";
  auto line = [&s](const std::string& flag, const std::string& help) {
    s += "  " + flag + std::string(flag.size() < 28 ? 28 - flag.size() : 1, ' ') + help + "\n";
  };
  for (const dpb::RunOption& o : dpb::run_options())
    if (!o.micro.empty())
      line("--dpb_" + o.micro + "=" + o.value + (o.list ? ",..." : ""),
           o.help + " (dpbench --" + o.name + ")" + micro_note(o));
  line("--dpb_max_bytes=N", "largest all-reduce message in the sweep, bytes; K/M/G suffixes are "
       "binary (default 256M). The sweep for k ranks also stops where k * n > "
       "--dpb_max_total_bytes (default 1G, so k = 8 stops at 128 MiB) or where the CPU buffers "
       "would exceed half the available memory.");
  line("--dpb_trace=FILE", "a Chrome trace event file (Perfetto, chrome://tracing) of the "
       "timed collective calls of the allreduce, reducescatter, allgather and gradsync families: "
       "one span per call on its rank's comm track, with algorithm and bytes (check it with "
       "scripts/check_trace.py FILE --tracks comm). Ranks as threads only, not under mpirun.");
  for (const dpb::ModelEntry& m : dpb::models())
    line("--dpb_" + m.name + "_batch=N", "overlap: " + m.name + "'s global batch (default " +
         std::to_string(m.bench_batch) + "; limits as dpbench --batch: 1 to " +
         std::to_string(dpb::kMaxBatch) + ")");
  return s;
}

}  // namespace

void print_usage() {
  const std::string algs = dpb::entry_names(dpb::allreduce_algorithms(), "|");
  const std::string rs_algs = dpb::entry_names(dpb::reducescatter_algorithms(), "|");
  const std::string ag_algs = dpb::entry_names(dpb::allgather_algorithms(), "|");
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
                                                      busbw_GBps, wrong, alloc_bytes (the most
                                                      device memory the algorithm allocated on
                                                      a rank beyond the buffer), CPU:
                                                      traffic_GBps, membw_GBps, bw_fraction
  reducescatter/<backend>/<%s>/ranks:<k>/bytes:<n>
  allgather/<backend>/<%s>/ranks:<k>/bytes:<n>
                                                      the halves of the all-reduce, in place
                                                      (rank r's shard: chunk r of n bytes, the
                                                      whole buffer); the same counters, busbw =
                                                      algbw * (k-1)/k (nccl-tests'), wrong: the
                                                      shard's sum / every owner's shard
  gradsync/<backend>/<%s>/<per-param|fused|bucket1MB|bucket5MB|bucket25MB>/ranks:<k>
                                                      counters calls, bytes, busbw_GBps, wrong,
                                                      alloc_bytes (beyond the gradients)
  overlap/<backend>/<%s>/<fused-after|per-param-after|per-param-overlap|
          bucket25MB-overlap>/ranks:<k>               counters compute_s, backward_s,
                                                      exposed_comm_s, exposed_comm_median_s and
                                                      its 95%% interval (exposed_comm_ci95_lo_s,
                                                      _hi_s), comm_s, calls; compare modes with
                                                      scripts/overlap_report.py
  CUDA ranks beyond the GPU count share GPUs: their names carry "ranks:<k>/shared".
  Under mpirun/srun (one rank per process): <allreduce|reducescatter|allgather>/<backend>/<alg>/
          procs:<K>/bytes:<n>
                                                      the time is the slowest rank's; counters
                                                      also rank_min_us, rank_avg_us, rank_max_us
                                                      (each rank's mean, over the ranks); only
                                                      rank 0 prints and writes the JSON;
                                                      --benchmark_enable_random_interleaving is
                                                      refused (each process would shuffle in its
                                                      own order): run mpirun several times
  Times are manual (suffix /manual_time): the slowest rank's time per iteration.

%sDefaults that differ from Google Benchmark's:
  --benchmark_min_time      0.1 s unless given (the full default set then runs in minutes)
  --benchmark_out           results/micro-<UTC time>.json unless given (format json). The file is
                            written beside as FILE.tmp.<pid> and renamed into place at the end.
                            A --benchmark_filter that matches nothing is an error (exit 2) that
                            leaves FILE as it was.
%s
)", algs.c_str(), rs_algs.c_str(), ag_algs.c_str(), models.c_str(), models.c_str(), dpb_flags_help().c_str(),
              ("Environment:\n" + dpb::run_env_help()).c_str());
  benchmark::PrintDefaultHelp();
}

namespace {

// A Google Benchmark boolean flag's value that means false ("--flag" alone is true).
bool flag_false(const std::string& v) {
  return v == "false" || v == "0" || v == "f" || v == "no" || v == "n";
}

}  // namespace

// a is Google Benchmark's boolean flag `name` turned on ("--name", "--name=true", ...).
bool flag_on(const std::string& a, const std::string& name) {
  const size_t eq = a.find('=');
  return a.substr(0, eq) == name && (eq == std::string::npos || !flag_false(a.substr(eq + 1)));
}

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "dpbench-micro: %s (see --help)\n", msg.c_str());
  std::exit(2);
}

namespace {

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

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// A shared run option (src/train/run_options.h) given as --dpb_<micro>=v: the table's check, then
// its TrainConfig field; dpbench-micro's lists (rank counts, backends) check every item alike.
void apply_shared(const dpb::RunOption& o, const std::string& flag, const std::string& v,
                  BenchConfig& cfg) {
  if (o.list) {
    const std::vector<std::string> items = split(v);
    if (items.empty()) die(flag + ": empty list");
    const bool ranks = o.name == "devices";  // else --backend's list
    DPB_CHECK(ranks || o.name == "backend", flag << ": no list field for --" << o.name);
    if (ranks) cfg.ranks.clear(); else cfg.backends.clear();
    for (const std::string& item : items) {
      dpb::TrainConfig one;
      dpb::apply_run_option(o, flag, item, one);
      const dpb::BackendEntry* b = &dpb::resolve_backend(one.backend);  // auto: its pick
      if (ranks)
        cfg.ranks.push_back(one.devices);
      else if (std::find(cfg.backends.begin(), cfg.backends.end(), b) == cfg.backends.end())
        cfg.backends.push_back(b);
    }
    return;
  }
  dpb::apply_run_option(o, flag, v, cfg.run);
  if (!o.set) cfg.data_dir = v;  // the one run input outside TrainConfig dpbench-micro takes
}

}  // namespace

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
    const std::string k = a.substr(0, eq), v = a.substr(eq + 1), micro = k.substr(6);
    try {
      if (const dpb::RunOption* o = dpb::find_micro_option(micro)) {
        apply_shared(*o, k, v, cfg);
      } else if (k == "--dpb_max_bytes") {
        cfg.max_bytes = parse_bytes(k, v);
      } else if (k == "--dpb_max_total_bytes") {
        cfg.max_total_bytes = parse_bytes(k, v);
      } else if (k == "--dpb_trace") {
        dpb::check_output_path(v);  // refused now, not after the run
        cfg.trace_path = v;
      } else {
        bool model = false;  // --dpb_<model>_batch: a global batch, limits as --batch
        for (const dpb::ModelEntry& m : dpb::models())
          if (micro == m.name + "_batch") {
            dpb::check_run_option(dpb::run_option("batch"), k, v);
            cfg.model_batch[m.name] = int(std::stol(v));
            model = true;
          }
        if (!model) die("unknown flag " + k);
      }
    } catch (const std::exception& e) {
      die(e.what());
    }
  }
  *argc = out;
  argv[out] = nullptr;
  return cfg;
}

}  // namespace dpb::bench
