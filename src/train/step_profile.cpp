// step_profile.cpp: the one-device step profile that `dpbench project` projects from, measured
// with the trainer's own step functions or read from JSON. See projection.h; tested by
// tests/test_projection.cpp.
#include "src/train/projection.h"

#include "src/core/cpu_info.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <barrier>
#include <exception>
#include <fstream>
#include <functional>
#include <thread>

#include "collectives/registry.h"
#include "kernels/backends.h"
#include "src/core/check.h"
#include "src/core/registry.h"
#include "src/core/stats.h"
#include "src/model/model.h"
#include "src/train/loss.h"
#include "src/train/optimizer.h"
#include "src/train/run_options.h"
#include "src/train/step.h"

namespace dpb {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

constexpr const char* kFormat = "dpbench-profile/1";

double median(std::vector<double> xs) { return median_ci95(std::move(xs)).median; }

}  // namespace

namespace {

// One replica's raw times per recorded step (step 0, the warm-up, is not recorded): each phase's
// duration, and each parameter's gradient-ready time since the start of backward.
struct RawSteps {
  std::string device;
  std::vector<double> data, fwd, bwd, opt;
  std::vector<std::vector<double>> ready;  // [step][param]
  std::vector<std::vector<double>> fwd_at, bwd_at;  // [step][param]: first asked, since the phase's start
  std::vector<std::string> names;
  std::vector<size_t> sizes;
};

// The model's view of the replica's parameters, taking the time the model first asks for each
// parameter in a phase (it asks right before issuing the op that uses it: model.h), on a
// synchronized device (CUDA: the ops before it are done).
class ClockedParams final : public ParamSource {
 public:
  ClockedParams(ParamSource& inner, Device& dev, size_t n) : inner_(inner), dev_(dev), at_(n) {}
  void start() {
    std::fill(at_.begin(), at_.end(), -1.0);
    t0_ = Clock::now();
  }
  const float* param(int i) override {
    if (at_[size_t(i)] < 0) {
      dev_.synchronize();
      at_[size_t(i)] = since(t0_);
    }
    return inner_.param(i);
  }
  float* grad(int i) override { return inner_.grad(i); }
  const std::vector<double>& at() const { return at_; }

 private:
  ParamSource& inner_;
  Device& dev_;
  std::vector<double> at_;
  Clock::time_point t0_;
};

// Rank r's replica's steps, made of the trainer's own step functions (src/train/step.h), without
// communication: data, forward with the loss, backward (each gradient's ready time taken on a
// synchronized device), the optimizer's update. `step_start` is called before every step (all
// replicas start together).
RawSteps measure_one(Replica& rep, int batch, int steps, const std::function<void()>& step_start) {
  Device& dev = *rep.dev;
  const size_t in = size_t(rep.model->input_size());
  std::vector<uint8_t> img(size_t(batch) * in), lab(batch);
  uint64_t s = 12345;
  for (auto& v : img) v = uint8_t(splitmix64(s) & 0xff);
  for (auto& v : lab) v = uint8_t(splitmix64(s) % kClasses);

  const int np = int(rep.model->params().size());
  RawSteps out;
  out.device = dev.name();
  for (const auto& q : rep.model->params()) {
    out.names.push_back(q.name);
    out.sizes.push_back(q.size);
  }
  ClockedParams clocked(rep.params(), dev, size_t(np));
  for (int step = 0; step <= steps; ++step) {  // step 0: warm-up, not recorded
    step_start();
    auto t = Clock::now();
    load_batch(rep, img.data(), lab.data(), batch);
    dev.synchronize();
    const double d = since(t);
    // The trainer's step functions (no communication), the model reading its parameters
    // through `clocked` (the replica's own view, timed).
    clocked.start();
    t = Clock::now();
    step_forward(rep, batch, 1.0f / float(batch), &clocked);
    dev.synchronize();
    const double f = since(t);
    std::vector<double> fa = clocked.at();
    std::vector<double> r(np, -1.0);
    clocked.start();
    t = Clock::now();
    step_backward(rep, batch, false, [&](int i) {
      dev.synchronize();  // CUDA: the gradient is final when the stream gets here
      r[i] = since(t);
    }, &clocked);
    dev.synchronize();
    const double b = since(t);
    std::vector<double> ba = clocked.at();
    t = Clock::now();
    step_update(rep, 1e-4f);
    dev.synchronize();
    const double o = since(t);
    if (step == 0) continue;
    for (int i = 0; i < np; ++i)
      DPB_CHECK(r[i] >= 0, "profile: backward never reported parameter " << i << " ready");
    out.data.push_back(d);
    out.fwd.push_back(f);
    out.bwd.push_back(b);
    out.opt.push_back(o);
    out.ready.push_back(std::move(r));
    out.fwd_at.push_back(std::move(fa));
    out.bwd_at.push_back(std::move(ba));
  }
  return out;
}

// The replicas' steps as one synchronized step (a collective waits for the last rank): each
// phase ends, per step, when the slowest replica's ends (times since the common step start);
// medians over steps.
StepProfile combine(const std::vector<RawSteps>& reps) {
  const RawSteps& r0 = reps[0];
  const size_t steps = r0.data.size(), np = r0.names.size();
  std::vector<double> data, fwd, bwd, opt;
  std::vector<std::vector<double>> ready(np), fwd_at(np), bwd_at(np);
  for (size_t s = 0; s < steps; ++s) {
    double D = 0, F = 0, E = 0, O = 0;
    // FA, BA: -1 where the phase never asked for the parameter (backward needs no bias).
    std::vector<double> B(np, 0.0), FA(np, 0.0), BA(np, 0.0);
    for (const RawSteps& r : reps) {
      D = std::max(D, r.data[s]);
      F = std::max(F, r.data[s] + r.fwd[s]);
      E = std::max(E, r.data[s] + r.fwd[s] + r.bwd[s]);
      O = std::max(O, r.opt[s]);
      for (size_t i = 0; i < np; ++i) {
        B[i] = std::max(B[i], r.data[s] + r.fwd[s] + r.ready[s][i]);
        FA[i] = FA[i] < 0 || r.fwd_at[s][i] < 0 ? -1.0 : std::max(FA[i], r.data[s] + r.fwd_at[s][i]);
        BA[i] = BA[i] < 0 || r.bwd_at[s][i] < 0 ? -1.0
                                                 : std::max(BA[i], r.data[s] + r.fwd[s] + r.bwd_at[s][i]);
      }
    }
    data.push_back(D);
    fwd.push_back(F - D);
    bwd.push_back(E - F);
    opt.push_back(O);
    for (size_t i = 0; i < np; ++i) {
      ready[i].push_back(B[i] - F);
      fwd_at[i].push_back(FA[i] < 0 ? -1.0 : std::max(0.0, FA[i] - D));
      bwd_at[i].push_back(BA[i] < 0 ? -1.0 : std::max(0.0, BA[i] - F));
    }
  }
  StepProfile p;
  p.device = r0.device;
  p.data_s = median(data);
  p.forward_s = median(fwd);
  p.backward_s = median(bwd);
  p.optimizer_s = median(opt);
  for (size_t i = 0; i < np; ++i)
    p.params.push_back({r0.names[i], r0.sizes[i], median(ready[i]), median(fwd_at[i]),
                        median(bwd_at[i])});
  return p;
}

}  // namespace

StepProfile measure_profile(const std::string& model, const ModelOptions& opts,
                            const std::string& optimizer, const std::string& loss,
                            const std::string& backend, int threads, int batch, int steps,
                            int ranks) {
  DPB_CHECK(is_model_name(model), "profile: unknown model '" << model << "'");
  DPB_CHECK(batch >= 1 && steps >= 1, "profile: batch and steps must be >= 1");
  const BackendEntry& be = find_backend(backend);
  // Side by side, the ranks share the host's cores as a run's would; on GPUs they would not.
  DPB_CHECK(ranks >= 1 && (ranks == 1 || !be.physical_devices),
            "profile: side-by-side ranks (" << ranks << ") need the CPU backend");
  // The ranks' replicas as the trainer sets them up (one group; nothing is ever reduced: per
  // parameter, so the all-reduce reserves no more than the largest parameter), each with the
  // same initial parameters.
  std::vector<std::unique_ptr<Device>> devs;
  for (int r = 0; r < ranks; ++r)
    devs.push_back(make_device(be, r, DeviceOptions{threads, false, /*gpu=*/0}));
  RankSet set(std::move(devs), "ring");
  const GradSyncConfig no_sync{SyncMode::PerParam, false};
  std::vector<Replica> reps;
  const std::vector<float> init = init_params(model_param_layout(model, opts), 0);
  for (int r = 0; r < ranks; ++r) {
    reps.push_back(make_replica(set[r], *set.group, model, opts, batch, no_sync, *set.allreduce,
                                optimizer, loss));
    set[r].upload(reps[r].w.get(), init.data(), init.size());
  }
  std::barrier<> sync(ranks);
  std::vector<RawSteps> out(ranks);
  std::vector<std::exception_ptr> err(ranks);
  auto body = [&](int r) {
    try {
      out[r] = measure_one(reps[r], batch, steps, [&] { if (ranks > 1) sync.arrive_and_wait(); });
    } catch (...) {
      err[r] = std::current_exception();
      if (ranks > 1) sync.arrive_and_drop();  // the others do not wait for this one
    }
  };
  std::vector<std::thread> pool;
  for (int r = 1; r < ranks; ++r) pool.emplace_back(body, r);
  body(0);
  for (auto& t : pool) t.join();
  for (auto& e : err)
    if (e) std::rethrow_exception(e);
  StepProfile p = combine(out);
  p.model = model;
  p.model_opts = opts;
  p.optimizer = optimizer;
  p.loss = loss;
  p.backend = backend;
  p.cpu = cpu_model_name();
  p.threads = threads;
  p.batch = batch;
  p.steps = steps;
  p.ranks = ranks;
  return p;
}

nlohmann::json profile_to_json(const StepProfile& p) {
  nlohmann::json params = nlohmann::json::array();
  for (const auto& q : p.params) {
    nlohmann::json e = {{"name", q.name}, {"floats", q.floats}, {"ready_s", q.ready_s}};
    if (q.fwd_at_s >= 0) e["fwd_at_s"] = q.fwd_at_s;  // absent: not asked in that phase
    if (q.bwd_at_s >= 0) e["bwd_at_s"] = q.bwd_at_s;
    params.push_back(std::move(e));
  }
  const nlohmann::json mo = {{"mlp_layers", p.model_opts.mlp_layers},
                             {"mlp_hidden", p.model_opts.mlp_hidden},
                             {"mlp_input", p.model_opts.mlp_input}};
  return {{"format", kFormat},     {"model", p.model},         {"model_options", mo},
          {"optimizer", p.optimizer}, {"loss", p.loss},
          {"backend", p.backend},
          {"device", p.device},    {"cpu", p.cpu},             {"threads", p.threads},
          {"ranks", p.ranks},
          {"batch", p.batch},      {"steps", p.steps},         {"data_s", p.data_s},
          {"forward_s", p.forward_s}, {"backward_s", p.backward_s},
          {"optimizer_s", p.optimizer_s}, {"params", params}};
}

StepProfile profile_from_json(const nlohmann::json& j, const std::string& source) {
  auto field = [&](const char* key) -> const nlohmann::json& {
    DPB_CHECK(j.is_object() && j.contains(key), source << ": profile has no \"" << key << "\"");
    return j.at(key);
  };
  // Times are seconds in [0, kMaxSeconds] (1e308 made epoch_s overflow to null, -5 was taken);
  // counts are integers in their option's range (a cast would truncate 64.5 or wrap 1e308).
  constexpr double kMaxSeconds = 1e6;
  auto seconds = [&](const nlohmann::json& v, const std::string& what) {
    DPB_CHECK(v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() >= 0 &&
                  v.get<double>() <= kMaxSeconds,
              source << ": profile field " << what << " must be a number of seconds in [0, "
                     << kMaxSeconds << "], got " << v.dump());
    return v.get<double>();
  };
  auto number = [&](const char* key) {
    std::string quoted = "\"";  // not "\"" + std::string(key): GCC 12's false -Wrestrict
    return seconds(field(key), quoted.append(key).append("\""));
  };
  auto count = [&](const char* key, long long lo, long long hi) {
    const auto& v = field(key);
    const bool ok = v.is_number_unsigned()
                        ? v.get<unsigned long long>() <= (unsigned long long)hi &&
                              (long long)v.get<unsigned long long>() >= lo
                        : v.is_number_integer() && v.get<long long>() >= lo && v.get<long long>() <= hi;
    DPB_CHECK(ok, source << ": profile field \"" << key << "\" must be an integer in [" << lo
                         << ", " << hi << "], got " << v.dump());
    return int(v.get<long long>());
  };
  DPB_CHECK(field("format").is_string() && field("format").get<std::string>() == kFormat,
            source << ": not a " << kFormat << " profile (\"format\" is " << field("format") << ")");
  StepProfile p;
  try {
    p.model = field("model").get<std::string>();
    p.backend = field("backend").get<std::string>();
    p.device = j.value("device", "");
    p.cpu = j.value("cpu", "");
    p.optimizer = j.value("optimizer", p.optimizer);  // older profiles: sgd with xent
    p.loss = j.value("loss", p.loss);
  } catch (const nlohmann::json::exception& e) {
    DPB_CHECK(false, source << ": profile strings: " << e.what());
  }
  DPB_CHECK(is_model_name(p.model), source << ": unknown model '" << p.model << "'");
  if (j.contains("model_options")) {  // older profiles: the defaults
    const auto& mo = j.at("model_options");
    auto opt = [&](const char* key, int fallback) {
      if (!mo.is_object() || !mo.contains(key)) return fallback;
      DPB_CHECK(mo.at(key).is_number_integer() && mo.at(key).get<long long>() >= 1 &&
                    mo.at(key).get<long long>() <= 10000000,
                source << ": \"model_options\"." << key << " must be an integer in [1, 1e7]");
      return mo.at(key).get<int>();
    };
    p.model_opts.mlp_layers = opt("mlp_layers", p.model_opts.mlp_layers);
    p.model_opts.mlp_hidden = opt("mlp_hidden", p.model_opts.mlp_hidden);
    p.model_opts.mlp_input = opt("mlp_input", p.model_opts.mlp_input);
  }
  DPB_CHECK(find_entry(optimizers(), p.optimizer) != nullptr,
            source << ": unknown optimizer '" << p.optimizer << "' (valid: "
                   << entry_names(optimizers()) << ")");
  DPB_CHECK(find_entry(losses(), p.loss) != nullptr,
            source << ": unknown loss '" << p.loss << "' (valid: " << entry_names(losses()) << ")");
  DPB_CHECK(find_entry(backends(), p.backend) != nullptr,
            source << ": unknown backend '" << p.backend << "' (valid: " << entry_names(backends())
                   << ")");
  p.threads = count("threads", 0, kMaxThreads);
  p.batch = count("batch", 1, kMaxBatch);
  p.ranks = j.contains("ranks") ? count("ranks", 1, kMaxRanks) : 1;
  p.steps = count("steps", 0, 1 << 30);
  p.data_s = number("data_s");
  p.forward_s = number("forward_s");
  p.backward_s = number("backward_s");
  p.optimizer_s = number("optimizer_s");
  const auto& params = field("params");
  DPB_CHECK(params.is_array(), source << ": \"params\" must be an array");
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& q = params[i];
    DPB_CHECK(q.is_object() && q.contains("floats") && q.contains("ready_s") &&
                  q["floats"].is_number_integer() && q["floats"].get<long long>() >= 0,
              source << ": every entry of \"params\" needs \"floats\" (count) and \"ready_s\"");
    const std::string entry = "\"params\"[" + std::to_string(i) + "].";
    auto at = [&](const char* key) {  // optional: older profiles, or not asked in that phase
      return q.contains(key) ? seconds(q[key], entry + key) : -1.0;
    };
    p.params.push_back({q.value("name", ""), q["floats"].get<size_t>(),
                        seconds(q["ready_s"], entry + "ready_s"), at("fwd_at_s"), at("bwd_at_s")});
  }
  const auto layout = model_param_layout(p.model, p.model_opts);
  DPB_CHECK(layout.size() == p.params.size(),
            source << ": " << p.params.size() << " parameters, but " << p.model << " has "
                   << layout.size());
  for (size_t i = 0; i < layout.size(); ++i)
    DPB_CHECK(layout[i].size == p.params[i].floats,
              source << ": parameter " << i << " has " << p.params[i].floats << " floats, "
                     << p.model << "'s " << layout[i].name << " has " << layout[i].size);
  return p;
}

}  // namespace dpb
