// cuda_device.h: the CUDA backend of dpb::Device (one rank on one GPU; several ranks may share a
// GPU as separate CudaDevice objects). Built only with -DDPB_CUDA=ON; made by make_cuda_device().
//
// Each device owns a compute stream and a comm stream (both non-blocking), a cuBLAS and a cuDNN
// handle bound to the compute stream, and events that order the two streams and the ranks. Every
// entry point calls cudaSetDevice(gpu) first, since ops come from the rank's thread and from its
// communication thread. Compute-side state (cuDNN algorithm cache, workspace, load staging) is
// touched only by compute ops; comm-side state (staging for non-peer GPUs) only by comm ops, so the
// two threads never share mutable host state.
//
// The method bodies are split by concern: cuda_device.cpp (construction, memory, staging),
// cuda_streams.cpp (waits, timers, stream and rank ordering), cuda_comm.cu (comm ops), and by op
// family: conv_cudnn.cu, dense_cublas.cu, pool.cu, batchnorm_cudnn.cu, softmax_xent.cu,
// mse_loss.cu, elementwise.cu, adam.cu. The factory functions (cuda_backend.h) are in
// cuda_backend.cpp.
#pragma once
#include <atomic>
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "src/core/device.h"

namespace dpb {

// Launchers for the kernels shared between op files (elementwise.cu); all check the launch.
namespace cuda_kernels {
int grid_for(size_t n, int block);  // blocks for a grid-stride loop over n elements
// y[i] += b[(i / inner) % channels] for i < total (conv: inner = h*w; dense: inner = 1).
void add_bias(float* y, const float* b, size_t total, int inner, int channels, cudaStream_t st);
// db[c] = sum over outer o and inner j of dy[(o * channels + c) * inner + j]; db overwritten.
// Two passes when outer * inner is large: partial sums of slices into scratch (at least
// channel_sum_scratch(...) floats), then a fixed-order sum of the slices. Deterministic.
size_t channel_sum_scratch(int outer, int channels, int inner);
void channel_sum(const float* dy, float* db, int outer, int channels, int inner, float* scratch,
                 cudaStream_t st);
void fill(float* dst, float value, size_t n, cudaStream_t st);
}  // namespace cuda_kernels

// cuDNN descriptors and algorithms for one convolution shape (conv_cudnn.cu). Direction d:
// 0 forward, 1 backward data, 2 backward filter; each has its own convolution descriptor so
// that its math type can follow the algorithm found for it. algo[d] < 0: not chosen yet.
struct CudnnConvPlan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv[3] = {nullptr, nullptr, nullptr};
  int algo[3] = {-1, -1, -1};
  size_t ws[3] = {0, 0, 0};
  bool exact[3] = {false, false, false};  // algo[d] was found for this very shape (not reused)
};

class CudaDevice final : public Device {
 public:
  CudaDevice(int rank, int gpu, bool tf32);
  ~CudaDevice() override;
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  BackendKind kind() const override { return BackendKind::Cuda; }
  int rank() const override { return rank_; }
  std::string name() const override { return name_; }
  int gpu() const { return gpu_; }
  bool tf32() const { return tf32_; }
  cudaStream_t comm_stream() const { return comm_; }  // NCCL runs here
  // Host waits poll (cudaEventQuery / cudaStreamQuery) instead of blocking in the driver, so that
  // a failed peer (cancel_waits) or an asynchronous error of a library on the streams (the probe
  // below) cannot hang the calling thread; they throw dpb::Error naming `what` instead.
  void wait_event(cudaEvent_t ev, const char* what);
  void wait_stream(cudaStream_t st, const char* what);
  // A library whose work on these streams can fail asynchronously registers a probe here for
  // that work's lifetime (the nccl all-reduce: its communicator's error, collectives/cuda): host
  // waits call it every 64 polls, from any thread, and throw its answer when not "". Setting
  // another (or an empty one) returns once no call of the old probe runs, so what it refers to
  // may then be freed. The backend itself knows no such library.
  void set_async_error_probe(std::function<std::string()> probe);

  float* alloc(size_t n, MemCategory cat, const char* what) override;
  void release(float* p) override;
  MemoryLedger& memory() override { return ledger_; }
  void upload(float* dst, const float* host, size_t n) override;
  void download(float* host, const float* src, size_t n) override;
  void fill(float* dst, float value, size_t n) override;
  void copy(float* dst, const float* src, size_t n) override;
  void load_images(float* dst, const uint8_t* host, size_t n) override;
  void load_labels(float* dst, const uint8_t* host, size_t n) override;
  void synchronize() override;
  // Pinned (page-locked) host staging, so that comm_download / comm_upload are asynchronous DMA
  // copies on the comm stream (pageable memory would make the driver stage and block).
  float* alloc_host(size_t n, const char* what) override;
  void free_host(float* p) override;

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
  void comm_download(float* host, const float* src, size_t n) override;
  void comm_upload(float* dst, const float* host, size_t n) override;
  void comm_wait_compute() override;
  int compute_mark() override;
  void comm_wait_mark(int token) override;
  void compute_wait_comm() override;
  void comm_record() override;
  void comm_wait_peer(Device& peer) override;
  void comm_synchronize() override;
  void cancel_waits(const std::string& why) override;
  std::unique_ptr<StreamTimer> make_timer(StreamKind s) override;
  std::unique_ptr<StreamStamps> make_stamps(StreamKind s) override;

 private:
  using ConvKey = std::array<int, 9>;

  void bind() const;                     // cudaSetDevice(gpu_) for the calling thread
  void teardown() noexcept;              // frees whatever was created (destructor, failed ctor)
  // release / free_host: wait for both streams unless they cannot be waited for (never throws)
  bool streams_idle_for_free(const char* op, const char* kind, bool warn_leak);
  CudnnConvPlan& conv_plan(const ConvShape& s);  // descriptors, created once per shape
  void destroy_conv_plans() noexcept;
  void* workspace(size_t bytes);         // compute-stream scratch, grown as needed
  // Pinned host + device byte staging for load_images/load_labels; returns the device copy.
  const uint8_t* stage_bytes(const uint8_t* host, size_t n);
  bool accessible(const void* p) const;  // can this GPU's kernels dereference p directly?
  float* comm_scratch(size_t n);         // comm-stream scratch, grown as needed
  void poll(const std::function<cudaError_t()>& query, const char* what);
  std::string async_error();  // the probe's answer ("" without a probe)
  // DPB_CUDA_SYNC=1: wait for stream st after every op and report a kernel fault against `op`
  // (otherwise it surfaces at some later call).
  void op_done(const char* op, cudaStream_t st) {
    if (sync_each_op_) wait_stream(st, op);
  }
  // Batch norm descriptors of one (n, c, hw), made once (batchnorm_cudnn.cu).
  struct BnDescs {
    cudnnTensorDescriptor_t x = nullptr, stats = nullptr;
    explicit BnDescs(const BnShape& s);
    ~BnDescs();
    BnDescs(const BnDescs&) = delete;
    BnDescs& operator=(const BnDescs&) = delete;
  };
  BnDescs& bn_descs(const BnShape& s);

  int rank_, gpu_;
  bool tf32_;
  std::string name_;
  std::vector<bool> peer_ok_;  // peer_ok_[g]: kernels on gpu_ may load g's memory
  cudaStream_t compute_ = nullptr, comm_ = nullptr;
  static constexpr int kMarks = 256;  // compute_mark ring (more than any step's units)
  cudaEvent_t marks_[kMarks] = {};
  std::atomic<unsigned> next_mark_{0};  // unsigned: wraps without a negative index
  cudaEvent_t ev_compute_ = nullptr;  // comm_wait_compute: compute position
  cudaEvent_t ev_comm_ = nullptr;     // compute_wait_comm: comm position
  cudaEvent_t ev_peer_ = nullptr;     // comm_record: waited on by peers' comm streams
  cublasHandle_t cublas_ = nullptr;
  void* cublas_ws_ = nullptr;  // cuBLAS's workspace (cublasSetWorkspace), charged as workspace
  size_t cublas_ws_bytes_ = 0;
  cudnnHandle_t cudnn_ = nullptr;
  std::map<ConvKey, CudnnConvPlan> conv_plans_;
  // Every cudaMalloc of this device: charged to ledger_ first (OutOfMemory past its capacity), and
  // a cudaErrorMemoryAllocation is an OutOfMemory too. dev_free_charged gives the bytes back.
  void* dev_malloc(size_t bytes, MemCategory cat, const char* what);
  void dev_free_charged(void* p, size_t bytes, MemCategory cat);
  MemoryLedger ledger_;
  void* ws_ = nullptr;
  size_t ws_bytes_ = 0;
  // Data loading stages host bytes through a ring of pinned + device buffers, so that the host
  // waits only for the copy kStages loads back, not for the last step's compute (the copies run
  // on the compute stream behind it).
  struct Stage {
    uint8_t* pinned = nullptr;  // host, cudaHostAlloc
    uint8_t* dev = nullptr;     // device
    size_t bytes = 0;
    cudaEvent_t ev = nullptr;   // recorded after the copy out of `pinned`
    bool used = false;          // ev has been recorded
  };
  static constexpr int kStages = 4;
  Stage stages_[kStages];
  int next_stage_ = 0;
  float* scratch_ = nullptr;    // comm staging (device-local), in floats
  size_t scratch_n_ = 0;
  std::map<std::array<int, 3>, std::unique_ptr<BnDescs>> bn_descs_;  // (n, c, hw)
  bool sync_each_op_ = false;   // DPB_CUDA_SYNC=1
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> leak_warned_{false};
  std::mutex cancel_mu_;
  std::string cancel_why_;
  std::mutex probe_mu_;  // held while the probe is called or replaced
  std::function<std::string()> probe_;
};

}  // namespace dpb
