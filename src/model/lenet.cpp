// lenet.cpp: LeNet exactly as in d2l 12.5: conv 20@3x3, ReLU, avgpool 2, conv 50@5x5,
// ReLU, avgpool 2, dense 800->128, ReLU, dense 128->10. Input (n, 1, 28, 28).
// Parameter order: conv1.w (20,1,3,3), conv1.b, conv2.w (50,20,5,5), conv2.b, fc1.w (800,128),
// fc1.b, fc2.w (128,10), fc2.b.
#include "src/model/model.h"

namespace dpb {
namespace {

class LeNet final : public Model {
 public:
  LeNet(Device& dev, int B) : Model(dev, B) {
    c1w_ = table_.add("conv1.weight", {20, 1, 3, 3}, Init::Normal001);
    c1b_ = table_.add("conv1.bias", {20}, Init::Zero);
    c2w_ = table_.add("conv2.weight", {50, 20, 5, 5}, Init::Normal001);
    c2b_ = table_.add("conv2.bias", {50}, Init::Zero);
    f1w_ = table_.add("fc1.weight", {800, 128}, Init::Normal001);
    f1b_ = table_.add("fc1.bias", {128}, Init::Zero);
    f2w_ = table_.add("fc2.weight", {128, 10}, Init::Normal001);
    f2b_ = table_.add("fc2.bias", {10}, Init::Zero);
    auto c1 = conv1(B), c2 = conv2(B);
    a1_ = Buffer(dev, c1.y_size(), MemCategory::Activations, "lenet conv1 output");
    p1_ = Buffer(dev, pool1(B).y_size(), MemCategory::Activations, "lenet pool1 output");
    a2_ = Buffer(dev, c2.y_size(), MemCategory::Activations, "lenet conv2 output");
    p2_ = Buffer(dev, pool2(B).y_size(), MemCategory::Activations, "lenet pool2 output");
    a3_ = Buffer(dev, size_t(B) * 128, MemCategory::Activations, "lenet fc1 output");
    logits_ = Buffer(dev, size_t(B) * 10, MemCategory::Activations, "lenet logits");
    d1_ = Buffer(dev, c1.y_size(), MemCategory::Temporaries, "lenet grad buffer 1");
    d2_ = Buffer(dev, c1.y_size(), MemCategory::Temporaries, "lenet grad buffer 2");  // also holds pool1 backward
    dp_ = Buffer(dev, pool1(B).y_size(), MemCategory::Temporaries, "lenet grad buffer 3");
  }
  std::string name() const override { return "lenet"; }

  const float* forward_impl(ParamSource& w, const float* x, int n, bool) override {
    x_ = x;
    auto c1 = conv1(n), c2 = conv2(n);
    dev_.conv2d_forward(c1, x, P(w, c1w_), P(w, c1b_), a1_.get());
    dev_.relu_forward(a1_.get(), a1_.get(), c1.y_size());
    dev_.avgpool_forward(pool1(n), a1_.get(), p1_.get());
    dev_.conv2d_forward(c2, p1_.get(), P(w, c2w_), P(w, c2b_), a2_.get());
    dev_.relu_forward(a2_.get(), a2_.get(), c2.y_size());
    dev_.avgpool_forward(pool2(n), a2_.get(), p2_.get());
    dev_.dense_forward(n, 800, 128, p2_.get(), P(w, f1w_), P(w, f1b_), a3_.get());
    dev_.relu_forward(a3_.get(), a3_.get(), size_t(n) * 128);
    dev_.dense_forward(n, 128, 10, a3_.get(), P(w, f2w_), P(w, f2b_), logits_.get());
    return logits_.get();
  }

  void backward_impl(ParamSource& w, const float* dlogits, int n,
                     const std::function<void(int)>& ready) override {
    auto c1 = conv1(n), c2 = conv2(n);
    float* d128 = d1_.get();  // scratch reuse: (n, 128) fits in conv1's output size
    dev_.dense_backward(n, 128, 10, a3_.get(), P(w, f2w_), dlogits, d128, G(w, f2w_), G(w, f2b_));
    ready(f2b_), ready(f2w_);
    dev_.relu_backward(a3_.get(), d128, d128, size_t(n) * 128);
    float* d800 = d2_.get();
    dev_.dense_backward(n, 800, 128, p2_.get(), P(w, f1w_), d128, d800, G(w, f1w_), G(w, f1b_));
    ready(f1b_), ready(f1w_);
    dev_.avgpool_backward(pool2(n), d800, d1_.get());  // (n,50,9,9) into d1 scratch
    dev_.relu_backward(a2_.get(), d1_.get(), d1_.get(), c2.y_size());
    dev_.conv2d_backward(c2, p1_.get(), P(w, c2w_), d1_.get(), dp_.get(), G(w, c2w_), G(w, c2b_));
    ready(c2b_), ready(c2w_);
    dev_.avgpool_backward(pool1(n), dp_.get(), d2_.get());  // (n,20,26,26) into d2 scratch
    dev_.relu_backward(a1_.get(), d2_.get(), d2_.get(), c1.y_size());
    dev_.conv2d_backward(c1, x_, P(w, c1w_), d2_.get(), nullptr, G(w, c1w_), G(w, c1b_));
    ready(c1b_), ready(c1w_);
  }

 private:
  static ConvShape conv1(int n) { return {n, 1, 28, 28, 20, 3, 3, 0, 1}; }
  static PoolShape pool1(int n) { return {n, 20, 26, 26, 2, 2}; }
  static ConvShape conv2(int n) { return {n, 20, 13, 13, 50, 5, 5, 0, 1}; }
  static PoolShape pool2(int n) { return {n, 50, 9, 9, 2, 2}; }

  int c1w_, c1b_, c2w_, c2b_, f1w_, f1b_, f2w_, f2b_;
  const float* x_ = nullptr;
  Buffer a1_, p1_, a2_, p2_, a3_, logits_, d1_, d2_, dp_;
};

}  // namespace

std::unique_ptr<Model> make_lenet(Device& dev, int max_batch, const ModelOptions&) {
  return std::make_unique<LeNet>(dev, max_batch);
}

}  // namespace dpb
