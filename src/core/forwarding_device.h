// forwarding_device.h: a Device that forwards every call to an inner device, so that a wrapper
// overrides only the calls it changes: tests that observe or inject failures (tests/test_train.cpp,
// tests/test_mpi_staging.cpp, tests/test_allreduce.cpp).
#pragma once
#include <memory>
#include <string>
#include <utility>

#include "src/core/device.h"

namespace dpb {

class ForwardingDevice : public Device {
 public:
  explicit ForwardingDevice(std::unique_ptr<Device> inner) : in_(std::move(inner)) {}
  BackendKind kind() const override { return in_->kind(); }
  int rank() const override { return in_->rank(); }
  std::string name() const override { return in_->name(); }
  float* alloc(size_t n, MemCategory c, const char* w) override { return in_->alloc(n, c, w); }
  MemoryLedger& memory() override { return in_->memory(); }
  void release(float* p) override { in_->release(p); }
  void upload(float* d, const float* h, size_t n) override { in_->upload(d, h, n); }
  void download(float* h, const float* s, size_t n) override { in_->download(h, s, n); }
  void fill(float* d, float v, size_t n) override { in_->fill(d, v, n); }
  void copy(float* d, const float* s, size_t n) override { in_->copy(d, s, n); }
  void load_images(float* d, const uint8_t* h, size_t n) override { in_->load_images(d, h, n); }
  void load_labels(float* d, const uint8_t* h, size_t n) override { in_->load_labels(d, h, n); }
  void synchronize() override { in_->synchronize(); }
  float* alloc_host(size_t n, const char* w) override { return in_->alloc_host(n, w); }
  void free_host(float* p) override { in_->free_host(p); }
  void conv2d_forward(const ConvShape& s, const float* x, const float* w, const float* b,
                      float* y) override {
    in_->conv2d_forward(s, x, w, b, y);
  }
  void conv2d_backward(const ConvShape& s, const float* x, const float* w, const float* dy,
                       float* dx, float* dw, float* db) override {
    in_->conv2d_backward(s, x, w, dy, dx, dw, db);
  }
  void avgpool_forward(const PoolShape& s, const float* x, float* y) override {
    in_->avgpool_forward(s, x, y);
  }
  void avgpool_backward(const PoolShape& s, const float* dy, float* dx) override {
    in_->avgpool_backward(s, dy, dx);
  }
  void gap_forward(int n, int c, int hw, const float* x, float* y) override {
    in_->gap_forward(n, c, hw, x, y);
  }
  void gap_backward(int n, int c, int hw, const float* dy, float* dx) override {
    in_->gap_backward(n, c, hw, dy, dx);
  }
  void relu_forward(const float* x, float* y, size_t n) override { in_->relu_forward(x, y, n); }
  void relu_backward(const float* y, const float* dy, float* dx, size_t n) override {
    in_->relu_backward(y, dy, dx, n);
  }
  void dense_forward(int n, int in, int out, const float* x, const float* w, const float* b,
                     float* y) override {
    in_->dense_forward(n, in, out, x, w, b, y);
  }
  void dense_backward(int n, int in, int out, const float* x, const float* w, const float* dy,
                      float* dx, float* dw, float* db) override {
    in_->dense_backward(n, in, out, x, w, dy, dx, dw, db);
  }
  void softmax_xent(int n, int classes, const float* logits, const float* labels, float scale,
                    float* dlogits, float* stats) override {
    in_->softmax_xent(n, classes, logits, labels, scale, dlogits, stats);
  }
  void mse_loss(int n, int classes, const float* pred, const float* labels, float scale,
                float* dpred, float* stats) override {
    in_->mse_loss(n, classes, pred, labels, scale, dpred, stats);
  }
  void batchnorm_forward_train(const BnShape& s, const float* x, const float* gamma,
                               const float* beta, float* y, float* rm, float* rv, float* sm,
                               float* si) override {
    in_->batchnorm_forward_train(s, x, gamma, beta, y, rm, rv, sm, si);
  }
  void batchnorm_forward_infer(const BnShape& s, const float* x, const float* gamma,
                               const float* beta, const float* rm, const float* rv,
                               float* y) override {
    in_->batchnorm_forward_infer(s, x, gamma, beta, rm, rv, y);
  }
  void batchnorm_backward(const BnShape& s, const float* x, const float* dy, const float* gamma,
                          const float* sm, const float* si, float* dx, float* dgamma,
                          float* dbeta) override {
    in_->batchnorm_backward(s, x, dy, gamma, sm, si, dx, dgamma, dbeta);
  }
  void axpy(float a, const float* x, float* y, size_t n) override { in_->axpy(a, x, y, n); }
  void sgd_step(float* w, const float* g, float lr, size_t n) override {
    in_->sgd_step(w, g, lr, n);
  }
  void adam_step(float* w, const float* g, float* m, float* v, size_t n,
                 const AdamStep& s) override {
    in_->adam_step(w, g, m, v, n, s);
  }
  void comm_copy(float* d, const float* s, size_t n) override { in_->comm_copy(d, s, n); }
  void comm_reduce(float* d, const float* s, size_t n) override { in_->comm_reduce(d, s, n); }
  void comm_download(float* h, const float* s, size_t n) override { in_->comm_download(h, s, n); }
  void comm_upload(float* d, const float* h, size_t n) override { in_->comm_upload(d, h, n); }
  void comm_wait_compute() override { in_->comm_wait_compute(); }
  void compute_wait_comm() override { in_->compute_wait_comm(); }
  void comm_record() override { in_->comm_record(); }
  void comm_wait_peer(Device& peer) override { in_->comm_wait_peer(peer); }
  void comm_synchronize() override { in_->comm_synchronize(); }
  int compute_mark() override { return in_->compute_mark(); }
  void comm_wait_mark(int token) override { in_->comm_wait_mark(token); }
  void cancel_waits(const std::string& why) override { in_->cancel_waits(why); }
  std::unique_ptr<StreamTimer> make_timer(StreamKind s) override { return in_->make_timer(s); }

 protected:
  std::unique_ptr<Device> in_;
};

}  // namespace dpb
