// cpu_device.h: the CPU backend of dpb::Device (one object per rank), built on oneDNN 2.6 (OpenMP
// runtime) for convolutions and GEMMs and on OpenMP loops for everything else.
//
// The class is declared here and defined across kernels/cpu/*.cpp, one op family per file:
//   cpu_device.cpp   construction, memory ops, communication ops, factory
//   conv.cpp         conv2d forward / backward (oneDNN primitives cached per shape)
//   conv_workspace.cpp  conv primitive descriptors and workspaces (shared with kernels/meta)
//   dense.cpp        dense forward / backward (dnnl_sgemm)
//   pool.cpp         average pooling, global average pooling
//   batchnorm.cpp    batch norm train / infer / backward
//   elementwise.cpp  relu, axpy, sgd_step
//   softmax_xent.cpp softmax cross-entropy loss, gradient and accuracy
//   mse_loss.cpp     mean squared error loss (one-hot targets), gradient and accuracy
//   adam.cpp         adam_step
//
// Threading: compute ops run on `threads` OpenMP threads of the calling thread (enter() sets the
// calling thread's OpenMP thread count, which is what oneDNN uses). comm_copy / comm_reduce are
// plain single-threaded loops with no state, so a communication thread may run them concurrently
// with compute ops. The device has no globals: devices on different threads are independent.
#pragma once
#include <array>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <ostream>
#include <string>

#include "kernels/cpu/conv_workspace.h"
#include "src/core/device.h"

namespace dpb {

std::ostream& operator<<(std::ostream& os, const ConvShape& s);
std::ostream& operator<<(std::ostream& os, const PoolShape& s);
std::ostream& operator<<(std::ostream& os, const BnShape& s);

namespace cpu {

// Loops shorter than this run on the calling thread only (an OpenMP fork costs a few µs).
constexpr size_t kParallelMin = size_t(1) << 15;

// One argument of a cached conv primitive: the user's plain (nchw / oihw / x) memory, re-pointed
// at the caller's buffer on each call, and, when oneDNN chose a blocked layout for speed, the
// primitive-side memory (backed by a workspace slot) plus the reorder between the two.
struct ConvOperand {
  dnnl::memory user;
  std::optional<dnnl::memory> prim;
  std::optional<dnnl::reorder> reorder;  // user -> prim for inputs, prim -> user for outputs
  ConvSlot slot = kSlotX;
};

// Cached oneDNN state for one convolution shape: forward and backward-weights are created with
// the entry, backward-data on first use (the first layer never needs it).
struct ConvPrims {
  dnnl::memory::desc x_md, w_md, b_md, y_md;  // user layouts: nchw, oihw, x, nchw
  std::optional<dnnl::convolution_forward::primitive_desc> fwd_pd;
  std::optional<dnnl::convolution_forward> fwd;
  ConvOperand fwd_x, fwd_w, fwd_b, fwd_y;
  std::optional<dnnl::convolution_backward_data> bwd_data;
  ConvOperand bd_w, bd_dy, bd_dx;
  std::optional<dnnl::convolution_backward_weights> bwd_weights;
  ConvOperand bw_x, bw_dy, bw_dw, bw_db;
  dnnl::memory fwd_scratch, bd_scratch, bw_scratch;  // handles set per call
  ConvWorkspace ws;  // each call's workspace requests (conv_workspace.h), reserved before it runs
};

using ConvKey = std::array<int, 9>;  // n, c, h, w, k, r, s, pad, stride

}  // namespace cpu

class CpuDevice final : public Device {
 public:
  CpuDevice(int rank, int threads);
  ~CpuDevice() override;
  CpuDevice(const CpuDevice&) = delete;
  CpuDevice& operator=(const CpuDevice&) = delete;

  BackendKind kind() const override { return BackendKind::Cpu; }
  int rank() const override { return rank_; }
  std::string name() const override;
  int threads() const { return threads_; }

  float* alloc(size_t n, MemCategory cat, const char* what) override;
  void release(float* p) override;
  MemoryLedger& memory() override { return ledger_; }
  // Bytes this device holds from the heap (its buffers and workspaces), counted apart from the
  // ledger: tests check that the ledger misses none of them.
  size_t heap_bytes() const;
  void upload(float* dst, const float* host, size_t n) override;
  void download(float* host, const float* src, size_t n) override;
  void fill(float* dst, float value, size_t n) override;
  void copy(float* dst, const float* src, size_t n) override;
  void load_images(float* dst, const uint8_t* host, size_t n) override;
  void load_labels(float* dst, const uint8_t* host, size_t n) override;
  void synchronize() override {}

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
                               const float* beta, float* y, float* running_mean, float* running_var,
                               float* save_mean, float* save_invstd) override;
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

 private:
  // Called at the start of every compute op: makes this device's thread count the calling
  // thread's OpenMP default (per-thread state, so it is checked on each call).
  void enter() const;
  // The cached primitives for shape s (created on first use).
  cpu::ConvPrims& conv_prims(const ConvShape& s);
  // Conv operand plumbing (conv.cpp): point o at the caller's buffer and, for a blocked
  // layout, at its workspace slot; inputs are reordered in, outputs back out by finish().
  dnnl::memory& conv_input(cpu::ConvOperand& o, const float* p);
  dnnl::memory& conv_output(cpu::ConvOperand& o, float* p);
  void conv_finish(cpu::ConvOperand& o);
  dnnl::memory& conv_scratch(dnnl::memory& m);

  int rank_;
  int threads_;
  // Declared before the buffers that charge it (the workspaces give their bytes back to it).
  MemoryLedger ledger_;
  mutable std::mutex heap_mu_;
  std::map<const void*, size_t> heap_;  // alloc()'s live buffers and their sizes
  dnnl::engine eng_;
  dnnl::stream strm_;
  std::map<cpu::ConvKey, std::unique_ptr<cpu::ConvPrims>> conv_cache_;
  cpu::HostBuf ws_[cpu::kNumSlots];  // conv workspaces, shared by all shapes
};

// Rank `rank`'s CPU device with `threads` math threads (cores / k, at least 1).
std::unique_ptr<Device> make_cpu_device(int rank, int threads);

}  // namespace dpb
