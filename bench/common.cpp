// common.cpp: the shared machinery of dpbench-micro declared in bench.h: the CPU timer, device
// sets, the memory-bandwidth probe and the training batch (the rank threads are
// src/core/rank_threads.h).
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <regex>

#include "bench/bench.h"
#include "kernels/backends.h"
#include "src/core/check.h"
#include "src/data/dataset.h"
#include "src/model/model.h"
#include "kernels/cuda/cuda_backend.h"

namespace dpb::bench {

// ---------------------------------------------------------------- timers, devices

namespace {
using Clock = std::chrono::steady_clock;
class DeviceTimer final : public RankTimer {
 public:
  explicit DeviceTimer(std::unique_ptr<StreamTimer> t) : t_(std::move(t)) {}
  void start() override {
    t_->reset();
    t_->begin();
  }
  void stop() override { t_->end(); }
  double seconds() override { return t_->seconds(); }

 private:
  std::unique_ptr<StreamTimer> t_;
};
}  // namespace

std::unique_ptr<RankTimer> make_rank_timer(Device& dev, TimedStream stream) {
  return std::make_unique<DeviceTimer>(
      dev.make_timer(stream == TimedStream::Comm ? StreamKind::Comm : StreamKind::Compute));
}

DeviceSet::DeviceSet(const BackendEntry& b, int k, int cpu_threads, const LinkSpec& link,
                     size_t device_mem)
    : devs(make_devices(b.name, k, cpu_threads)) {
  std::vector<Device*> ptrs;
  for (auto& d : devs) d->memory().set_capacity(device_mem), ptrs.push_back(d.get());
  group = std::make_unique<CommGroup>(k, ptrs, link);  // CUDA + link: refused
}

std::vector<size_t> DeviceSet::in_use() const {
  std::vector<size_t> b;
  for (const auto& d : devs) b.push_back(d->memory().current().total());
  return b;
}

size_t DeviceSet::alloc_bytes(const std::vector<size_t>& base) const {
  size_t most = 0;
  for (size_t r = 0; r < devs.size(); ++r) {
    const size_t peak = devs[r]->memory().peak().total();
    most = std::max(most, peak - std::min(peak, base[r]));
  }
  return most;
}

std::vector<size_t> allreduce_sizes(size_t cap) {
  std::vector<size_t> sizes;
  for (size_t s = 8; s <= cap; s *= 2) sizes.push_back(s);
  for (const ModelEntry& m : models()) {  // the real gradient sizes
    size_t n = 0;
    for (const auto& p : model_param_layout(m.name, ModelOptions{})) n += p.size;  // defaults
    if (n * sizeof(float) <= cap) sizes.push_back(n * sizeof(float));
  }
  std::sort(sizes.begin(), sizes.end());
  return sizes;
}

std::string bench_name(const std::string& family, const BackendEntry& b, const std::vector<std::string>& what,
                       int k, size_t bytes) {
  std::string s = family + "/" + b.name;
  for (const std::string& w : what) s += "/" + w;
  s += (family == "membw" ? "/threads:" : "/ranks:") + std::to_string(k);
  if (b.kind == BackendKind::Cuda && k > cuda_device_count()) s += "/shared";
  if (bytes > 0) s += "/bytes:" + std::to_string(bytes);
  return s;
}

void BenchEnv::not_registered(const std::string& base, size_t cap, const std::string& why) {
  skipped_.push_back({base, why, cap});
}

size_t BenchEnv::report_not_registered() const {
  // Google Benchmark's --benchmark_filter: a regex searched in each full name ("" and "all": every
  // benchmark; a leading '-' selects what does not match). Here a left-out configuration is
  // selected when the filter selects its name with a slash or any of its sizes' full names (the
  // sizes are listed only then, and only for a filter).
  std::string filter = benchmark::GetBenchmarkFilter();
  bool negate = !filter.empty() && filter[0] == '-';
  if (negate) filter.erase(0, 1);
  std::optional<std::regex> re;
  if (!filter.empty() && filter != "all") {
    try {
      re.emplace(filter, std::regex::extended);
    } catch (const std::regex_error&) {
      return 0;  // Google Benchmark reports the bad regex itself
    }
  }
  auto selected = [&](const std::string& name) {
    return !re || std::regex_search(name, *re) != negate;
  };
  std::map<std::string, std::vector<std::string>> by_why;  // reason -> names, in registration order
  std::vector<std::string> order;
  for (const Skipped& s : skipped_) {
    bool sel = selected(s.base + "/");
    if (!sel)
      for (size_t bytes : allreduce_sizes(s.cap))
        if ((sel = selected(s.base + "/bytes:" + std::to_string(bytes) + "/manual_time"))) break;
    if (!sel) continue;
    auto [it, fresh] = by_why.try_emplace(s.why);
    if (fresh) order.push_back(s.why);
    it->second.push_back(s.base);
  }
  size_t n = 0;
  for (const std::string& why : order) {
    std::string names;
    for (const std::string& name : by_why[why]) names += (names.empty() ? "" : ", ") + name;
    std::fprintf(stderr, "dpbench-micro: not registered (%s): %s\n", why.c_str(), names.c_str());
    n += by_why[why].size();
  }
  return n;
}

bool guarded(benchmark::State& st, const std::function<void()>& body) {
  try {
    body();
    return true;
  } catch (const std::exception& e) {
    st.SkipWithError(e.what());
  } catch (...) {
    st.SkipWithError("unknown exception");
  }
  return false;
}

double run_timed_loop(benchmark::State& st, RankThreads& pool,
                      const std::function<double(int)>& one) {
  const int k = pool.size();
  std::vector<double> t;  // [iteration in batch][rank]
  int64_t done = 0, batch = 1, have = 0, pos = 0;
  double total = 0;
  for (auto _ : st) {
    if (pos == have) {
      have = std::max<int64_t>(1, std::min<int64_t>(batch, st.max_iterations - done));
      pos = 0;
      t.assign(size_t(have) * k, 0.0);
      const auto w0 = Clock::now();
      if (!guarded(st, [&] {
            pool.run([&](int r) {
              for (int64_t i = 0; i < have; ++i) t[size_t(i) * k + r] = one(r);
            });
          }))
        break;
      if (Clock::now() - w0 < std::chrono::milliseconds(5) && batch < 4096) batch *= 2;
    }
    const double s = *std::max_element(t.begin() + pos * k, t.begin() + (pos + 1) * k);
    st.SetIterationTime(s);
    total += s;
    ++pos;
    ++done;
  }
  return total;
}

// ---------------------------------------------------------------- CopyRig, BenchEnv

CopyRig::CopyRig(const BackendEntry& b, int k, size_t bytes, bool cross)
    : n_(bytes / sizeof(float)), cross_(cross), t_(k, 0.0), devs_(make_devices(b.name, k, 1)), pool_(k) {
  for (int r = 0; r < k; ++r) {
    src_.emplace_back(*devs_[r], n_, MemCategory::Temporaries, "membw source");
    dst_.emplace_back(*devs_[r], n_, MemCategory::Temporaries, "membw destination");
    devs_[r]->fill(src_[r].get(), 1.0f, n_);  // touch every page: no shared zero page
    devs_[r]->fill(dst_[r].get(), 0.0f, n_);
    devs_[r]->synchronize();
    timers_.push_back(make_rank_timer(*devs_[r], TimedStream::Comm));
  }
}

double CopyRig::run_once() {
  const int k = pool_.size();
  pool_.run([&](int r) {
    if (cross_) {
      devs_[r]->fill(src_[r].get(), float(r + 1), n_);  // fresh lines in this rank's core
      devs_[r]->synchronize();
    }
    pool_.align(r);
    timers_[r]->start();
    if (cross_)
      devs_[r]->comm_reduce(dst_[r].get(), src_[(r + 1) % k].get(), n_);
    else
      devs_[r]->comm_copy(dst_[r].get(), src_[r].get(), n_);
    timers_[r]->stop();
    t_[r] = timers_[r]->seconds();  // waits for the copy (CUDA: the stop event)
  });
  return *std::max_element(t_.begin(), t_.end());
}

double CopyRig::gbps(double seconds) const {
  return 2.0 * double(pool_.size()) * double(n_ * sizeof(float)) / seconds / 1e9;
}

double BenchEnv::membw_bound_gbps(int threads) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = membw_.find(threads);
  if (it != membw_.end()) return it->second;
  CopyRig rig(backend_of_kind(BackendKind::Cpu), threads, kMembwBytes);
  rig.run_once();  // warm-up
  double best = 1e30;
  for (int i = 0; i < 5; ++i) best = std::min(best, rig.run_once());
  return membw_[threads] = rig.gbps(best);
}

double BenchEnv::cross_core_gbps(int k) {
  CopyRig rig(backend_of_kind(BackendKind::Cpu), k, kCrossProbeBytes, /*cross=*/true);
  rig.run_once();  // warm-up
  std::vector<double> t;
  for (int i = 0; i < 7; ++i) t.push_back(rig.run_once());
  std::sort(t.begin(), t.end());
  return rig.cross_gbps(t[t.size() / 2]);
}

const HostBatch& BenchEnv::batch(int n) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = batches_.find(n);
  if (it != batches_.end()) return it->second;
  HostBatch b;
  b.n = n;
  const std::string dir = resolve_data_dir(cfg_.data_dir);
  if (std::filesystem::exists(dir)) {  // a directory that exists but is broken is an error
    Dataset d = load_fashion_mnist(dir, n, 1);
    b.images = std::move(d.train.images);
    b.labels = std::move(d.train.labels);
    b.source = "fashion-mnist:" + dir;
  } else {
    uint64_t s = 0;
    b.images.resize(size_t(n) * 28 * 28);
    b.labels.resize(n);
    for (auto& p : b.images) p = uint8_t(splitmix64(s) & 0xff);
    for (auto& l : b.labels) l = uint8_t(splitmix64(s) % 10);
    b.source = "random pixels (seed 0)";
  }
  return batches_[n] = std::move(b);
}

}  // namespace dpb::bench
