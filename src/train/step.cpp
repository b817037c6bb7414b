// step.cpp: one training step and its surroundings, for every caller (see step.h).
#include "src/train/step.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <type_traits>

#include "collectives/mpi/mpi_transport.h"
#include "collectives/shard.h"
#include "src/core/check.h"
#include "src/core/nvtx.h"

namespace dpb {

RankSet::RankSet(std::vector<std::unique_ptr<Device>> devices, const std::string& algorithm,
                 const AllReduceOptions& opts, const LinkSpec& link)
    : devs(std::move(devices)), algorithm_(algorithm), opts_(opts) {
  std::vector<Device*> ptrs;
  for (auto& d : devs) ptrs.push_back(d.get());
  group = std::make_unique<CommGroup>(int(ptrs.size()), ptrs, link);
  allreduce = make_allreduce(algorithm, *group, opts);
}

RankSet::RankSet(std::unique_ptr<Device> dev, int processes, const std::string& algorithm,
                 const AllReduceOptions& opts, const LinkSpec& link)
    : algorithm_(algorithm), opts_(opts) {
  const int rank = dev->rank();
  devs.push_back(std::move(dev));
  group = std::make_unique<CommGroup>(make_mpi_transport(*devs[0], rank, processes, link));
  allreduce = make_allreduce(algorithm, *group, opts);
}

void RankSet::add_shard_collectives() {
  if (!reducescatter) reducescatter = make_collective(Collective::ReduceScatter, algorithm_, *group, opts_);
  if (!allgather) allgather = make_collective(Collective::AllGather, algorithm_, *group, opts_);
}

void RankSet::abort(int rank, const std::string& why) {
  allreduce->abort(rank, why);
  if (reducescatter) reducescatter->abort(rank, why);
  if (allgather) allgather->abort(rank, why);
  group->abort(rank, why);
}

Replica make_replica(Device& dev, CommGroup& group, const std::string& model,
                     const ModelOptions& opts, int max_batch, const GradSyncConfig& sync,
                     AllReduce& ar, const std::string& optimizer, const std::string& loss,
                     ShardMode shard, AllReduce* rs, AllReduce* ag) {
  Replica rep;
  rep.dev = &dev;
  rep.group = &group;
  rep.model = make_model(model, dev, max_batch, opts);
  const size_t P = rep.model->num_floats(), mb = size_t(max_batch);
  const size_t in = size_t(rep.model->input_size());
  ShardLayout layout;
  if (shard != ShardMode::None) {
    DPB_CHECK(rs && ag, "--shard " << to_string(shard) << ": no reduce-scatter / all-gather given");
    layout = make_shard_layout(rep.model->params(), sync, group.size(), dev.rank());
  }
  const size_t wn = shard == ShardMode::Parameters ? layout.shard_floats : P;
  const size_t gn = shards_gradients(shard) ? layout.shard_floats : P;
  // Collectives run on these two (broadcast, gradient sync, gathers): the group places them.
  rep.w = group.alloc(dev.rank(), wn, MemCategory::Parameters,
                      wn < P ? "parameters (this rank's shard)" : "parameters");
  rep.g = group.alloc(dev.rank(), gn, MemCategory::Gradients,
                      gn < P ? "gradients (this rank's shard)" : "gradients");
  rep.x = Buffer(dev, mb * in, MemCategory::Data, "input images");
  rep.y = Buffer(dev, mb, MemCategory::Data, "input labels");
  rep.dlogits = Buffer(dev, mb * kClasses, MemCategory::Temporaries, "logits gradient");
  rep.stats = Buffer(dev, 2, MemCategory::Temporaries, "loss/accuracy accumulators");
  rep.opt = find_optimizer(optimizer).make(dev, shard == ShardMode::None ? P : layout.shard_floats);
  rep.loss = &find_loss(loss);
  rep.host_x.resize(mb * in);
  rep.host_y.resize(mb);
  rep.flat = std::make_unique<FlatParams>(rep.model->params(), rep.w.get(), rep.g.get());
  if (!shards_gradients(shard))
    rep.sync = std::make_unique<GradSync>(sync, rep.model->param_sizes(), ar, dev, dev.rank(),
                                          rep.g.get());
  if (shard != ShardMode::None)
    rep.shard = std::make_unique<ShardedStep>(shard, std::move(layout), group, *rs, *ag, dev,
                                              rep.w.get(), rep.g.get(), *rep.opt, sync.overlap);
  rep.data_timer = dev.make_timer(StreamKind::Compute);  // CUDA: events, not host time
  return rep;
}

void attach_timeline(Replica& rep, bool host_spans) {
  rep.timeline = std::make_unique<RankTimeline>(*rep.dev, rep.dev->rank(), host_spans);
  if (rep.sync) rep.sync->set_timeline(rep.timeline.get());
  if (rep.shard) rep.shard->set_timeline(rep.timeline.get());
}

std::vector<Span> take_timeline(Replica& rep) {
  if (!rep.timeline) return {};
  if (rep.sync) rep.sync->wait_idle();
  if (rep.shard) rep.shard->wait_idle();
  return rep.timeline->take();
}

void load_params(Replica& rep, const std::vector<float>& host_full) {
  DPB_CHECK(host_full.size() == rep.num_params(),
            "load_params: " << host_full.size() << " floats for a model of " << rep.num_params());
  if (rep.shard && rep.shard->mode() == ShardMode::Parameters)
    rep.shard->load_shard(host_full.data());
  else if (rep.dev->rank() == 0)
    rep.dev->upload(rep.w.get(), host_full.data(), host_full.size());
}

void broadcast_params(Replica& rep, CommGroup& group) {
  if (rep.shard && rep.shard->mode() == ShardMode::Parameters) return;  // each loaded its shard
  NvtxRange nv("broadcast parameters");
  const int r = rep.dev->rank(), k = group.size();
  const size_t P = rep.num_params();
  group.begin(r, rep.w.get());
  std::vector<SendOp> sends;
  std::vector<RecvOp> recvs;
  if (r == 0)
    for (int p = 1; p < k; ++p) sends.push_back({p, 0, P});
  else
    recvs.push_back({0, 0, rep.w.get(), P, RecvOp::Copy});
  group.step(r, sends, recvs);
  rep.dev->comm_synchronize();
}

void load_batch(Replica& rep, const uint8_t* images, const uint8_t* labels, int n) {
  rep.dev->load_images(rep.x.get(), images, size_t(n) * size_t(rep.model->input_size()));
  rep.dev->load_labels(rep.y.get(), labels, size_t(n));
}

namespace {
void gather(Replica& rep, const Split& split, const int* idx, int n) {
  const int F = split.features();
  DPB_CHECK(F == rep.model->input_size(), "data: " << F << " features per example, but "
                                              << rep.model->name() << " takes "
                                              << rep.model->input_size());
  for (int i = 0; i < n; ++i) {
    std::copy_n(split.example(idx[i]), F, rep.host_x.data() + size_t(i) * F);
    rep.host_y[i] = split.labels[idx[i]];
  }
}
}  // namespace

namespace {
// The phase's injected delay (--inject), inside its range: a slow rank as the breakdown sees it.
void delay(const Replica& rep, const char* phase) {
  if (rep.inject && !rep.inject->delays.empty() && rep.step >= 0)
    inject_delay(*rep.inject, rep.dev->rank(), phase, rep.step);
}
}  // namespace

void load_examples(Replica& rep, const Split& split, const int* idx, int n) {
  PhaseRange ph(rep.timeline.get(), "data");
  delay(rep, "data");
  // The host's gather first, untimed: on CUDA a timer begun before it on an idle GPU would count
  // the host's work as the stream's (data_s is the compute stream's loading time; README.md).
  gather(rep, split, idx, n);
  rep.data_timer->begin();
  load_batch(rep, rep.host_x.data(), rep.host_y.data(), n);
  rep.data_timer->end();
}

void step_forward(Replica& rep, int n, float loss_scale, ParamSource* via) {
  if (n == 0) {  // sharded parameters: this rank still takes part in the gathers
    if (rep.shard) rep.shard->skip_forward();
    return;
  }
  PhaseRange ph(rep.timeline.get(), "forward");
  delay(rep, "forward");
  if (rep.shard) rep.shard->begin_forward();
  const float* logits = rep.model->forward(via ? *via : rep.params(), rep.x.get(), n, true);
  rep.loss->apply(*rep.dev, n, kClasses, logits, rep.y.get(), loss_scale, rep.dlogits.get(),
                  rep.stats.get());
}

void step_backward(Replica& rep, int n, bool reduce, const std::function<void(int)>& on_ready,
                   ParamSource* via) {
  PhaseRange ph(rep.timeline.get(), "backward");
  delay(rep, "backward");
  DPB_CHECK(reduce || !rep.shard, "a sharded step always communicates (step_backward reduce)");
  GradSync* sync = reduce ? rep.sync.get() : nullptr;
  ShardedStep* shard = rep.shard.get();
  if (sync) sync->begin_step();
  if (shard) shard->begin_backward();
  auto ready = [sync, shard, &on_ready](int i) {
    if (sync) sync->grad_ready(i);
    if (shard) shard->grad_ready(i);
    if (on_ready) on_ready(i);
  };
  ParamSource& ps = via ? *via : rep.params();
  if (n > 0) {
    rep.model->backward(ps, rep.dlogits.get(), n, ready);
  } else {  // an empty shard (last partial batch smaller than k) contributes zeros
    // In backward's order, asking for each parameter as a backward would (sharded: the gathers).
    const auto& params = rep.model->params();
    for (int i = int(params.size()) - 1; i >= 0; --i) {
      ps.param(i);
      rep.dev->fill(ps.grad(i), 0.0f, params[i].size);
      ready(i);
    }
  }
}

void step_sync_wait(Replica& rep) {
  PhaseRange ph(rep.timeline.get(), "gradient sync wait");
  if (rep.sync) rep.sync->finish();
  if (rep.shard) rep.shard->finish_backward();
}

void step_update(Replica& rep, float lr) {
  PhaseRange ph(rep.timeline.get(), "optimizer step");
  delay(rep, "optimizer");
  if (rep.shard)
    rep.shard->update(lr);
  else
    rep.opt->step(rep.w.get(), rep.g.get(), lr);
}

void train_step(Replica& rep, int n, int global_batch, float lr) {
  step_forward(rep, n, 1.0f / float(global_batch));
  step_backward(rep, n, true);
  step_sync_wait(rep);
  step_update(rep, lr);
}

void begin_epoch(Replica& rep) {
  rep.dev->fill(rep.stats.get(), 0.0f, 2);
  if (rep.sync) rep.sync->reset_times();
  if (rep.shard) rep.shard->reset_times();
  rep.data_timer->reset();
  rep.sent_begin = rep.group->sent_bytes(rep.dev->rank());
  rep.sent_steps = 0;
}

void end_steps(Replica& rep) {
  rep.sent_steps = rep.group->sent_bytes(rep.dev->rank()) - rep.sent_begin;
}

void end_epoch(Replica& rep) {
  rep.host_w.resize(rep.num_params());
  if (rep.shard)  // sharded parameters: every rank gathers them
    rep.shard->download_full(rep.host_w.data());
  else
    rep.dev->download(rep.host_w.data(), rep.w.get(), rep.num_params());
  rep.dev->download(rep.host_stats, rep.stats.get(), 2);
}

EpochStats epoch_stats(const Replica& rep, CommGroup& group, int steps, int examples,
                       double epoch_s) {
  const int r = rep.dev->rank(), k = group.size();
  // Rank 0's parameters to every rank, which compares its own (bitwise) ...
  std::vector<float> w0;
  if (r != 0) w0.resize(rep.host_w.size());
  const float* ref = r == 0 ? rep.host_w.data() : w0.data();
  group.broadcast_host(r, const_cast<float*>(ref), rep.host_w.size() * sizeof(float), 0);
  double maxdiff = 0;
  for (size_t i = 0; i < rep.host_w.size(); ++i)
    maxdiff = std::max(maxdiff, double(std::fabs(rep.host_w[i] - ref[i])));
  // ... then every rank's {loss sum, correct, difference} to every rank.
  const double mine[3] = {rep.host_stats[0], rep.host_stats[1], maxdiff};
  std::vector<double> all(size_t(3) * k);
  group.allgather_host(r, mine, all.data(), sizeof mine);
  // ... and every rank's memory peak (processes: the only way rank 0 sees the others').
  static_assert(std::is_trivially_copyable_v<MemoryUsage>, "sent as bytes");
  const MemoryUsage my_peak = rep.dev->memory().peak();
  std::vector<MemoryUsage> peaks(static_cast<size_t>(k));
  group.allgather_host(r, &my_peak, peaks.data(), sizeof my_peak);
  EpochStats st;
  st.epoch_s = epoch_s;
  st.images_per_s = examples / epoch_s;
  double loss = 0, correct = 0;
  maxdiff = 0;
  for (int p = 0; p < k; ++p) {
    loss += all[3 * p];
    correct += all[3 * p + 1];
    maxdiff = std::max(maxdiff, all[3 * p + 2]);
  }
  st.train_loss = loss / steps;
  st.train_acc = correct / examples;
  st.max_replica_diff = maxdiff;
  st.rank_peaks = std::move(peaks);
  st.replicas_in_sync = maxdiff == 0.0;
  // This rank's (the trainer reports rank 0's): gradient sync and the sharded modes' jobs.
  if (rep.sync) {
    const SyncTimes& t = rep.sync->times();
    st.comm_s += t.comm_s;
    st.exposed_comm_s += t.exposed_s;
    st.comm_calls += t.calls;
  }
  if (rep.shard) {
    st.comm_s += rep.shard->comm_seconds();
    st.exposed_comm_s += rep.shard->exposed_seconds();
    st.comm_calls += rep.shard->calls();
  }
  st.data_s = rep.data_timer->seconds();
  st.compute_s = std::max(0.0, epoch_s - st.data_s - st.exposed_comm_s);
  st.comm_bytes = steps > 0 ? double(rep.sent_steps) / steps : 0.0;
  return st;
}

void evaluate_peer(Replica& rep, const Split& split, int batch) {
  if (!rep.shard || rep.shard->mode() != ShardMode::Parameters) return;  // nothing to take part in
  PhaseRange ph(rep.timeline.get(), "evaluate (gathers)");
  for (int i0 = 0; i0 < split.n; i0 += batch) rep.shard->skip_forward();
  rep.shard->release_gathered();
}

double evaluate(Replica& rep, const Split& split, int batch_limit) {
  PhaseRange ph(rep.timeline.get(), "evaluate");
  Device& dev = *rep.dev;
  const int batch = batch_limit > 0 ? std::min(batch_limit, rep.model->max_batch())
                                    : rep.model->max_batch();
  dev.fill(rep.stats.get(), 0.0f, 2);
  std::vector<int> idx(batch);
  for (int i0 = 0; i0 < split.n; i0 += batch) {
    const int n = std::min(batch, split.n - i0);
    for (int i = 0; i < n; ++i) idx[i] = i0 + i;
    gather(rep, split, idx.data(), n);  // untimed: not training's data time
    load_batch(rep, rep.host_x.data(), rep.host_y.data(), n);
    if (rep.shard) rep.shard->begin_forward();
    const float* logits = rep.model->forward(rep.params(), rep.x.get(), n, false);
    rep.loss->apply(dev, n, kClasses, logits, rep.y.get(), 1.0f, nullptr, rep.stats.get());
  }
  if (rep.shard) rep.shard->release_gathered();  // the next step gathers as every step does
  float ev[2];
  dev.download(ev, rep.stats.get(), 2);
  return ev[1] / split.n;
}

}  // namespace dpb
