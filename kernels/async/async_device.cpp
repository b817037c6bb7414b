// async_device.cpp: AsyncDevice (see async_device.h): host calls with the CUDA backend's blocking
// behaviour, ops queued on the compute / comm stream workers, events as stream positions, and
// the make_async_device factory.
#include "kernels/async/async_device.h"

#include <chrono>
#include <cstring>
#include <mutex>
#include <sstream>
#include <utility>

#include "src/core/check.h"
#include "kernels/cpu/cpu_device.h"

namespace dpb {

using async::Span;

namespace {

uint64_t mix(uint64_t x) {  // splitmix64: independent streams from one seed
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Stamps taken by a stream's worker when it reaches begin() / end(), as CUDA events would be.
class AsyncTimer final : public StreamTimer {
 public:
  explicit AsyncTimer(std::shared_ptr<async::Stream> s) : s_(std::move(s)) {}
  void begin() override {
    s_->enqueue_stamp([st = st_] { st->t0 = Clock::now(); });
  }
  void end() override {
    s_->enqueue_stamp([st = st_] {
      st->total_ns.fetch_add((Clock::now() - st->t0).count(), std::memory_order_relaxed);
    });
    last_ = s_->issued();
  }
  double seconds() override {
    s_->wait_done(last_);
    return double(st_->total_ns.load()) * 1e-9;
  }
  void reset() override {
    s_->wait_done(last_);
    st_->total_ns.store(0);
  }

 private:
  using Clock = std::chrono::steady_clock;
  struct State {
    Clock::time_point t0;  // worker only
    std::atomic<int64_t> total_ns{0};
  };
  std::shared_ptr<async::Stream> s_;
  std::shared_ptr<State> st_ = std::make_shared<State>();
  uint64_t last_ = 0;
};

// Stamps taken by a stream's worker when it reaches them, as CUDA events would be.
class AsyncStamps final : public StreamStamps {
 public:
  explicit AsyncStamps(std::shared_ptr<async::Stream> s) : s_(std::move(s)) {}
  size_t stamp() override {
    size_t i;
    {
      std::lock_guard<std::mutex> lk(st_->mu);
      i = st_->t.size();
      st_->t.push_back(0.0);
    }
    s_->enqueue_stamp([st = st_, i] {
      const double now = steady_seconds();
      std::lock_guard<std::mutex> lk(st->mu);
      st->t[i] = now;
    });
    last_ = s_->issued();
    return i;
  }
  std::vector<double> take() override {
    s_->wait_done(last_);
    std::lock_guard<std::mutex> lk(st_->mu);
    return std::exchange(st_->t, {});
  }

 private:
  struct State {
    std::mutex mu;
    std::vector<double> t;
  };
  std::shared_ptr<async::Stream> s_;
  std::shared_ptr<State> st_ = std::make_shared<State>();
  uint64_t last_ = 0;
};

}  // namespace

AsyncDevice::AsyncDevice(int rank, const AsyncOptions& opt)
    : rank_(rank), opt_(opt), cpu_(make_cpu_device(rank, opt.threads)) {
  std::ostringstream os;
  os << "async:" << rank << " (cpu math, DPB_ASYNC_SEED=" << opt.seed << ", delays <= "
     << opt.max_delay_us << " us p=" << opt.delay_prob << (opt.poison ? ", NaN poison" : "") << ")";
  name_ = os.str();
  cpu_->memory().set_device("async:" + std::to_string(rank));
  const uint64_t base = mix(opt.seed ^ mix(uint64_t(rank)));
  compute_ = std::make_shared<async::Stream>("async:" + std::to_string(rank) + " compute",
                                             mix(base), opt, error_, error_mu_);
  comm_ = std::make_shared<async::Stream>("async:" + std::to_string(rank) + " comm",
                                          mix(base + 1), opt, error_, error_mu_);
}

AsyncDevice::~AsyncDevice() {
  compute_->drain();
  comm_->drain();
}

void AsyncDevice::check_error() {
  std::lock_guard<std::mutex> lk(*error_mu_);
  if (*error_) std::rethrow_exception(*error_);
}

void AsyncDevice::compute(std::function<void(Device&)> op, std::vector<Span> outs,
                          std::vector<Span> ins) {
  check_error();
  compute_->enqueue([cpu = cpu_.get(), op = std::move(op)] { op(*cpu); }, std::move(outs),
                    std::move(ins));
}

// ---- memory: blocking where CudaDevice blocks ----

float* AsyncDevice::alloc(size_t n, MemCategory cat, const char* what) {
  check_error();
  compute_->drain();  // CUDA: zeroed on the compute stream, then synchronized
  return cpu_->alloc(n, cat, what);
}

void AsyncDevice::release(float* p) {
  if (!p) return;
  compute_->drain();  // CUDA: both own streams are synchronized before cudaFree
  comm_->drain();
  cpu_->release(p);
}

void AsyncDevice::upload(float* dst, const float* host, size_t n) {
  if (n == 0) return;
  compute([=](Device& d) { d.upload(dst, host, n); }, {{dst, n}}, {});
  compute_->drain();
  check_error();
}

void AsyncDevice::download(float* host, const float* src, size_t n) {
  if (n == 0) return;
  compute([=](Device& d) { d.download(host, src, n); }, {}, {});
  compute_->drain();
  check_error();
}

void AsyncDevice::fill(float* dst, float value, size_t n) {
  compute([=](Device& d) { d.fill(dst, value, n); }, {}, {});
}

void AsyncDevice::copy(float* dst, const float* src, size_t n) {
  if (n == 0 || dst == src) return;
  compute([=](Device& d) { d.copy(dst, src, n); }, {{dst, n}}, {{src, n}});
}

// As CudaDevice::stage_bytes: the host bytes are copied into the next slot of a ring before the
// call returns (so the caller may reuse its buffer at once); a slot is reused only after the op
// that read it, kStages loads ago, has run.
const uint8_t* AsyncDevice::stage(const uint8_t* host, size_t n) {
  Stage& st = stages_[next_stage_];
  next_stage_ = (next_stage_ + 1) % kStages;
  compute_->wait_done(st.reader_done);
  st.bytes.assign(host, host + n);
  return st.bytes.data();
}

void AsyncDevice::load_images(float* dst, const uint8_t* host, size_t n) {
  if (n == 0) return;
  const uint8_t* bytes = stage(host, n);
  compute([=](Device& d) { d.load_images(dst, bytes, n); }, {{dst, n}}, {});
  stages_[(next_stage_ + kStages - 1) % kStages].reader_done = compute_->issued();
}

void AsyncDevice::load_labels(float* dst, const uint8_t* host, size_t n) {
  if (n == 0) return;
  const uint8_t* bytes = stage(host, n);
  compute([=](Device& d) { d.load_labels(dst, bytes, n); }, {{dst, n}}, {});
  stages_[(next_stage_ + kStages - 1) % kStages].reader_done = compute_->issued();
}

void AsyncDevice::synchronize() {
  check_error();
  compute_->drain();
  comm_->drain();
  check_error();
}

// ---- compute ops: outputs listed for poisoning, inputs so that aliased outputs are spared ----

void AsyncDevice::conv2d_forward(const ConvShape& s, const float* x, const float* w,
                                 const float* b, float* y) {
  compute([=](Device& d) { d.conv2d_forward(s, x, w, b, y); }, {{y, s.y_size()}},
          {{x, s.x_size()}, {w, s.w_size()}, {b, size_t(b ? s.k : 0)}});
}

void AsyncDevice::conv2d_backward(const ConvShape& s, const float* x, const float* w,
                                  const float* dy, float* dx, float* dw, float* db) {
  compute([=](Device& d) { d.conv2d_backward(s, x, w, dy, dx, dw, db); },
          {{dx, dx ? s.x_size() : 0}, {dw, s.w_size()}, {db, db ? size_t(s.k) : 0}},
          {{x, s.x_size()}, {w, s.w_size()}, {dy, s.y_size()}});
}

void AsyncDevice::avgpool_forward(const PoolShape& s, const float* x, float* y) {
  compute([=](Device& d) { d.avgpool_forward(s, x, y); }, {{y, s.y_size()}}, {{x, s.x_size()}});
}

void AsyncDevice::avgpool_backward(const PoolShape& s, const float* dy, float* dx) {
  compute([=](Device& d) { d.avgpool_backward(s, dy, dx); }, {{dx, s.x_size()}},
          {{dy, s.y_size()}});
}

void AsyncDevice::gap_forward(int n, int c, int hw, const float* x, float* y) {
  compute([=](Device& d) { d.gap_forward(n, c, hw, x, y); }, {{y, size_t(n) * c}},
          {{x, size_t(n) * c * hw}});
}

void AsyncDevice::gap_backward(int n, int c, int hw, const float* dy, float* dx) {
  compute([=](Device& d) { d.gap_backward(n, c, hw, dy, dx); }, {{dx, size_t(n) * c * hw}},
          {{dy, size_t(n) * c}});
}

void AsyncDevice::relu_forward(const float* x, float* y, size_t n) {
  compute([=](Device& d) { d.relu_forward(x, y, n); }, {{y, n}}, {{x, n}});
}

void AsyncDevice::relu_backward(const float* y, const float* dy, float* dx, size_t n) {
  compute([=](Device& d) { d.relu_backward(y, dy, dx, n); }, {{dx, n}}, {{y, n}, {dy, n}});
}

void AsyncDevice::dense_forward(int n, int in, int out, const float* x, const float* w,
                                const float* b, float* y) {
  compute([=](Device& d) { d.dense_forward(n, in, out, x, w, b, y); }, {{y, size_t(n) * out}},
          {{x, size_t(n) * in}, {w, size_t(in) * out}, {b, size_t(out)}});
}

void AsyncDevice::dense_backward(int n, int in, int out, const float* x, const float* w,
                                 const float* dy, float* dx, float* dw, float* db) {
  compute([=](Device& d) { d.dense_backward(n, in, out, x, w, dy, dx, dw, db); },
          {{dx, dx ? size_t(n) * in : 0}, {dw, size_t(in) * out}, {db, size_t(out)}},
          {{x, size_t(n) * in}, {w, size_t(in) * out}, {dy, size_t(n) * out}});
}

void AsyncDevice::softmax_xent(int n, int classes, const float* logits, const float* labels,
                               float scale, float* dlogits, float* stats) {
  const size_t nc = size_t(n) * classes;
  compute([=](Device& d) { d.softmax_xent(n, classes, logits, labels, scale, dlogits, stats); },
          {{dlogits, dlogits ? nc : 0}}, {{logits, nc}, {labels, size_t(n)}, {stats, 2}});
}

void AsyncDevice::mse_loss(int n, int classes, const float* pred, const float* labels,
                           float scale, float* dpred, float* stats) {
  const size_t nc = size_t(n) * classes;
  compute([=](Device& d) { d.mse_loss(n, classes, pred, labels, scale, dpred, stats); },
          {{dpred, dpred ? nc : 0}}, {{pred, nc}, {labels, size_t(n)}, {stats, 2}});
}

void AsyncDevice::batchnorm_forward_train(const BnShape& s, const float* x, const float* gamma,
                                          const float* beta, float* y, float* running_mean,
                                          float* running_var, float* save_mean,
                                          float* save_invstd) {
  const size_t c = size_t(s.c);
  compute([=](Device& d) {
    d.batchnorm_forward_train(s, x, gamma, beta, y, running_mean, running_var, save_mean,
                              save_invstd);
  }, {{y, s.size()}, {save_mean, c}, {save_invstd, c}},
          {{x, s.size()}, {gamma, c}, {beta, c}, {running_mean, c}, {running_var, c}});
}

void AsyncDevice::batchnorm_forward_infer(const BnShape& s, const float* x, const float* gamma,
                                          const float* beta, const float* running_mean,
                                          const float* running_var, float* y) {
  const size_t c = size_t(s.c);
  compute([=](Device& d) {
    d.batchnorm_forward_infer(s, x, gamma, beta, running_mean, running_var, y);
  }, {{y, s.size()}}, {{x, s.size()}, {gamma, c}, {beta, c}, {running_mean, c}, {running_var, c}});
}

void AsyncDevice::batchnorm_backward(const BnShape& s, const float* x, const float* dy,
                                     const float* gamma, const float* save_mean,
                                     const float* save_invstd, float* dx, float* dgamma,
                                     float* dbeta) {
  const size_t c = size_t(s.c);
  compute([=](Device& d) {
    d.batchnorm_backward(s, x, dy, gamma, save_mean, save_invstd, dx, dgamma, dbeta);
  }, {{dx, s.size()}, {dgamma, c}, {dbeta, c}},
          {{x, s.size()}, {dy, s.size()}, {gamma, c}, {save_mean, c}, {save_invstd, c}});
}

void AsyncDevice::axpy(float a, const float* x, float* y, size_t n) {
  compute([=](Device& d) { d.axpy(a, x, y, n); }, {}, {});  // y is read too: no poison
}

void AsyncDevice::sgd_step(float* w, const float* g, float lr, size_t n) {
  compute([=](Device& d) { d.sgd_step(w, g, lr, n); }, {}, {});
}

void AsyncDevice::adam_step(float* w, const float* g, float* m, float* v, size_t n,
                            const AdamStep& s) {
  // w, m and v are read and written: nothing to poison.
  compute([=](Device& d) { d.adam_step(w, g, m, v, n, s); }, {}, {});
}

// ---- communication: CPU comm ops are stateless, so they run on the comm worker ----

void AsyncDevice::comm_copy(float* dst, const float* src, size_t n) {
  if (n == 0 || dst == src) return;
  check_error();
  comm_->enqueue([cpu = cpu_.get(), dst, src, n] { cpu->comm_copy(dst, src, n); }, {{dst, n}},
                 {{src, n}});
}

void AsyncDevice::comm_reduce(float* dst, const float* src, size_t n) {
  if (n == 0) return;
  check_error();
  comm_->enqueue([cpu = cpu_.get(), dst, src, n] { cpu->comm_reduce(dst, src, n); });
}

void AsyncDevice::comm_wait_compute() { comm_->enqueue_wait(compute_, compute_->issued()); }

void AsyncDevice::compute_wait_comm() { compute_->enqueue_wait(comm_, comm_->issued()); }

void AsyncDevice::comm_record() { peer_pos_.store(comm_->issued()); }

void AsyncDevice::comm_wait_peer(Device& peer) {
  auto* p = dynamic_cast<AsyncDevice*>(&peer);
  DPB_CHECK(p, "comm_wait_peer on " << name_ << ": peer rank " << peer.rank()
                                    << " is not an async device");
  if (p == this) return;
  comm_->enqueue_wait(p->comm_, p->peer_pos_.load());
}

void AsyncDevice::comm_synchronize() {
  check_error();
  comm_->drain();
  check_error();
}

int AsyncDevice::compute_mark() {
  const int token = int(next_mark_.fetch_add(1) % unsigned(kMarks));
  marks_[token].store(compute_->issued());
  return token;
}

void AsyncDevice::comm_wait_mark(int token) {
  if (token < 0 || token >= kMarks) return comm_wait_compute();
  comm_->enqueue_wait(compute_, marks_[token].load());
}

std::unique_ptr<StreamTimer> AsyncDevice::make_timer(StreamKind s) {
  return std::make_unique<AsyncTimer>(s == StreamKind::Comm ? comm_ : compute_);
}

std::unique_ptr<StreamStamps> AsyncDevice::make_stamps(StreamKind s) {
  return std::make_unique<AsyncStamps>(s == StreamKind::Comm ? comm_ : compute_);
}

std::unique_ptr<Device> make_async_device(int rank, const AsyncOptions& opt) {
  return std::make_unique<AsyncDevice>(rank, opt);
}

std::unique_ptr<Device> make_async_device(int rank, int threads) {
  AsyncOptions opt = async_options_from_env();
  opt.threads = threads;
  return make_async_device(rank, opt);
}

}  // namespace dpb
