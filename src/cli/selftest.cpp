// selftest.cpp: `dpbench selftest [--json] [--all]` (see selftest.h). Every check catches its own
// errors (a CUDA error in one op is reported on that op's row and the next op gets a fresh
// device), so one failure does not hide the state of the rest.
#include "src/cli/selftest.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "collectives/allreduce.h"
#include "collectives/registry.h"
#include "kernels/conformance/op_cases.h"
#include "kernels/cuda/cuda_backend.h"
#include "src/core/cpu_info.h"

namespace dpb {
namespace {

struct Check {
  std::string backend, device, op, what;
  std::string status;  // "pass" | "FAIL" | "skip"
  double max_err = 0, seconds = 0;
  std::string detail;  // why it failed or was skipped
};

class Report {
 public:
  explicit Report(bool json) : json_(json) {}
  void add(Check c) {
    if (!json_) {
      std::printf("%-7s %-18s %-6s %9.2g %6.2f s  %s\n", c.backend.c_str(), c.op.c_str(),
                  c.status.c_str(), c.max_err, c.seconds, c.what.c_str());
      if (c.status != "pass" && !c.detail.empty()) std::printf("%s", indent(c.detail).c_str());
      std::fflush(stdout);
    }
    checks_.push_back(std::move(c));
  }
  int count(const char* status) const {
    int n = 0;
    for (const Check& c : checks_) n += c.status == status;
    return n;
  }
  const std::vector<Check>& checks() const { return checks_; }

 private:
  static std::string indent(const std::string& s) {
    std::string out = "        ";
    for (char ch : s) out += ch == '\n' ? std::string("\n        ") : std::string(1, ch);
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out.empty() || out.back() == '\n' ? out : out + "\n";
  }
  bool json_;
  std::vector<Check> checks_;
};

struct Reference {  // one case's inputs and the CPU reference's outputs (or its error)
  const OpCase* c;
  std::vector<HostVec> in;
  std::vector<OpOutput> out;
  std::string error;
};

double max_error(const CaseResult& r) {  // NaN when any output has a NaN error
  double m = 0;
  for (const OutputCheck& o : r.outputs)
    m = std::isnan(o.max_err) ? o.max_err : std::max(m, o.max_err);  // std::max keeps a NaN m
  return m;
}

// Every case on one backend; a fresh device after any exception (a CUDA error may be sticky).
void op_checks(const OpBackend& be, const std::vector<Reference>& refs, Report& rep) {
  std::unique_ptr<Device> dev;
  bool dev_tf32 = false;
  for (const Reference& ref : refs) {
    Check k{be.name, "", ref.c->op, ref.c->label(), "FAIL", 0, 0, {}};
    const bool tf32 = ref.c->flags & kTf32;
    try {
      if (!dev || dev_tf32 != tf32) dev.reset(), dev = be.make(0, tf32), dev_tf32 = tf32;
      k.device = dev->name();
    } catch (const std::exception& e) {
      k.detail = std::string("making the device: ") + e.what();
      rep.add(k);
      continue;
    }
    if (!ref.error.empty()) {
      k.detail = "the CPU reference failed: " + ref.error;
      rep.add(k);
      continue;
    }
    const CaseResult r = check_case(*ref.c, *dev, ref.out, ref.in);
    k.status = r.ok ? "pass" : "FAIL";
    k.max_err = max_error(r), k.seconds = r.seconds, k.detail = r.report();
    if (!r.error.empty()) dev.reset();
    rep.add(k);
  }
}

// Every algorithm of the all-reduce table (collectives/registry.cpp) that runs 2 ranks of `kind`.
std::vector<std::string> algorithms_for(BackendKind kind) {
  std::vector<std::string> a;
  for (const AllReduceEntry& e : allreduce_algorithms())
    if (allreduce_refusal(e, 2, kind).empty()) a.push_back(e.name);
  return a;
}

// One all-reduce of n floats over the given ranks: rank r holds (r + 1) * (i % 7 + 1), so every
// rank must end with k (k + 1) / 2 * (i % 7 + 1) exactly. Returns the rows's status and detail.
void allreduce_check(const std::string& algo, std::vector<std::unique_ptr<Device>>& devs,
                     Check& k) {
  const int ranks = int(devs.size());
  const size_t n = 100003;
  std::vector<Device*> raw;
  for (auto& d : devs) raw.push_back(d.get());
  CommGroup group(ranks, raw);
  std::unique_ptr<AllReduce> ar;
  try {
    ar = make_allreduce(algo, group);
  } catch (const std::exception& e) {  // NCCL refuses ranks sharing a GPU and says how to allow it
    const std::string m = e.what();
    k.status = m.find("NCCL_MULTI_RANK_GPU_ENABLE") != std::string::npos ? "skip" : "FAIL";
    k.detail = m;
    return;
  }
  std::vector<Buffer> bufs(ranks);
  for (int r = 0; r < ranks; ++r) {
    bufs[r] = Buffer(*devs[r], n, MemCategory::Comm, "selftest all-reduce buffer");
    std::vector<float> host(n);
    for (size_t i = 0; i < n; ++i) host[i] = float(r + 1) * float(i % 7 + 1);
    devs[r]->upload(bufs[r].get(), host.data(), n);
  }
  std::mutex mu;
  std::string errors;
  std::vector<std::thread> threads;
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        devs[r]->comm_wait_compute();
        ar->run(r, bufs[r].get(), n);
        devs[r]->comm_synchronize();
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lk(mu);
        errors += "rank " + std::to_string(r) + ": " + e.what() + "\n";
      }
    });
  for (auto& t : threads) t.join();
  k.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  size_t wrong = 0;
  const float scale = float(ranks * (ranks + 1) / 2);
  for (int r = 0; r < ranks && errors.empty(); ++r) {
    std::vector<float> host(n);
    devs[r]->download(host.data(), bufs[r].get(), n);
    for (size_t i = 0; i < n; ++i) {
      const double err = std::fabs(double(host[i]) - scale * float(i % 7 + 1));
      if (!(err == 0)) ++wrong, k.max_err = std::max(k.max_err, std::isnan(err) ? 1e300 : err);
    }
  }
  k.status = errors.empty() && wrong == 0 ? "pass" : "FAIL";
  k.detail = errors.empty() ? std::to_string(wrong) + " of " + std::to_string(n * ranks) +
                                  " elements wrong (want exact sums)\n"
                            : errors;
}

// 2 ranks made by make(rank) (fresh for each algorithm), one row per algorithm.
void allreduce_checks(const std::string& label,
                      const std::function<std::unique_ptr<Device>(int)>& make, Report& rep) {
  std::vector<std::string> algos;
  try {
    algos = algorithms_for(make(0)->kind());
  } catch (const std::exception& e) {
    rep.add({label, "", "allreduce", "2 ranks", "FAIL", 0, 0,
             std::string("making the device: ") + e.what()});
    return;
  }
  for (const std::string& algo : algos) {
    Check k{label, "", "allreduce " + algo, "2 ranks, 100003 floats, exact sums", "FAIL", 0, 0, {}};
    try {
      std::vector<std::unique_ptr<Device>> devs;
      for (int r = 0; r < 2; ++r) devs.push_back(make(r));
      k.device = devs[0]->name() + " + " + devs[1]->name();
      allreduce_check(algo, devs, k);
    } catch (const std::exception& e) {
      k.status = "FAIL", k.detail = e.what();
    }
    rep.add(k);
  }
}

}  // namespace

CLI::App* add_selftest_command(CLI::App& app, SelftestOptions& opt) {
  auto* st = app.add_subcommand(
      "selftest", "check every op and a 2-rank all-reduce on each device against the CPU "
                  "reference; exit 1 on any failure");
  st->add_flag("--json", opt.json, "print the results as one JSON object");
  st->add_flag("--all", opt.all_cases, "run every op-table case, not one per op");
  return st;
}

int run_selftest(const SelftestOptions& opt) {
  Report rep(opt.json);
  const int ngpu = cuda_device_count();
  const std::string why = ngpu > 0 ? "" : cuda_unavailable_reason();  // e.g. built without it
  if (!opt.json) {
    std::printf("dpbench selftest: ops against the CPU reference (CPU backend, 1 thread); "
                "all-reduce on 2 ranks with exact sums\nCPU: %s, %u hardware threads\n",
                cpu_model_name().c_str(), std::thread::hardware_concurrency());
    if (ngpu > 0) std::printf("CUDA GPUs: %d\n", ngpu);
    else std::printf("No GPU found: %s. Checking the CPU backend only.\n", why.c_str());
    std::printf("\n%-7s %-18s %-6s %9s %8s  %s\n", "backend", "op", "result", "max error", "time",
                "case");
  }
  std::vector<Reference> refs;
  auto ref_dev = make_reference_device();
  for (const OpCase& c : op_cases()) {
    if (!opt.all_cases && !(c.flags & kSelftest)) continue;
    Reference r{&c, c.inputs(), {}, ""};
    try {
      r.out = c.run(*ref_dev, r.in);
    } catch (const std::exception& e) {
      r.error = e.what();
      ref_dev = make_reference_device();
    }
    refs.push_back(std::move(r));
  }
  for (const OpBackend& be : op_backends()) {
    if (!be.unavailable().empty()) continue;  // said above (no GPU)
    op_checks(be, refs, rep);
    allreduce_checks(be.name, [&](int r) { return be.make(r, false); }, rep);
  }
  if (ngpu >= 2)  // ranks on GPUs 0 and 1: peer access or staging between GPUs, NCCL across GPUs
    allreduce_checks("cuda+1", [](int r) { return make_cuda_device(r, r, false); }, rep);
  const int pass = rep.count("pass"), fail = rep.count("FAIL"), skip = rep.count("skip");
  if (opt.json) {
    nlohmann::json j = {{"cpu", cpu_model_name()}, {"cuda_built", cuda_built()}, {"cuda_devices", ngpu},
                        {"no_gpu_reason", why}, {"passed", pass}, {"failed", fail},
                        {"skipped", skip}, {"checks", nlohmann::json::array()}};
    for (const Check& c : rep.checks())
      j["checks"].push_back({{"backend", c.backend}, {"device", c.device}, {"op", c.op},
                             {"case", c.what}, {"status", c.status}, {"max_error", c.max_err},
                             {"seconds", c.seconds},
                             {"detail", c.status == "pass" ? "" : c.detail}});
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("\n%d passed, %d failed, %d skipped%s\n", pass, fail, skip,
                ngpu > 0 ? "" : " (no GPU: CPU backend only)");
  }
  return fail > 0 ? 1 : 0;
}

}  // namespace dpb
