// trainer.cpp: the data-parallel training loop (see trainer.h). One host thread per rank.
#include "src/train/trainer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <mutex>
#include <thread>

#include "collectives/allreduce.h"
#include "collectives/registry.h"
#include "collectives/tuning.h"
#include "src/core/backends.h"
#include "src/core/check.h"
#include "src/core/nvtx.h"
#include "src/core/registry.h"
#include "src/model/model.h"

namespace dpb {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

constexpr int kClasses = 10;
constexpr int kPixels = 28 * 28;

// Everything one rank owns.
struct Replica {
  std::unique_ptr<Device> dev;
  std::unique_ptr<Model> model;
  Buffer w, g, x, y, dlogits, stats;
  std::unique_ptr<GradSync> sync;
  std::vector<uint8_t> host_x, host_y;  // staging for this rank's shard
  std::vector<float> host_w;            // end-of-epoch copy for the replica check
  float host_stats[2] = {0, 0};
  double data_s = 0;
};

// Copies examples idx[lo, lo+n) of split into the replica's device buffers.
void load_shard(Replica& rep, const Split& split, const int* idx, int n) {
  for (int i = 0; i < n; ++i) {
    std::copy_n(split.images.data() + size_t(idx[i]) * kPixels, kPixels,
                rep.host_x.data() + size_t(i) * kPixels);
    rep.host_y[i] = split.labels[idx[i]];
  }
  rep.dev->load_images(rep.x.get(), rep.host_x.data(), size_t(n) * kPixels);
  rep.dev->load_labels(rep.y.get(), rep.host_y.data(), n);
}

double lr_at(const TrainConfig& cfg, double epoch_progress) {
  if (cfg.warmup_epochs <= 0 || epoch_progress >= cfg.warmup_epochs) return cfg.lr;
  double start = cfg.lr / cfg.devices;
  return start + (cfg.lr - start) * (epoch_progress / cfg.warmup_epochs);
}

}  // namespace

void validate(const TrainConfig& cfg, const Dataset& data) {
  DPB_CHECK(is_model_name(cfg.model), "--model: unknown model '" << cfg.model << "' (valid: "
                                                                 << entry_names(models()) << ")");
  const BackendEntry& backend = find_backend(cfg.backend);
  DPB_CHECK(cfg.devices >= 1 && cfg.devices <= 64,
            "--devices: must be between 1 and 64, got " << cfg.devices);
  DPB_CHECK(cfg.batch >= cfg.devices, "--batch: the global batch (" << cfg.batch
                                          << ") is smaller than the device count (" << cfg.devices
                                          << "); every device needs at least one example");
  DPB_CHECK(cfg.lr > 0 && std::isfinite(cfg.lr), "--lr: must be a positive number, got " << cfg.lr);
  DPB_CHECK(cfg.epochs >= 1, "--epochs: must be >= 1, got " << cfg.epochs);
  DPB_CHECK(cfg.warmup_epochs >= 0, "--warmup-epochs: must be >= 0, got " << cfg.warmup_epochs);
  DPB_CHECK(cfg.sync.bucket_mb > 0, "--bucket-mb: must be > 0, got " << cfg.sync.bucket_mb);
  DPB_CHECK(cfg.threads >= 0, "--threads: must be >= 0, got " << cfg.threads);
  const std::string why = allreduce_refusal(find_allreduce(cfg.allreduce), cfg.devices, backend.kind);
  DPB_CHECK(why.empty(), why);
  if (!cfg.tune_file.empty()) load_tune_file(cfg.tune_file);  // throws naming what is wrong
  DPB_CHECK(data.train.n >= cfg.devices, "training set: " << data.train.n
                                             << " examples is fewer than the device count "
                                             << cfg.devices);
  DPB_CHECK(data.test.n >= 1, "test set is empty");
  const std::string unavailable = backend.unavailable();
  DPB_CHECK(unavailable.empty(), "--backend " << cfg.backend << ": " << unavailable);
}

TrainResult train(const TrainConfig& cfg, const Dataset& data,
                  const EpochCallback& on_epoch) {
  validate(cfg, data);
  const int k = cfg.devices;
  const int ngpu = cfg.backend == "cuda" ? cuda_device_count() : 0;
  const int hw = std::max(1u, std::thread::hardware_concurrency());
  const int threads = cfg.threads > 0 ? cfg.threads : std::max(1, hw / k);
  const int shard_max = (cfg.batch + k - 1) / k;
  const int eval_batch = std::max(shard_max, 64);

  TrainResult result;
  result.shared_gpu = cfg.backend == "cuda" && k > ngpu;

  // ---- set up every rank before any work, so configuration and memory errors surface here ----
  std::vector<Replica> reps(k);
  std::vector<Device*> devptrs;
  for (int r = 0; r < k; ++r) {
    reps[r].dev = make_device(cfg.backend, r, DeviceOptions{threads, cfg.tf32});
    devptrs.push_back(reps[r].dev.get());
    result.device_names.push_back(reps[r].dev->name());
  }
  CommGroup group(k, devptrs);
  adapt_barrier_spin(group, cfg.sync);
  auto allreduce = make_allreduce(cfg.allreduce, group, AllReduceOptions{cfg.tune_file});
  result.allreduce_resolved = allreduce->describe();
  const std::vector<ParamInfo> layout = model_param_layout(cfg.model);
  const std::vector<float> init = init_params(layout, cfg.seed);
  for (int r = 0; r < k; ++r) {
    Replica& rep = reps[r];
    Device& dev = *rep.dev;
    int mb = r == 0 ? eval_batch : shard_max;
    rep.model = make_model(cfg.model, dev, mb);
    size_t P = rep.model->num_floats();
    rep.w = Buffer(dev, P, "parameters");
    rep.g = Buffer(dev, P, "gradients");
    rep.x = Buffer(dev, size_t(mb) * kPixels, "input images");
    rep.y = Buffer(dev, size_t(mb), "input labels");
    rep.dlogits = Buffer(dev, size_t(mb) * kClasses, "logits gradient");
    rep.stats = Buffer(dev, 2, "loss/accuracy accumulators");
    rep.host_x.resize(size_t(mb) * kPixels);
    rep.host_y.resize(mb);
    rep.sync = std::make_unique<GradSync>(cfg.sync, rep.model->param_sizes(), *allreduce, dev, r,
                                          rep.g.get());
  }
  const size_t P = reps[0].model->num_floats();
  reps[0].dev->upload(reps[0].w.get(), init.data(), P);  // rank 0 initializes ...

  const int ntrain = data.train.n;
  const int steps = (ntrain + cfg.batch - 1) / cfg.batch;
  std::vector<int> perm;
  HostBarrier host_barrier(k);
  auto barrier_wait = [&](int r) {  // throws when another rank failed and aborted the run
    if (!host_barrier.arrive_and_wait()) DPB_CHECK(false, "rank " << r << " stopped: another rank failed");
  };
  std::mutex err_mu;

  auto rank_main = [&](int r) {
    Replica& rep = reps[r];
    Device& dev = *rep.dev;
    Model& model = *rep.model;
    {  // ... and broadcasts its parameters to every replica over the transport.
      NvtxRange nv("broadcast parameters");
      group.exchange(r, rep.w.get());
      if (r != 0) dev.comm_copy(rep.w.get(), group.peer(0), P);
      group.barrier(r);
      dev.comm_synchronize();
    }
    for (int e = 0; e < cfg.epochs; ++e) {
      NvtxRange nv_epoch("epoch " + std::to_string(e + 1));
      if (r == 0) perm = epoch_permutation(ntrain, cfg.seed, e);
      dev.fill(rep.stats.get(), 0.0f, 2);
      rep.sync->reset_times();
      rep.data_s = 0;
      barrier_wait(r);
      auto t0 = Clock::now(), last_report = t0;
      double lr = cfg.lr;
      for (int s = 0; s < steps; ++s) {
        const int gb = std::min(cfg.batch, ntrain - s * cfg.batch);
        const int lo = int(chunk_begin(gb, k, r)), n = int(chunk_size(gb, k, r));
        lr = lr_at(cfg, e + double(s) / steps);
        {
          NvtxRange nv("data");
          auto td = Clock::now();
          load_shard(rep, data.train, perm.data() + size_t(s) * cfg.batch + lo, n);
          rep.data_s += since(td);
        }
        rep.sync->begin_step();
        if (n > 0) {
          const float* logits;
          {
            NvtxRange nv("forward");
            logits = model.forward(rep.w.get(), rep.x.get(), n, true);
            dev.softmax_xent(n, kClasses, logits, rep.y.get(), 1.0f / gb, rep.dlogits.get(),
                             rep.stats.get());
          }
          NvtxRange nv("backward");
          model.backward(rep.w.get(), rep.g.get(), rep.dlogits.get(), n,
                         [&](int i) { rep.sync->grad_ready(i); });
        } else {  // an empty shard (last partial batch smaller than k) contributes zeros
          dev.fill(rep.g.get(), 0.0f, P);
          for (int i = int(model.params().size()) - 1; i >= 0; --i) rep.sync->grad_ready(i);
        }
        {
          NvtxRange nv("gradient sync wait");
          rep.sync->finish();
        }
        {
          NvtxRange nv("optimizer step");
          dev.sgd_step(rep.w.get(), rep.g.get(), float(lr), P);
        }
        if (r == 0 && cfg.progress && since(last_report) > 10.0) {
          dev.synchronize();
          last_report = Clock::now();
          std::fprintf(stderr, "  epoch %d: step %d/%d (%.0f%%), %.1f s\n", e + 1, s + 1, steps,
                       100.0 * (s + 1) / steps, since(t0));
        }
      }
      dev.synchronize();
      barrier_wait(r);
      const double epoch_s = since(t0);

      // ---- end of epoch: replica check, statistics, evaluation (not timed) ----
      rep.host_w.resize(P);
      dev.download(rep.host_w.data(), rep.w.get(), P);
      dev.download(rep.host_stats, rep.stats.get(), 2);
      barrier_wait(r);
      if (r == 0) {
        EpochStats st;
        st.epoch = e + 1;
        st.epoch_s = epoch_s;
        st.images_per_s = ntrain / epoch_s;
        st.lr_end = lr;
        double loss = 0, correct = 0, maxdiff = 0;
        for (auto& o : reps) {
          loss += o.host_stats[0];
          correct += o.host_stats[1];
          for (size_t i = 0; i < P; ++i)
            maxdiff = std::max(maxdiff, double(std::fabs(o.host_w[i] - rep.host_w[i])));
        }
        st.train_loss = loss / steps;
        st.train_acc = correct / ntrain;
        st.max_replica_diff = maxdiff;
        st.replicas_in_sync = maxdiff == 0.0;
        const SyncTimes& t = rep.sync->times();
        st.comm_s = t.comm_s;
        st.exposed_comm_s = t.exposed_s;
        st.comm_calls = t.calls;
        st.data_s = rep.data_s;
        st.compute_s = std::max(0.0, epoch_s - rep.data_s - t.exposed_s);
        {
          NvtxRange nv("evaluate");
          dev.fill(rep.stats.get(), 0.0f, 2);
          std::vector<int> idx(eval_batch);
          for (int i0 = 0; i0 < data.test.n; i0 += eval_batch) {
            int n = std::min(eval_batch, data.test.n - i0);
            for (int i = 0; i < n; ++i) idx[i] = i0 + i;
            load_shard(rep, data.test, idx.data(), n);
            const float* logits = model.forward(rep.w.get(), rep.x.get(), n, false);
            dev.softmax_xent(n, kClasses, logits, rep.y.get(), 1.0f, nullptr, rep.stats.get());
          }
          float ev[2];
          dev.download(ev, rep.stats.get(), 2);
          st.test_acc = ev[1] / data.test.n;
        }
        result.epochs.push_back(st);
        if (on_epoch) on_epoch(st, result);
      }
      barrier_wait(r);
    }
    if (r == 0) result.final_params = rep.host_w;
  };

  std::vector<std::thread> pool;
  std::exception_ptr first_error;
  auto guarded = [&](int r) {
    try {
      rank_main(r);
    } catch (const std::exception& ex) {
      // Wake every rank blocked in a barrier or collective; they throw in turn. The first error
      // (the cause) is the one reported.
      {
        std::lock_guard<std::mutex> lock(err_mu);
        if (!first_error) first_error = std::current_exception();
      }
      group.abort(r, std::string("rank ") + std::to_string(r) + " failed: " + ex.what());
      host_barrier.abort();
    }
  };
  for (int r = 1; r < k; ++r) pool.emplace_back(guarded, r);
  guarded(0);
  for (auto& t : pool) t.join();
  if (first_error) std::rethrow_exception(first_error);
  return result;
}

}  // namespace dpb
