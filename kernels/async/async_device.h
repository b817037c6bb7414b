// async_device.h: the asynchronous test device: a Device that behaves like a GPU's streams while
// the CPU backend does the math. Every op issued on the compute or the comm stream is queued and
// run later by that stream's worker thread (one per stream per device), in an order that honours
// only what device.h promises: stream order, comm_wait_compute, compute_wait_comm, compute_mark /
// comm_wait_mark, comm_record / comm_wait_peer, synchronize, comm_synchronize, and the blocking
// host calls (alloc, release, upload, download, load staging) exactly as the CUDA backend makes
// them (kernels/cuda/cuda_device.cu). So a missing ordering call, which the synchronous CPU
// backend can never expose, gives wrong results (or NaN) here.
//
// To make such a bug show up with high probability rather than by luck:
//   - each op sleeps a random 0..max_delay_us first with probability delay_prob (seeded, so a
//     failing interleaving can be replayed: DPB_ASYNC_SEED=<seed>; the seed is in name());
//   - an op fills its pure outputs with NaN before that sleep (poison), so a reader that is not
//     ordered after the writer sees NaN instead of the value it happened to expect.
// Errors inside an op are sticky, as on CUDA: the next host call on the device throws them.
// Environment: DPB_ASYNC_SEED (default: random per process), DPB_ASYNC_DELAY_US (default 2000),
// DPB_ASYNC_DELAY_PROB (default 0.25), DPB_ASYNC_POISON (default 1).
// Made by make_async_device(); `--backend async` reaches it; tested by tests/test_async*.cpp.
#pragma once
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "src/core/device.h"

namespace dpb {

struct AsyncOptions {
  uint64_t seed = 0;         // base seed; each device and stream derives its own
  int max_delay_us = 2000;   // random sleep before an op: uniform in [0, max_delay_us] ...
  double delay_prob = 0.25;  // ... taken with this probability
  bool poison = true;        // NaN-fill pure outputs before the sleep
  int threads = 1;           // CPU math threads of the compute worker
};

// The options from the environment (see the header comment); the seed is chosen once per process.
AsyncOptions async_options_from_env();
std::unique_ptr<Device> make_async_device(int rank, const AsyncOptions& opt);
// The options from the environment with `threads` math threads (what --backend async makes).
std::unique_ptr<Device> make_async_device(int rank, int threads);

namespace async {

// A float range an op reads or writes (for poisoning only outputs that no input aliases).
struct Span {
  const float* p = nullptr;
  size_t n = 0;
};

// One in-order queue and its worker thread. Positions count ops: the work issued so far is
// [0, issued), the work finished is [0, done). Waiters on another stream hold a shared_ptr, so a
// stream outlives a device destroyed before its peers.
class Stream {
 public:
  Stream(std::string name, uint64_t seed, const AsyncOptions& opt,
         std::shared_ptr<std::exception_ptr> error, std::shared_ptr<std::mutex> error_mu);
  ~Stream();  // runs what is queued, then joins the worker
  // Queues fn; outs are NaN-filled first (when poisoning) unless they overlap ins.
  void enqueue(std::function<void()> fn, std::vector<Span> outs = {}, std::vector<Span> ins = {});
  // Queues fn with no delay before it (timing stamps, like an event on a GPU stream).
  void enqueue_stamp(std::function<void()> fn);
  // Queues a wait: later ops of this stream run after `other` has finished position `pos`.
  void enqueue_wait(std::shared_ptr<Stream> other, uint64_t pos);
  uint64_t issued();  // the position after the last op queued so far
  void wait_done(uint64_t pos);  // host blocks until position pos is finished
  void drain() { wait_done(issued()); }
  const std::string& name() const { return name_; }

 private:
  struct Op {
    std::function<void()> fn;         // work, or empty for a wait
    std::shared_ptr<Stream> wait_on;  // wait: stream and position
    uint64_t wait_pos = 0;
    std::vector<Span> poison;         // NaN-filled before the delay
    bool delay = true;
  };
  void push(Op op);
  void loop();
  void delay();

  std::string name_;
  AsyncOptions opt_;
  std::mt19937_64 rng_;  // worker thread only
  std::shared_ptr<std::exception_ptr> error_;  // the device's sticky error
  std::shared_ptr<std::mutex> error_mu_;
  std::mutex mu_;
  std::condition_variable cv_;  // work queued, an op finished, or stop
  std::deque<Op> q_;
  uint64_t issued_ = 0, done_ = 0;
  bool stop_ = false;
  std::thread worker_;  // last: started once everything above exists
};

}  // namespace async

class AsyncDevice final : public Device {
 public:
  AsyncDevice(int rank, const AsyncOptions& opt);
  ~AsyncDevice() override;
  AsyncDevice(const AsyncDevice&) = delete;
  AsyncDevice& operator=(const AsyncDevice&) = delete;

  BackendKind kind() const override { return BackendKind::Async; }
  int rank() const override { return rank_; }
  std::string name() const override { return name_; }

  float* alloc(size_t n, MemCategory cat, const char* what) override;
  MemoryLedger& memory() override { return cpu_->memory(); }  // the CPU device's buffers
  void release(float* p) override;
  void upload(float* dst, const float* host, size_t n) override;
  void download(float* host, const float* src, size_t n) override;
  void fill(float* dst, float value, size_t n) override;
  void copy(float* dst, const float* src, size_t n) override;
  void load_images(float* dst, const uint8_t* host, size_t n) override;
  void load_labels(float* dst, const uint8_t* host, size_t n) override;
  void synchronize() override;

  void conv2d_forward(const ConvShape& s, const float* x, const float* w, const float* b,
                      float* y) override;
  void conv2d_backward(const ConvShape& s, const float* x, const float* w, const float* dy,
                       float* dx, float* dw, float* db) override;
  void avgpool_forward(const PoolShape& s, const float* x, float* y) override;
  void avgpool_backward(const PoolShape& s, const float* dy, float* dx) override;
  void gap_forward(int n, int c, int hw, const float* x, float* y) override;
  void gap_backward(int n, int c, int hw, const float* dy, float* dx) override;
  void relu_forward(const float* x, float* y, size_t n) override;
  void relu_backward(const float* y, const float* dy, float* dx, size_t n) override;
  void dense_forward(int n, int in, int out, const float* x, const float* w, const float* b,
                     float* y) override;
  void dense_backward(int n, int in, int out, const float* x, const float* w, const float* dy,
                      float* dx, float* dw, float* db) override;
  void softmax_xent(int n, int classes, const float* logits, const float* labels, float scale,
                    float* dlogits, float* stats) override;
  void mse_loss(int n, int classes, const float* pred, const float* labels, float scale,
                float* dpred, float* stats) override;
  void batchnorm_forward_train(const BnShape& s, const float* x, const float* gamma,
                               const float* beta, float* y, float* running_mean,
                               float* running_var, float* save_mean, float* save_invstd) override;
  void batchnorm_forward_infer(const BnShape& s, const float* x, const float* gamma,
                               const float* beta, const float* running_mean,
                               const float* running_var, float* y) override;
  void batchnorm_backward(const BnShape& s, const float* x, const float* dy, const float* gamma,
                          const float* save_mean, const float* save_invstd, float* dx,
                          float* dgamma, float* dbeta) override;
  void axpy(float a, const float* x, float* y, size_t n) override;
  void sgd_step(float* w, const float* g, float lr, size_t n) override;
  void adam_step(float* w, const float* g, float* m, float* v, size_t n,
                 const AdamStep& s) override;

  void comm_copy(float* dst, const float* src, size_t n) override;
  void comm_reduce(float* dst, const float* src, size_t n) override;
  void comm_wait_compute() override;
  void compute_wait_comm() override;
  void comm_record() override;
  void comm_wait_peer(Device& peer) override;
  void comm_synchronize() override;
  int compute_mark() override;
  void comm_wait_mark(int token) override;
  std::unique_ptr<StreamTimer> make_timer(StreamKind s) override;
  std::unique_ptr<StreamStamps> make_stamps(StreamKind s) override;

 private:
  void check_error();  // throws the sticky error of an earlier op
  // Queues op on the compute stream (math on cpu_, run by the worker).
  void compute(std::function<void(Device&)> op, std::vector<async::Span> outs,
               std::vector<async::Span> ins);
  const uint8_t* stage(const uint8_t* host, size_t n);  // load staging ring, as on CUDA

  int rank_;
  AsyncOptions opt_;
  std::string name_;
  std::unique_ptr<Device> cpu_;  // the math; compute ops on the compute worker only
  std::shared_ptr<std::exception_ptr> error_ = std::make_shared<std::exception_ptr>();
  std::shared_ptr<std::mutex> error_mu_ = std::make_shared<std::mutex>();
  std::shared_ptr<async::Stream> compute_, comm_;
  std::atomic<uint64_t> peer_pos_{0};  // comm_record: comm position peers wait for
  static constexpr int kMarks = 256;   // as CudaDevice's compute_mark ring
  std::array<std::atomic<uint64_t>, kMarks> marks_{};
  std::atomic<unsigned> next_mark_{0};
  struct Stage {  // like CudaDevice's pinned + device staging: reused once its reader finished
    std::vector<uint8_t> bytes;
    uint64_t reader_done = 0;  // compute position after the op that reads it
  };
  static constexpr int kStages = 4;
  Stage stages_[kStages];
  int next_stage_ = 0;
};

}  // namespace dpb
