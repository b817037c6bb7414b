// mlp.cpp: the sharding notebook's MLP (../shared/seeds/004, flax): n_layers x (Dense(hidden),
// ReLU), then Dense(10). Input (n, in): the data's features (Fashion-MNIST's 784 pixels, or
// --data synthetic's --mlp-input). --mlp-layers, --mlp-hidden, --mlp-input: ModelOptions.
// Parameter order (flax's names): layers_0.kernel (in, hidden), layers_0.bias (hidden), ...,
// layers_{L-1}.bias, output_layer.kernel (hidden, 10), output_layer.bias (10). Kernels are
// initialized as nn.Dense's default (lecun_normal), biases zero.
//
// Memory: every hidden layer's output (n, hidden) is kept for backward (Activations: the ReLU's
// mask and the next layer's input); backward needs only two (n, hidden) gradient buffers, used in
// turn (Temporaries), whatever the depth (one when there is one hidden layer).
#include <algorithm>
#include <string>

#include "src/core/check.h"
#include "src/model/model.h"

namespace dpb {
namespace {

class Mlp final : public Model {
 public:
  Mlp(Device& dev, int B, const ModelOptions& o)
      : Model(dev, B), layers_(o.mlp_layers), hidden_(o.mlp_hidden), in_(o.mlp_input) {
    DPB_CHECK(layers_ >= 1, "--mlp-layers: must be >= 1, got " << layers_);
    DPB_CHECK(hidden_ >= 1, "--mlp-hidden: must be >= 1, got " << hidden_);
    DPB_CHECK(in_ >= 1, "--mlp-input: must be >= 1, got " << in_);
    for (int l = 0; l < layers_; ++l) {
      const std::string p = "layers_" + std::to_string(l);
      w_.push_back(table_.add(p + ".kernel", {l == 0 ? in_ : hidden_, hidden_}, Init::LecunNormal));
      b_.push_back(table_.add(p + ".bias", {hidden_}, Init::Zero));
    }
    wo_ = table_.add("output_layer.kernel", {hidden_, 10}, Init::LecunNormal);
    bo_ = table_.add("output_layer.bias", {10}, Init::Zero);
    const size_t nh = size_t(B) * size_t(hidden_);
    acts_.reserve(layers_);
    for (int l = 0; l < layers_; ++l)
      acts_.emplace_back(dev, nh, MemCategory::Activations, "mlp hidden layer output");
    logits_ = Buffer(dev, size_t(B) * 10, MemCategory::Activations, "mlp logits");
    for (int i = 0; i < std::min(layers_, 2); ++i)
      grad_.emplace_back(dev, nh, MemCategory::Temporaries, "mlp grad buffer");
  }
  std::string name() const override { return "mlp"; }
  int input_size() const override { return in_; }

  const float* forward_impl(ParamSource& w, const float* x, int n, bool) override {
    x_ = x;
    const float* in = x;
    for (int l = 0; l < layers_; ++l) {
      dev_.dense_forward(n, l == 0 ? in_ : hidden_, hidden_, in, P(w, w_[l]), P(w, b_[l]),
                         acts_[l].get());
      dev_.relu_forward(acts_[l].get(), acts_[l].get(), size_t(n) * hidden_);
      in = acts_[l].get();
    }
    dev_.dense_forward(n, hidden_, 10, in, P(w, wo_), P(w, bo_), logits_.get());
    return logits_.get();
  }

  void backward_impl(ParamSource& w, const float* dlogits, int n,
                     const std::function<void(int)>& ready) override {
    const size_t nh = size_t(n) * hidden_;
    int cur = 0;  // grad_[cur]: the gradient of the layer being walked back
    dev_.dense_backward(n, hidden_, 10, acts_[layers_ - 1].get(), P(w, wo_), dlogits,
                        grad_[cur].get(), G(w, wo_), G(w, bo_));
    ready(bo_), ready(wo_);
    for (int l = layers_ - 1; l >= 0; --l) {
      float* dy = grad_[cur].get();
      dev_.relu_backward(acts_[l].get(), dy, dy, nh);
      // The first layer's input is the data: no gradient for it.
      float* dx = l > 0 ? grad_[1 - cur].get() : nullptr;
      dev_.dense_backward(n, l == 0 ? in_ : hidden_, hidden_, l > 0 ? acts_[l - 1].get() : x_,
                          P(w, w_[l]), dy, dx, G(w, w_[l]), G(w, b_[l]));
      ready(b_[l]), ready(w_[l]);
      cur = 1 - cur;
    }
  }

 private:
  const int layers_, hidden_, in_;
  std::vector<int> w_, b_;  // parameter indices per hidden layer
  int wo_ = 0, bo_ = 0;
  const float* x_ = nullptr;
  std::vector<Buffer> acts_, grad_;
  Buffer logits_;
};

}  // namespace

std::unique_ptr<Model> make_mlp(Device& dev, int max_batch, const ModelOptions& opts) {
  return std::make_unique<Mlp>(dev, max_batch, opts);
}

}  // namespace dpb
