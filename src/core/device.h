// device.h: the small interface every backend implements (CPU: kernels/cpu, CUDA: kernels/cuda).
//
// A Device is one logical device (one rank). Models, the training loop, the all-reduce schedules,
// bucketing and overlap are written once over this interface. All buffers are float32 in the
// device's memory; shapes are NCHW, weights OIHW (conv) and (in, out) (dense, as in the d2l seed).
// Labels live on the device as floats (exact for class ids).
//
// Streams: each device has a compute stream and a communication stream. Compute ops (everything
// above "communication") run in order on the compute stream; comm_* ops run in order on the comm
// stream. On the CPU backend both are synchronous on the calling thread (the comm "stream" is the
// rank's communication thread when overlap is on); on CUDA they are real streams, and the event
// calls below order them. The async test backend (kernels/async) runs the CPU kernels on one
// worker thread per stream with random delays, so a missing ordering call fails in CI. The meta
// backend (kernels/meta) allocates and counts memory as the CPU backend does and runs nothing.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/core/memory.h"

namespace dpb {

enum class BackendKind { Cpu, Cuda, Async, Meta };
enum class StreamKind { Compute, Comm };

// Every kind, and its one name: the --backend value of its entry in the backend table
// (kernels/backends.cpp names its entries with it), so that layers below the table (collectives,
// tuning tables) can name a kind without seeing the table.
inline constexpr BackendKind kBackendKinds[] = {BackendKind::Cpu, BackendKind::Cuda,
                                                BackendKind::Async, BackendKind::Meta};
inline const char* backend_kind_name(BackendKind k) {
  switch (k) {
    case BackendKind::Cpu: return "cpu";
    case BackendKind::Cuda: return "cuda";
    case BackendKind::Async: return "async";
    case BackendKind::Meta: return "meta";
  }
  return "?";
}

// Time spent by work on one stream of a device, on the device's clock: begin() and end() bracket
// work issued on that stream (CUDA: events recorded on it; async: stamps taken by its worker;
// CPU: the host clock, since ops complete when they return). seconds() returns the sum over the
// intervals ended since the last reset(), waiting for them to complete. One timer per thread.
class StreamTimer {
 public:
  virtual ~StreamTimer() = default;
  virtual void begin() = 0;
  virtual void end() = 0;
  virtual double seconds() = 0;
  virtual void reset() = 0;
};

// Points on one stream whose times are known once the stream has passed them: what a rank's
// timeline (src/core/timeline.h) is recorded with. Times are seconds of the host's steady clock
// (CUDA: each event's offset from an anchor event the host waited for; the async test device: the
// stream worker's clock when it reached the point; CPU: the host clock at stamp()). One thread
// stamps; take() is called by it or once the stamping thread is idle.
class StreamStamps {
 public:
  virtual ~StreamStamps() = default;
  // Records a point after the work issued on the stream so far; returns its index since take().
  virtual size_t stamp() = 0;
  // Waits until the stream has passed every point; returns their times in order and starts over.
  virtual std::vector<double> take() = 0;
};

// Seconds of the host's steady clock now (the clock of StreamStamps::take()).
double steady_seconds();

struct ConvShape {  // x (n, c, h, w) * w (k, c, r, s) -> y (n, k, oh, ow); bias (k)
  int n = 0, c = 0, h = 0, w = 0, k = 0, r = 0, s = 0, pad = 0, stride = 1;
  int oh() const { return (h + 2 * pad - r) / stride + 1; }
  int ow() const { return (w + 2 * pad - s) / stride + 1; }
  size_t x_size() const { return size_t(n) * c * h * w; }
  size_t w_size() const { return size_t(k) * c * r * s; }
  size_t y_size() const { return size_t(n) * k * oh() * ow(); }
};

struct PoolShape {  // average pooling, window win x win, given stride, no padding: (n,c,h,w)->(n,c,oh,ow)
  int n = 0, c = 0, h = 0, w = 0, win = 2, stride = 2;
  int oh() const { return (h - win) / stride + 1; }
  int ow() const { return (w - win) / stride + 1; }
  size_t x_size() const { return size_t(n) * c * h * w; }
  size_t y_size() const { return size_t(n) * c * oh() * ow(); }
};

struct BnShape {  // batch norm over (n, c, hw): statistics per channel c
  int n = 0, c = 0, hw = 0;
  float eps = 1e-5f;
  float momentum = 0.1f;  // running = (1 - momentum) * running + momentum * batch (PyTorch/d2l)
  size_t size() const { return size_t(n) * c * hw; }
};

// One Adam step (torch.optim.Adam, optax.adam): hyperparameters and the 1-based step count t.
struct AdamStep {
  double lr = 1e-3, b1 = 0.9, b2 = 0.999, eps = 1e-8;
  long t = 1;
  // What every backend's kernel applies, as floats computed once on the host in double (as
  // torch's step_size and bias_correction2_sqrt), so that the backends agree.
  struct Coeffs {
    float b1, one_minus_b1, b2, one_minus_b2, eps;
    float step_size;  // lr / (1 - b1^t)
    float bc2_sqrt;   // sqrt(1 - b2^t)
  };
  Coeffs coeffs() const {
    const double bc1 = 1.0 - std::pow(b1, double(t)), bc2 = 1.0 - std::pow(b2, double(t));
    return {float(b1), float(1.0 - b1), float(b2), float(1.0 - b2), float(eps), float(lr / bc1),
            float(std::sqrt(bc2))};
  }
};

// Whatever hands out device memory that a Buffer gives back when it dies (Device, ShmArena).
class MemoryOwner {
 public:
  virtual void release(float* p) = 0;

 protected:
  ~MemoryOwner() = default;
};

class Device : public MemoryOwner {
 public:
  virtual ~Device() = default;
  virtual BackendKind kind() const = 0;
  virtual int rank() const = 0;
  virtual std::string name() const = 0;  // e.g. "cpu:0 (1 thread)" or "cuda:0 NVIDIA H100"

  // ---- memory (all sizes in floats) ----
  // Zero-filled; charged to `cat` in memory(). Throws naming `what`: OutOfMemory (memory.h) when
  // it does not fit the ledger's capacity or the device.
  virtual float* alloc(size_t n, MemCategory cat, const char* what) = 0;
  virtual void release(float* p) = 0;
  // This device's accounting: every byte alloc() and the backend's own workspaces hold.
  virtual MemoryLedger& memory() = 0;
  virtual void upload(float* dst, const float* host, size_t n) = 0;    // host -> device, sync
  virtual void download(float* host, const float* src, size_t n) = 0;  // device -> host, sync
  virtual void fill(float* dst, float value, size_t n) = 0;
  virtual void copy(float* dst, const float* src, size_t n) = 0;  // on-device copy, compute stream
  // n bytes of uint8 pixels from host -> floats scaled by 1/255 on the device (data loading).
  virtual void load_images(float* dst, const uint8_t* host, size_t n) = 0;
  // n uint8 labels from host -> float class ids on the device.
  virtual void load_labels(float* dst, const uint8_t* host, size_t n) = 0;
  virtual void synchronize() = 0;  // wait for both streams
  // Host staging (transports that move device data through host memory, e.g. MPI): n zero-filled
  // floats of host memory that the comm stream can copy to and from at full speed (CUDA: pinned,
  // page-locked; elsewhere plain memory, the default). free_host waits for this device's streams
  // first (a staging copy may still use it); it never throws. Allocate once, outside timed steps.
  virtual float* alloc_host(size_t n, const char* what);
  virtual void free_host(float* p);

  // ---- compute ops: forward / backward pairs ----
  virtual void conv2d_forward(const ConvShape& s, const float* x, const float* w, const float* b,
                              float* y) = 0;
  // dx may be null (first layer); dw and db are overwritten (not accumulated).
  virtual void conv2d_backward(const ConvShape& s, const float* x, const float* w, const float* dy,
                               float* dx, float* dw, float* db) = 0;
  virtual void avgpool_forward(const PoolShape& s, const float* x, float* y) = 0;
  virtual void avgpool_backward(const PoolShape& s, const float* dy, float* dx) = 0;
  // Global average pooling (n, c, hw) -> (n, c).
  virtual void gap_forward(int n, int c, int hw, const float* x, float* y) = 0;
  virtual void gap_backward(int n, int c, int hw, const float* dy, float* dx) = 0;
  virtual void relu_forward(const float* x, float* y, size_t n) = 0;  // in-place allowed
  // dx = dy * (y > 0), y the forward output; in-place (dx == dy) allowed.
  virtual void relu_backward(const float* y, const float* dy, float* dx, size_t n) = 0;
  // y (n, out) = x (n, in) . w (in, out) + b (out)
  virtual void dense_forward(int n, int in, int out, const float* x, const float* w, const float* b,
                             float* y) = 0;
  // dx may be null; dw, db overwritten.
  virtual void dense_backward(int n, int in, int out, const float* x, const float* w,
                              const float* dy, float* dx, float* dw, float* db) = 0;
  // Softmax cross-entropy on logits (n, classes) with float labels (n).
  // dlogits = scale * (softmax - onehot). stats[0] += scale * sum of losses, stats[1] += number of
  // correct argmax predictions (stats is a device buffer of 2 floats). dlogits may be null (eval).
  virtual void softmax_xent(int n, int classes, const float* logits, const float* labels,
                            float scale, float* dlogits, float* stats) = 0;
  // Mean squared error of predictions (n, classes) against one-hot float labels (n): per row the
  // mean over classes of (pred - onehot)^2. stats[0] += scale * sum of the rows' losses,
  // stats[1] += number of correct argmax predictions (as softmax_xent). dpred, when not null (eval
  // passes null), = scale * 2 (pred - onehot) / classes.
  virtual void mse_loss(int n, int classes, const float* pred, const float* labels, float scale,
                        float* dpred, float* stats) = 0;
  // Batch norm, training mode: batch statistics, updates running stats, saves mean and inverse
  // std (c each) for backward. Inference mode uses the running statistics.
  virtual void batchnorm_forward_train(const BnShape& s, const float* x, const float* gamma,
                                       const float* beta, float* y, float* running_mean,
                                       float* running_var, float* save_mean,
                                       float* save_invstd) = 0;
  virtual void batchnorm_forward_infer(const BnShape& s, const float* x, const float* gamma,
                                       const float* beta, const float* running_mean,
                                       const float* running_var, float* y) = 0;
  virtual void batchnorm_backward(const BnShape& s, const float* x, const float* dy,
                                  const float* gamma, const float* save_mean,
                                  const float* save_invstd, float* dx, float* dgamma,
                                  float* dbeta) = 0;
  virtual void axpy(float a, const float* x, float* y, size_t n) = 0;  // y += a * x
  virtual void sgd_step(float* w, const float* g, float lr, size_t n) = 0;  // w -= lr * g
  // Adam on n floats, its moments m and v (n each, zero before step 1) updated in place:
  // m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; w -= step_size * m / (sqrt(v) / bc2_sqrt + eps)
  // with s.coeffs()' step_size = lr / (1 - b1^t) and bc2_sqrt = sqrt(1 - b2^t).
  virtual void adam_step(float* w, const float* g, float* m, float* v, size_t n,
                         const AdamStep& s) = 0;

  // ---- communication (comm stream); src/dst may be a peer device's memory ----
  virtual void comm_copy(float* dst, const float* src, size_t n) = 0;
  virtual void comm_reduce(float* dst, const float* src, size_t n) = 0;  // dst += src
  // Staging copies between this device's memory and host memory from alloc_host, on the comm
  // stream: ordered after the comm work issued before them, and returning at once (CUDA). The host
  // reads a download, or writes over an upload's source, only after comm_synchronize(). Default:
  // comm_copy (CPU: a memcpy; the async device: a comm-stream op).
  virtual void comm_download(float* host, const float* src, size_t n) { comm_copy(host, src, n); }
  virtual void comm_upload(float* dst, const float* host, size_t n) { comm_copy(dst, host, n); }
  // Ordering between streams and devices. CPU: no-ops (ops are synchronous on their thread).
  virtual void comm_wait_compute() {}  // comm stream waits for compute work issued so far
  virtual void compute_wait_comm() {}  // compute stream waits for comm work issued so far
  virtual void comm_record() {}        // mark the comm stream's current position (for peers)
  virtual void comm_wait_peer(Device& peer) { (void)peer; }  // wait for peer's last comm_record
  virtual void comm_synchronize() {}   // host waits for the comm stream
  // Overlap: mark the compute stream's current position (returns a token) so that the comm stream
  // can later wait for exactly that point, not for compute issued after it. CPU: no-ops (ops are
  // complete when they return). Tokens are reused after 256 marks.
  virtual int compute_mark() { return -1; }
  virtual void comm_wait_mark(int token) { (void)token; }

  // Another rank failed: host waits of this device (synchronize, download, ...) throw instead of
  // waiting for work that may never finish (e.g. a collective the failed rank never joined).
  // Called by CommGroup::abort. CPU: ops are synchronous, nothing to wake.
  virtual void cancel_waits(const std::string& why) { (void)why; }
  // A timer for work issued on stream s (see StreamTimer). Default: the host clock.
  virtual std::unique_ptr<StreamTimer> make_timer(StreamKind s);
  // Stamps on stream s (see StreamStamps). Default: the host clock.
  virtual std::unique_ptr<StreamStamps> make_stamps(StreamKind s);
};

// Owns n floats that Free(owner, p) gives back when it dies or is reset; movable, not copyable.
// The one owner type behind Buffer and HostBuffer.
template <class Owner, void (Owner::*Free)(float*)>
class OwnedFloats {
 public:
  OwnedFloats() = default;
  OwnedFloats(Owner& owner, float* p, size_t n) : owner_(&owner), p_(p), n_(n) {}
  OwnedFloats(OwnedFloats&& o) noexcept : owner_(o.owner_), p_(o.p_), n_(o.n_) { o.forget(); }
  OwnedFloats& operator=(OwnedFloats&& o) noexcept {
    if (this != &o) reset(), owner_ = o.owner_, p_ = o.p_, n_ = o.n_, o.forget();
    return *this;
  }
  OwnedFloats(const OwnedFloats&) = delete;
  OwnedFloats& operator=(const OwnedFloats&) = delete;
  ~OwnedFloats() { reset(); }
  void reset() {
    if (p_) (owner_->*Free)(p_);
    forget();
  }
  float* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  void forget() { p_ = nullptr, n_ = 0; }
  Owner* owner_ = nullptr;
  float* p_ = nullptr;
  size_t n_ = 0;
};

// Owns a device buffer. Allocated by a device, or adopted from another owner of device memory
// (a transport's shared arena: CommGroup::alloc).
class Buffer : public OwnedFloats<MemoryOwner, &MemoryOwner::release> {
 public:
  Buffer() = default;
  Buffer(Device& dev, size_t n, MemCategory cat, const char* what)
      : OwnedFloats(dev, dev.alloc(n, cat, what), n) {}
  Buffer(MemoryOwner& owner, float* p, size_t n) : OwnedFloats(owner, p, n) {}
};

// Owns host staging memory from Device::alloc_host.
class HostBuffer : public OwnedFloats<Device, &Device::free_host> {
 public:
  HostBuffer() = default;
  HostBuffer(Device& dev, size_t n, const char* what)
      : OwnedFloats(dev, dev.alloc_host(n, what), n) {}
};

// Devices by backend name: make_device / make_devices in kernels/backends.h (the backend table);
// each backend declares its own factory beside its Device (kernels/<name>/).

}  // namespace dpb
