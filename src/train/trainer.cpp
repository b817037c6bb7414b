// trainer.cpp: the data-parallel training loop (see trainer.h). One host thread per rank
// (RankThreads); the step itself and the epoch statistics are in step.h, shared with the
// overlap benchmark.
#include "src/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>

#include "collectives/allreduce.h"
#include "collectives/registry.h"
#include "collectives/tuning.h"
#include "kernels/backends.h"
#include "src/core/check.h"
#include "src/core/nvtx.h"
#include "src/core/registry.h"
#include "src/core/rank_threads.h"
#include "src/model/model.h"
#include "src/train/divergence.h"
#include "src/train/agree.h"
#include "src/train/loss.h"
#include "src/train/optimizer.h"
#include "src/train/run_options.h"
#include "src/train/step.h"

namespace dpb {
namespace {

using Clock = std::chrono::steady_clock;
// Rank 0 evaluates the test set in batches of its shard, but of at least this many examples
// (fewer forward calls when the shard is small); its replica is sized for that.
constexpr int kMinEvalBatch = 64;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double lr_at(const TrainConfig& cfg, double epoch_progress) {
  if (cfg.warmup_epochs <= 0 || epoch_progress >= cfg.warmup_epochs) return cfg.lr;
  double start = cfg.lr / cfg.devices;
  return start + (cfg.lr - start) * (epoch_progress / cfg.warmup_epochs);
}

// One call of train(). Members are destroyed in reverse order of declaration: the rank threads
// first, then the replicas (each GradSync joins its communication thread, which may still be
// inside the all-reduce after a failure), then the all-reduce, group and devices they use.
class Run {
 public:
  Run(const TrainConfig& cfg, const Dataset& data, const DeviceFactory& make_dev,
      const EpochCallback& on_epoch);
  TrainResult go();

 private:
  static RankSet make_ranks(const TrainConfig& cfg, const DeviceFactory& make_dev);
  void rank_main(int i);                         // i: local rank (index into reps_)
  // Returns the epoch's time; spans: the rank's timeline of it.
  // longest: the rank's longest wait for peers in it, seconds (src/core/watchdog.h).
  double train_epoch(int i, int e, double& lr, std::vector<Span>& spans, double& longest);
  void report_epoch(EpochStats st, int e, double lr);  // rank 0

  const TrainConfig& cfg_;
  const Dataset& data_;
  const EpochCallback& on_epoch_;
  const int k_, steps_;
  const bool runs_math_;  // false: the meta backend (memory only, kernels/backends.h)
  RankSet ranks_;
  std::vector<Replica> reps_;
  std::vector<DivergenceWatch> watch_;  // per local rank: its loss per step (divergence.h)
  std::string diverged_;                // the message of the epoch that diverged ("": none)
  RankThreads pool_;
  int eval_batch_ = 0;     // rank 0's evaluation batch (sharded parameters: every rank's gathers)
  std::vector<int> perm_;  // this epoch's order of the training examples (local rank 0 draws it)
  TrainResult result_;
};

// Threads: k devices in one process; processes: this process's one device (its GPU picked by its
// local rank) in a group over MPI.
RankSet Run::make_ranks(const TrainConfig& cfg, const DeviceFactory& make_dev) {
  const int hw = std::max(1u, std::thread::hardware_concurrency());
  const int local = cfg.procs.active() ? cfg.procs.local_size : cfg.devices;
  const int threads = cfg.threads > 0 ? cfg.threads : std::max(1, hw / std::max(1, local));
  const AllReduceOptions opts{cfg.tune_file};
  if (cfg.procs.active()) {
    const int r = cfg.procs.rank;
    std::unique_ptr<Device> dev =
        make_dev ? make_dev(r, threads)
                 : make_device(cfg.backend, r, DeviceOptions{threads, cfg.tf32, cfg.procs.local_rank});
    return RankSet(std::move(dev), cfg.procs.size, cfg.allreduce, opts,
                   injected_link(cfg.link, cfg.inject));
  }
  std::vector<std::unique_ptr<Device>> devs;
  if (!make_dev) devs = make_devices(cfg.backend, cfg.devices, threads, cfg.tf32);
  else
    for (int r = 0; r < cfg.devices; ++r) devs.push_back(make_dev(r, threads));
  return RankSet(std::move(devs), cfg.allreduce, opts, injected_link(cfg.link, cfg.inject));
}

// Sets up every local rank before any work, so configuration and memory errors surface here.
Run::Run(const TrainConfig& cfg, const Dataset& data, const DeviceFactory& make_dev,
         const EpochCallback& on_epoch)
    : cfg_(cfg), data_(data), on_epoch_(on_epoch), k_(cfg.devices),
      steps_((data.train.n + cfg.batch - 1) / cfg.batch),
      runs_math_(find_backend(cfg.backend).runs_math), ranks_(make_ranks(cfg, make_dev)),
      pool_(ranks_.size(), [this](int i, const std::string& why) {
        ranks_.abort(ranks_[i].rank(), why);
      }) {
  // Processes: every rank's options, environment, data and binary must match (threads share one).
  if (cfg.procs.active())
    check_ranks_agree(*ranks_.group, cfg.procs.rank, train_agree_fields(cfg, data));
  for (int i = 0; i < ranks_.size(); ++i) ranks_[i].memory().set_capacity(cfg.device_mem);
  adapt_barrier_spin(*ranks_.group, cfg.sync);
  result_.allreduce_resolved = ranks_.allreduce->describe();
  if (cfg.shard != ShardMode::None) ranks_.add_shard_collectives();
  const int shard_max = (cfg.batch + k_ - 1) / k_;
  eval_batch_ = std::max(shard_max, kMinEvalBatch);
  for (int i = 0; i < ranks_.size(); ++i) {
    const int r = ranks_[i].rank();
    reps_.push_back(make_replica(ranks_[i], *ranks_.group, cfg.model, cfg.model_opts,
                                 r == 0 ? eval_batch_ : shard_max, cfg.sync, *ranks_.allreduce,
                                 cfg.optimizer, cfg.loss, cfg.shard, ranks_.reducescatter.get(),
                                 ranks_.allgather.get()));
    // Ranks as threads on an emulated link are named with it ("cpu:0 (...) + link 1 Gb/s, 50 us").
    const bool link_named = ranks_.group->paced() && !cfg.procs.active();
    result_.device_names.push_back(ranks_[i].name() +
                                   (link_named ? " + link " + cfg.link.label() : ""));
    if (cfg.breakdown || cfg.trace) attach_timeline(reps_.back(), cfg.trace);
    reps_.back().inject = &cfg.inject;
    watch_.emplace_back(ranks_[i], steps_);
  }
  // Processes on several nodes: their steady clocks differ; read every time on rank 0's.
  if (reps_[0].timeline && cfg.procs.active() && cfg.procs.local_size < cfg.procs.size)
    reps_[0].timeline->set_clock_offset(clock_offset_to_rank0(*ranks_.group, cfg.procs.rank));
  const BackendEntry& backend = find_backend(cfg.backend);
  if (backend.physical_devices) {  // more ranks on this node than devices: they share them
    const int ndev = backend.physical_devices();
    result_.shared_gpu = cfg.procs.active() ? cfg.procs.local_size > ndev : k_ > ndev;
  }
  // Rank 0 initializes (a backend that runs no math has nothing to initialize: a planned model
  // of any size costs no host memory; sharded parameters: every rank its shard, from the same
  // seed) ...
  const bool every_rank = cfg.shard == ShardMode::Parameters;
  if (runs_math_ && (every_rank || ranks_.group->is_local(0))) {
    const std::vector<float> init = init_params(model_param_layout(cfg.model, cfg.model_opts), cfg.seed);
    for (Replica& rep : reps_) load_params(rep, init);
  }
}

TrainResult Run::go() {
  pool_.run([this](int i) { rank_main(i); });
  // Every rank (process) saw the same epoch diverge and stopped after it: each throws alike.
  if (!diverged_.empty() && !cfg_.allow_divergence)
    throw Diverged(diverged_ + "; --allow-divergence records it and ends with exit 0");
  for (int i = 0; i < ranks_.size(); ++i) result_.peak_mem.push_back(ranks_[i].memory().peak());
  return std::move(result_);
}

// Local rank i (global rank reps_[i].dev->rank()).
void Run::rank_main(int i) {
  Replica& rep = reps_[i];
  const int r = rep.dev->rank();
  broadcast_params(rep, *ranks_.group);  // ... and broadcasts to every replica
  for (int e = 0; e < cfg_.epochs; ++e) {
    NvtxRange nv_epoch("epoch " + std::to_string(e + 1));
    double lr = cfg_.lr;
    std::vector<Span> spans;
    double longest = 0;
    const CpuSample load0 = i == 0 ? sample_cpu() : CpuSample{};  // the machine around the epoch
    const double epoch_s = train_epoch(i, e, lr, spans, longest);
    const CpuLoad load = i == 0 ? cpu_load_between(load0, sample_cpu()) : CpuLoad{};
    // ---- end of epoch: replica check, statistics, evaluation (not timed) ----
    if (runs_math_) end_epoch(rep);  // meta: no parameters or sums to copy (nor to compare)
    EpochStats st = epoch_stats(rep, *ranks_.group, steps_, data_.train.n, epoch_s);
    watch_[i].check(rep, *ranks_.group, st);  // the same verdict on every rank
    // A wait past the watchdog's warn threshold on any rank: a stall stretched the epoch.
    std::vector<double> waits(size_t(k_), 0);
    ranks_.group->allgather_host(r, &longest, waits.data(), sizeof longest);
    const double worst = *std::max_element(waits.begin(), waits.end());
    st.stalled_s = worst >= stall_warn_s(cfg_.timeout_s) ? worst : 0;
    if (rep.timeline) {
      bool waits_known = true;
      std::vector<StepRow> rows = gather_steps(
          *ranks_.group, r, rank_steps(spans, r, e + 1, steps_, rep.link_send), &waits_known);
      st.breakdown = summarize_steps(rows);
      std::vector<Span> all_spans;
      if (cfg_.trace) all_spans = gather_spans(*ranks_.group, r, spans);
      if (r == 0) {
        result_.steps.insert(result_.steps.end(), rows.begin(), rows.end());
        result_.waits_known = result_.waits_known && waits_known;
        result_.trace.insert(result_.trace.end(), all_spans.begin(), all_spans.end());
      }
      rep.timeline->set_step(e + 1, -1);  // evaluation's spans: outside the steps
    }
    st.load = load, st.rank_cpus = pool_.cpus();
    if (r == 0)
      report_epoch(st, e, lr);
    else
      evaluate_peer(rep, data_.test, eval_batch_);  // sharded parameters: rank 0's gathers
    pool_.align(i);
    if (st.diverged) {  // its row is written, marked; training NaNs further would measure nothing
      st.epoch = e + 1;
      if (i == 0) diverged_ = divergence_message(st, steps_);
      break;
    }
  }
  if (r == 0) result_.final_params = rep.host_w;
}

double Run::train_epoch(int i, int e, double& lr, std::vector<Span>& spans, double& longest) {
  Replica& rep = reps_[i];
  const int r = rep.dev->rank();
  const int ntrain = data_.train.n;
  if (i == 0) perm_ = epoch_permutation(ntrain, cfg_.seed, e);  // every process draws the same
  begin_epoch(rep);
  pool_.align(i);
  WatchSlot* slot = ranks_.group->watch_slot(r);  // what the watchdog sees of this rank
  {
    WatchLabel where(slot, "the start of epoch " + std::to_string(e + 1) +
                               (e > 0 ? " (after rank 0's evaluation)" : ""));
    ranks_.group->barrier(r);  // processes: start the clock together
  }
  if (slot) slot->take_longest_s();  // the epoch's waits from here
  const auto t0 = Clock::now();
  auto last_report = t0;
  const bool paced = ranks_.group->paced();
  rep.link_send.clear();
  // Its links' busy time (sent and received) after each step: the breakdown's own comm time.
  auto link_busy = [&] {
    return ranks_.group->link_send_seconds(r) + ranks_.group->link_recv_seconds(r);
  };
  if (paced) rep.link_send.push_back(link_busy());
  for (int s = 0; s < steps_; ++s) {
    rep.step = s;
    if (rep.timeline) rep.timeline->set_step(e + 1, s);
    if (slot) slot->set_step(e + 1, s);
    const int gb = std::min(cfg_.batch, ntrain - s * cfg_.batch);
    const int lo = int(chunk_begin(gb, k_, r)), n = int(chunk_size(gb, k_, r));
    lr = lr_at(cfg_, e + double(s) / steps_);
    load_examples(rep, data_.train, perm_.data() + size_t(s) * cfg_.batch + lo, n);
    train_step(rep, n, gb, float(lr));
    watch_[i].after_step(rep, s);
    if (paced) rep.link_send.push_back(link_busy());
    if (r == 0 && cfg_.progress && since(last_report) > 10.0) {
      rep.dev->synchronize();
      last_report = Clock::now();
      std::fprintf(stderr, "  epoch %d: step %d/%d (%.0f%%), %.1f s\n", e + 1, s + 1, steps_,
                   100.0 * (s + 1) / steps_, since(t0));
    }
  }
  rep.dev->synchronize();
  end_steps(rep);
  rep.step = -1;
  if (rep.timeline) rep.timeline->set_step(e + 1, -1);
  spans = take_timeline(rep);
  pool_.align(i);
  {
    WatchLabel where(slot, "the end of epoch " + std::to_string(e + 1));
    ranks_.group->barrier(r);  // the epoch ends when the slowest rank is done
  }
  const double epoch_s = since(t0);
  if (slot) {
    longest = slot->take_longest_s();
    slot->set_step(e + 1, -1);
  }
  return epoch_s;
}

void Run::report_epoch(EpochStats st, int e, double lr) {
  st.epoch = e + 1;
  st.lr_end = lr;
  st.test_acc = evaluate(reps_[0], data_.test, eval_batch_);  // reps_[0] is rank 0 when it is local
  // Every rank's peak: this process's ranks read after evaluation (its batch counts too), the
  // other processes' as epoch_stats gathered them.
  for (int i = 0; i < ranks_.size(); ++i) st.rank_peaks[ranks_[i].rank()] = ranks_[i].memory().peak();
  for (int p = 0; p < int(st.rank_peaks.size()); ++p)
    if (p == 0 || st.rank_peaks[p].total() > st.peak_mem.total())
      st.peak_mem = st.rank_peaks[p], st.peak_mem_rank = p;
  result_.epochs.push_back(st);
  if (on_epoch_) on_epoch_(st, result_);
}

}  // namespace

void validate(const TrainConfig& cfg, const Dataset& data) {
  DPB_CHECK(is_model_name(cfg.model), "--model: unknown model '" << cfg.model << "' (valid: "
                                                                 << entry_names(models()) << ")");
  const BackendEntry& backend = find_backend(cfg.backend);
  const AllReduceEntry& algorithm = find_allreduce(cfg.allreduce);
  DPB_CHECK(cfg.devices >= 1 && cfg.devices <= 64,
            "--devices: must be between 1 and 64, got " << cfg.devices);
  DPB_CHECK(cfg.batch >= cfg.devices, "--batch: the global batch (" << cfg.batch
                                          << ") is smaller than the device count (" << cfg.devices
                                          << "); every device needs at least one example");
  DPB_CHECK(cfg.lr > 0 && std::isfinite(cfg.lr), "--lr: must be a positive number, got " << cfg.lr);
  DPB_CHECK(cfg.epochs >= 1, "--epochs: must be >= 1, got " << cfg.epochs);
  DPB_CHECK(cfg.warmup_epochs >= 0, "--warmup-epochs: must be >= 0, got " << cfg.warmup_epochs);
  DPB_CHECK(cfg.sync.bucket_mb > 0, "--bucket-mb: must be > 0, got " << cfg.sync.bucket_mb);
  validate_link(cfg.link, "--link-gbps", "--link-latency-us");
  // Emulated nodes (issue 26): threads or processes (mpirun -np P: P / N consecutive ranks each).
  if (const int nodes = with_env_nodes(cfg.link).nodes; nodes > 1)
    DPB_CHECK(cfg.devices % nodes == 0,
              "--nodes (DPB_NODES) " << nodes << ": emulated nodes split the ranks into nodes of "
                                     "equal size (a divisor of the " << cfg.devices
                                     << (cfg.procs.active() ? " processes" : " ranks of --devices")
                                     << ")");
  validate_injections(cfg.inject, cfg.devices);
  const LinkSpec link = injected_link(cfg.link, cfg.inject);  // what the transport is paced by
  DPB_CHECK(cfg.inject.links.empty() || backend.emulated_link,
            "--inject link: a slow link is emulated; it needs --backend " << emulated_link_backends());
  DPB_CHECK(!link.enabled() || backend.emulated_link,
            "--link-gbps/--link-latency-us: the emulated link needs --backend "
                << emulated_link_backends() << " (GPU transfers use the real interconnect)");
  DPB_CHECK(cfg.threads >= 0, "--threads: must be >= 0, got " << cfg.threads);
  check_thread_budget(cfg.procs.active() ? 1 : cfg.devices, cfg.threads);  // this process's ranks
  DPB_CHECK(backend.runs_math || !cfg.procs.active(),
            "--backend " << cfg.backend << ": plans its ranks as threads of one process; run it "
                         << "without mpirun/srun (--devices " << cfg.procs.size << " plans "
                         << cfg.procs.size << " ranks)");
  find_optimizer(cfg.optimizer);  // throws "--optimizer: unknown optimizer ..."
  if (cfg.shard != ShardMode::None) {  // its collectives are --allreduce's in their tables
    for (Collective c : {Collective::ReduceScatter, Collective::AllGather}) {
      const AllReduceEntry* e = &shard_collective(cfg.shard, c, cfg.allreduce);
      const std::string no = allreduce_refusal(*e, cfg.devices, backend.kind, cfg.launcher(),
                                               cfg.procs.active() ? cfg.procs.local_size : 0);
      DPB_CHECK(no.empty(), "--shard " << to_string(cfg.shard) << ": " << no);
    }
  }
  find_loss(cfg.loss);
  if (cfg.procs.active()) {
    DPB_CHECK(cfg.devices == cfg.procs.size,
              "--devices " << cfg.devices << ": this run has " << cfg.procs.size
                           << " processes (one rank each); omit --devices or give " << cfg.procs.size);
    // The help's first word names the library call (mpi: "MPI_Allreduce in place ...").
    DPB_CHECK(!link.enabled() || algorithm.link_paced,
              "--link-gbps/--link-latency-us: --allreduce "
                  << cfg.allreduce << " (" << algorithm.help.substr(0, algorithm.help.find(' '))
                  << ") is not paced by the emulated link; use "
                  << link_paced_algorithms(backend.kind, cfg.launcher()) << ", or omit the link");
  }
  // Processes: NCCL's GPU sharing is judged per node (8 processes on two 4-GPU nodes share none).
  const std::string why = allreduce_refusal(algorithm, cfg.devices, backend.kind, cfg.launcher(),
                                            cfg.procs.active() ? cfg.procs.local_size : 0);
  DPB_CHECK(why.empty(), why);
  if (!cfg.tune_file.empty()) load_tune_file(cfg.tune_file);  // throws naming what is wrong
  DPB_CHECK(data.train.n >= cfg.devices, "training set: " << data.train.n
                                             << " examples is fewer than the device count "
                                             << cfg.devices);
  DPB_CHECK(data.test.n >= 1, "test set is empty");
  // The model's input against the data's features (the MLP takes --mlp-input; the image models
  // 28x28 pixels); load_run_data (run_data.h) sizes synthetic data to the model.
  const int in = model_input_size(cfg.model, cfg.model_opts);
  for (const Split* s : {&data.train, &data.test})
    DPB_CHECK(s->features() == in, "--model " << cfg.model << " takes " << in
                                              << " features per example, but the data (" << data.dir
                                              << ") has " << s->rows << "x" << s->cols << " = "
                                              << s->features());
  const std::string unavailable = backend.unavailable();
  DPB_CHECK(unavailable.empty(), "--backend " << cfg.backend << ": " << unavailable);
}

TrainResult train(const TrainConfig& cfg, const Dataset& data,
                  const EpochCallback& on_epoch,
                  const DeviceFactory& make_dev) {
  validate(cfg, data);
  try {
    return Run(cfg, data, make_dev, on_epoch).go();
  } catch (const OutOfMemory& e) {  // the one message names the batch that did not fit
    const int k = cfg.devices, per = (cfg.batch + k - 1) / k;
    // Rank 0's replica also evaluates, in batches of at least kMinEvalBatch: its buffers are
    // sized for that when the shard is smaller, which the message says.
    const std::string eval =
        per < kMinEvalBatch ? "; rank 0's buffers are sized for its evaluation batch, " +
                                  std::to_string(kMinEvalBatch)
                            : "";
    throw OutOfMemory(std::string(e.what()) + "; batch per device " + std::to_string(per) +
                          " (global batch " + std::to_string(cfg.batch) + " on " +
                          std::to_string(k) + " device" + (k == 1 ? "" : "s") + ")" + eval,
                      e.bytes(), e.capacity());
  }
}

}  // namespace dpb
