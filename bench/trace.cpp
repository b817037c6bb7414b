// trace.cpp: dpbench-micro --dpb_trace=FILE: the timed collective calls of every benchmark that
// ran, one span each on its rank's comm track (algorithm, bytes; gradsync: the bucket), merged
// into one Chrome trace event file at exit (src/core/trace_json.h; check it with
// scripts/check_trace.py --tracks comm). A span's epoch is the benchmark's number (otherData
// benchmark_<n> names it), its step the timed iteration on that rank. Ranks as threads only: under
// mpirun --dpb_trace is refused (bench/main.cpp).
//
//   build/dpbench-micro --benchmark_filter='allreduce/cpu/ring/ranks:2/bytes:4096/'
//       --dpb_trace=ring.json && scripts/check_trace.py ring.json --ranks 2 --tracks comm
#include <algorithm>
#include <cstdio>

#include "bench/bench.h"
#include "src/core/trace_json.h"

namespace dpb::bench {

int BenchEnv::trace_number(const std::string& name) {
  std::lock_guard<std::mutex> lk(trace_mu_);
  for (size_t i = 0; i < trace_names_.size(); ++i)
    if (trace_names_[i] == name) return int(i) + 1;
  trace_names_.push_back(name);
  return int(trace_names_.size());
}

void BenchEnv::add_trace(std::vector<Span> spans, const std::vector<std::string>& devices) {
  std::lock_guard<std::mutex> lk(trace_mu_);
  if (trace_devices_.size() < devices.size()) trace_devices_.resize(devices.size());
  for (size_t r = 0; r < devices.size(); ++r) {
    auto& seen = trace_devices_[r];
    if (std::find(seen.begin(), seen.end(), devices[r]) == seen.end()) seen.push_back(devices[r]);
  }
  if (trace_.empty()) trace_.reserve(spans.size());
  trace_.insert(trace_.end(), spans.begin(), spans.end());
}

void BenchEnv::write_trace(const std::string& command) {
  std::lock_guard<std::mutex> lk(trace_mu_);
  TraceInfo info;
  for (size_t r = 0; r < trace_devices_.size(); ++r) {
    std::string name = "rank " + std::to_string(r);
    for (size_t i = 0; i < trace_devices_[r].size(); ++i)
      name += (i == 0 ? ": " : ", ") + trace_devices_[r][i];
    info.process_names.push_back(name);
  }
  info.other = {
      {"tool", "dpbench-micro"},
      {"command", command},
      {"spans", "one per collective call of the timed iterations, on the rank's comm track: from "
                "after the aligning barrier to the call's end (CPU: host clock; CUDA: events on "
                "the comm stream)"},
      {"epoch", "the benchmark's number, benchmark_<n> below"},
      {"step", "the timed iteration on that rank (every trial and repetition of the benchmark)"},
  };
  for (size_t i = 0; i < trace_names_.size(); ++i)
    info.other.push_back({"benchmark_" + std::to_string(i + 1), trace_names_[i]});
  write_chrome_trace(cfg_.trace_path, trace_, info);
  std::fprintf(stderr, "dpbench-micro: wrote %s (%zu spans, %zu benchmarks)\n",
               cfg_.trace_path.c_str(), trace_.size(), trace_names_.size());
}

bool RigTrace::start(BenchEnv& env, const std::string& name, DeviceSet& ds) {
  if (!env.tracing() || !tls.empty()) return false;
  number = env.trace_number(name);
  steps.assign(size_t(ds.size()), 0);
  for (int r = 0; r < ds.size(); ++r)
    tls.push_back(std::make_unique<RankTimeline>(ds[r], r, /*host_spans=*/false));
  return true;
}

void RigTrace::collect(BenchEnv& env, DeviceSet& ds, RankThreads& pool) {
  if (tls.empty()) return;
  std::vector<std::vector<Span>> per_rank(tls.size());
  pool.run([&](int r) { per_rank[size_t(r)] = tls[size_t(r)]->take(); });
  std::vector<Span> all;
  std::vector<std::string> devices;
  for (int r = 0; r < ds.size(); ++r) {
    all.insert(all.end(), per_rank[size_t(r)].begin(), per_rank[size_t(r)].end());
    devices.push_back(ds[r].name());
  }
  env.add_trace(std::move(all), devices);
}

}  // namespace dpb::bench
