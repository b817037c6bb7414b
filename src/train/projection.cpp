// projection.cpp: the one-device step profile (measured or read from JSON) and the projected
// epoch of k devices on a link. See projection.h; tested by tests/test_projection.cpp.
#include "src/train/projection.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <barrier>
#include <exception>
#include <fstream>
#include <functional>
#include <thread>

#include "kernels/backends.h"
#include "src/core/check.h"
#include "src/core/registry.h"
#include "src/core/stats.h"
#include "src/model/model.h"
#include "src/train/loss.h"
#include "src/train/optimizer.h"
#include "src/train/step.h"

namespace dpb {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

constexpr const char* kFormat = "dpbench-profile/1";

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

double median(std::vector<double> xs) { return median_ci95(std::move(xs)).median; }

}  // namespace

namespace {

// One replica's raw times per recorded step (step 0, the warm-up, is not recorded): each phase's
// duration, and each parameter's gradient-ready time since the start of backward.
struct RawSteps {
  std::string device;
  std::vector<double> data, fwd, bwd, opt;
  std::vector<std::vector<double>> ready;  // [step][param]
  std::vector<std::string> names;
  std::vector<size_t> sizes;
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
  for (int step = 0; step <= steps; ++step) {  // step 0: warm-up, not recorded
    step_start();
    auto t = Clock::now();
    load_batch(rep, img.data(), lab.data(), batch);
    dev.synchronize();
    const double d = since(t);
    t = Clock::now();
    step_forward(rep, batch, 1.0f / float(batch));
    dev.synchronize();
    const double f = since(t);
    std::vector<double> r(np, -1.0);
    t = Clock::now();
    step_backward(rep, batch, /*reduce=*/false, [&](int i) {
      dev.synchronize();  // CUDA: the gradient is final when the stream gets here
      r[i] = since(t);
    });
    dev.synchronize();
    const double b = since(t);
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
  std::vector<std::vector<double>> ready(np);
  for (size_t s = 0; s < steps; ++s) {
    double D = 0, F = 0, E = 0, O = 0;
    std::vector<double> B(np, 0.0);
    for (const RawSteps& r : reps) {
      D = std::max(D, r.data[s]);
      F = std::max(F, r.data[s] + r.fwd[s]);
      E = std::max(E, r.data[s] + r.fwd[s] + r.bwd[s]);
      O = std::max(O, r.opt[s]);
      for (size_t i = 0; i < np; ++i) B[i] = std::max(B[i], r.data[s] + r.fwd[s] + r.ready[s][i]);
    }
    data.push_back(D);
    fwd.push_back(F - D);
    bwd.push_back(E - F);
    opt.push_back(O);
    for (size_t i = 0; i < np; ++i) ready[i].push_back(B[i] - F);
  }
  StepProfile p;
  p.device = r0.device;
  p.data_s = median(data);
  p.forward_s = median(fwd);
  p.backward_s = median(bwd);
  p.optimizer_s = median(opt);
  for (size_t i = 0; i < np; ++i) p.params.push_back({r0.names[i], r0.sizes[i], median(ready[i])});
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
  for (const auto& q : p.params)
    params.push_back({{"name", q.name}, {"floats", q.floats}, {"ready_s", q.ready_s}});
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
  auto number = [&](const char* key) {
    const auto& v = field(key);
    DPB_CHECK(v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() >= 0,
              source << ": profile field \"" << key << "\" must be a number >= 0");
    return v.get<double>();
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
  p.threads = int(number("threads"));
  p.batch = int(number("batch"));
  p.ranks = j.contains("ranks") ? int(number("ranks")) : 1;
  DPB_CHECK(p.ranks >= 1, source << ": profile field \"ranks\" must be >= 1");
  DPB_CHECK(p.batch >= 1, source << ": profile field \"batch\" must be >= 1");
  p.steps = int(number("steps"));
  p.data_s = number("data_s");
  p.forward_s = number("forward_s");
  p.backward_s = number("backward_s");
  p.optimizer_s = number("optimizer_s");
  const auto& params = field("params");
  DPB_CHECK(params.is_array(), source << ": \"params\" must be an array");
  for (const auto& q : params) {
    DPB_CHECK(q.is_object() && q.contains("floats") && q.contains("ready_s") &&
                  q["floats"].is_number_integer() && q["floats"].get<long long>() >= 0 &&
                  q["ready_s"].is_number(),
              source << ": every entry of \"params\" needs \"floats\" (count) and \"ready_s\"");
    p.params.push_back({q.value("name", ""), q["floats"].get<size_t>(), q["ready_s"].get<double>()});
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

namespace {

struct StepTimes {
  double step = 0, data = 0, comm = 0, exposed = 0;
};

// One step on one rank with `shard` images per device; f: the compute stretch.
StepTimes project_step(const StepProfile& prof, BackendKind kind, const ProjectConfig& cfg,
                       const std::vector<Unit>& units, int shard, double f) {
  const double scale = double(shard) / prof.batch * f;
  StepTimes t;
  t.data = prof.data_s * scale;
  const double fwd = prof.forward_s * scale, bwd = prof.backward_s * scale;
  double comm_end = 0;  // the communication stream, from the start of backward
  for (const Unit& u : units) {
    const double c = allreduce_link_cost(cfg.allreduce, double(u.count) * sizeof(float),
                                         cfg.devices, cfg.link, kind, cfg.tune_file);
    t.comm += c;
    double ready = 0;
    for (int p = u.first_param; p <= u.last_param; ++p)
      ready = std::max(ready, prof.params[p].ready_s * scale);
    comm_end = cfg.sync.overlap ? std::max(comm_end, ready) + c : comm_end + c;
  }
  t.exposed = cfg.sync.overlap ? std::max(0.0, comm_end - bwd) : comm_end;
  t.step = t.data + fwd + bwd + t.exposed + prof.optimizer_s * f;
  return t;
}

}  // namespace

Projection project(const StepProfile& prof, const ProjectConfig& cfg) {
  const int k = cfg.devices;
  DPB_CHECK(k >= 1, "--devices: must be >= 1, got " << k);
  DPB_CHECK(cfg.batch >= k, "--batch: the global batch (" << cfg.batch
                                << ") is smaller than the device count (" << k << ")");
  DPB_CHECK(cfg.train_examples >= 1, "training examples must be >= 1");
  std::vector<size_t> sizes;
  for (const auto& q : prof.params) sizes.push_back(q.floats);
  const std::vector<Unit> units = plan_units(sizes, cfg.sync);
  Projection p;
  p.units = int(units.size());
  const BackendEntry& backend = find_backend(prof.backend);
  // Ranks computing on the host share its cores: relative to the sharing the profile saw.
  if (!backend.physical_devices && cfg.cores > 0) {
    auto share = [&](int ranks) { return std::max(1.0, double(ranks) * prof.threads / cfg.cores); };
    p.compute_stretch = std::max(1.0, share(k) / share(prof.ranks));
  }
  const int full = cfg.train_examples / cfg.batch, rest = cfg.train_examples % cfg.batch;
  p.steps = full + (rest > 0);
  auto add = [&](const StepTimes& t, int times) {
    p.epoch_s += t.step * times;
    p.data_s += t.data * times;
    p.comm_s += (k > 1 ? t.comm : 0) * times;
    p.exposed_comm_s += (k > 1 ? t.exposed : 0) * times;
  };
  const StepTimes one =
      project_step(prof, backend.kind, cfg, units, (cfg.batch + k - 1) / k, p.compute_stretch);
  p.step_s = one.step;
  add(one, full);
  if (rest > 0)
    add(project_step(prof, backend.kind, cfg, units, (rest + k - 1) / k, p.compute_stretch), 1);
  p.compute_s = std::max(0.0, p.epoch_s - p.data_s - p.exposed_comm_s);  // as the trainer's CSV
  return p;
}

nlohmann::json projection_to_json(const StepProfile& prof, const ProjectConfig& cfg,
                                  const Projection& p) {
  return {{"model", prof.model},
          {"optimizer", prof.optimizer},
          {"loss", prof.loss},
          {"devices", cfg.devices},
          {"global_batch", cfg.batch},
          {"train_examples", cfg.train_examples},
          {"allreduce", cfg.allreduce},
          {"grad_sync", to_string(cfg.sync.mode)},
          {"bucket_mb", cfg.sync.bucket_mb},
          {"overlap", cfg.sync.overlap ? "on" : "off"},
          {"link_gbps", cfg.link.gbps},
          {"link_latency_us", cfg.link.latency_us},
          {"steps", p.steps},
          {"units", p.units},
          {"step_s", p.step_s},
          {"epoch_s", p.epoch_s},
          {"compute_s", p.compute_s},
          {"data_s", p.data_s},
          {"comm_s", p.comm_s},
          {"exposed_comm_s", p.exposed_comm_s},
          {"compute_stretch", p.compute_stretch},
          {"profile", {{"backend", prof.backend}, {"device", prof.device}, {"cpu", prof.cpu},
                       {"threads", prof.threads}, {"ranks", prof.ranks},
                       {"batch", prof.batch}}}};
}

}  // namespace dpb
