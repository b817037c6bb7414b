// resnet18.cpp: ResNet-18 as in d2l 12.6 for 28x28 Fashion-MNIST: 3x3 conv stem with 64
// channels, BN, ReLU, no max-pool; residual blocks 64, 64, 128 (1x1 projection, stride 2), 128,
// 256 (1x1, stride 2), 256, 512 (1x1, stride 2), 512; global average pooling; dense 512->10.
// Convolutions keep their biases; the 1x1 projection has no BN (d2l's Residual). BatchNorm
// statistics are per device; evaluation uses running statistics.
#include "src/model/model.h"

#include <algorithm>

namespace dpb {
namespace {

struct Conv {
  int w = -1, b = -1, cin = 0, cout = 0, k = 3, pad = 1, stride = 1, h = 0;  // input h = w
  ConvShape shape(int n) const { return {n, cin, h, h, cout, k, k, pad, stride}; }
};

struct BatchNorm {
  int gamma = -1, beta = -1, c = 0, hw = 0;
  Buffer rmean, rvar, smean, sinv;
  BnShape shape(int n) const { return BnShape{n, c, hw, 1e-5f, 0.1f}; }
};

struct Block {
  Conv c1, c2, c3;  // c3: 1x1 projection (c3.w < 0 when the shortcut is the identity)
  BatchNorm bn1, bn2;
  int hin = 0, hout = 0;
  const float* x = nullptr;  // block input from the last forward
  Buffer c1out, r1, c2out, s, out;
};

class ResNet18 final : public Model {
 public:
  ResNet18(Device& dev, int B) : Model(dev, B) {
    stem_ = conv("stem.conv", 1, 64, 3, 1, 1, 28);
    stem_bn_ = bn("stem.bn", 64, 28 * 28);
    int cin = 64, h = 28;
    const int widths[4] = {64, 128, 256, 512};
    for (int st = 0; st < 4; ++st) {
      for (int j = 0; j < 2; ++j) {
        int cout = widths[st];
        bool proj = st > 0 && j == 0;
        int stride = proj ? 2 : 1;
        std::string p = "stage" + std::to_string(st + 1) + "." + std::to_string(j) + ".";
        auto blk = std::make_unique<Block>();
        blk->hin = h;
        blk->hout = (h + 2 - 3) / stride + 1;
        blk->c1 = conv(p + "conv1", cin, cout, 3, 1, stride, h);
        blk->bn1 = bn(p + "bn1", cout, blk->hout * blk->hout);
        blk->c2 = conv(p + "conv2", cout, cout, 3, 1, 1, blk->hout);
        blk->bn2 = bn(p + "bn2", cout, blk->hout * blk->hout);
        if (proj) blk->c3 = conv(p + "conv3", cin, cout, 1, 0, stride, h);
        size_t act = size_t(B) * cout * blk->hout * blk->hout;
        blk->c1out = Buffer(dev, act, MemCategory::Activations, "resnet18 block conv1 output");
        blk->r1 = Buffer(dev, act, MemCategory::Activations, "resnet18 block bn1/relu output");
        blk->c2out = Buffer(dev, act, MemCategory::Activations, "resnet18 block conv2 output");
        blk->out = Buffer(dev, act, MemCategory::Activations, "resnet18 block output");
        if (proj) blk->s = Buffer(dev, act, MemCategory::Activations, "resnet18 block projection output");
        cin = cout;
        h = blk->hout;
        blocks_.push_back(std::move(blk));
      }
    }
    final_h_ = h;  // 4
    fcw_ = table_.add("fc.weight", {512, 10}, Init::Normal001);
    fcb_ = table_.add("fc.bias", {10}, Init::Zero);
    size_t big = size_t(B) * 64 * 28 * 28;
    stem_out_ = Buffer(dev, big, MemCategory::Activations, "resnet18 stem conv output");
    stem_act_ = Buffer(dev, big, MemCategory::Activations, "resnet18 stem bn/relu output");
    for (auto& s : scratch_) s = Buffer(dev, big, MemCategory::Temporaries, "resnet18 gradient scratch");
    gap_ = Buffer(dev, size_t(B) * 512, MemCategory::Activations, "resnet18 pooled features");
    logits_ = Buffer(dev, size_t(B) * 10, MemCategory::Activations, "resnet18 logits");
    dgap_ = Buffer(dev, size_t(B) * 512, MemCategory::Temporaries, "resnet18 pooled features gradient");
  }
  std::string name() const override { return "resnet18"; }

  const float* forward_impl(ParamSource& w, const float* x, int n, bool train) override {
    x_ = x;
    conv_fwd(stem_, w, x, n, stem_out_.get());
    bn_fwd(stem_bn_, w, stem_out_.get(), n, train, stem_act_.get());
    dev_.relu_forward(stem_act_.get(), stem_act_.get(), stem_bn_.shape(n).size());
    const float* h = stem_act_.get();
    for (auto& b : blocks_) {
      b->x = h;
      size_t act = size_t(n) * b->c1.cout * b->hout * b->hout;
      conv_fwd(b->c1, w, h, n, b->c1out.get());
      bn_fwd(b->bn1, w, b->c1out.get(), n, train, b->r1.get());
      dev_.relu_forward(b->r1.get(), b->r1.get(), act);
      conv_fwd(b->c2, w, b->r1.get(), n, b->c2out.get());
      bn_fwd(b->bn2, w, b->c2out.get(), n, train, b->out.get());
      if (b->c3.w >= 0) {
        conv_fwd(b->c3, w, h, n, b->s.get());
        dev_.axpy(1.0f, b->s.get(), b->out.get(), act);
      } else {
        dev_.axpy(1.0f, h, b->out.get(), act);
      }
      dev_.relu_forward(b->out.get(), b->out.get(), act);
      h = b->out.get();
    }
    dev_.gap_forward(n, 512, final_h_ * final_h_, h, gap_.get());
    dev_.dense_forward(n, 512, 10, gap_.get(), P(w, fcw_), P(w, fcb_), logits_.get());
    return logits_.get();
  }

  void backward_impl(ParamSource& w, const float* dlogits, int n,
                     const std::function<void(int)>& ready) override {
    dev_.dense_backward(n, 512, 10, gap_.get(), P(w, fcw_), dlogits, dgap_.get(), G(w, fcw_),
                        G(w, fcb_));
    ready(fcb_), ready(fcw_);
    float* A = scratch_[0].get();
    float* B = scratch_[1].get();
    float* C = scratch_[2].get();
    float* D = scratch_[3].get();
    dev_.gap_backward(n, 512, final_h_ * final_h_, dgap_.get(), A);
    for (int i = int(blocks_.size()) - 1; i >= 0; --i) {
      Block& b = *blocks_[i];
      size_t act = size_t(n) * b.c1.cout * b.hout * b.hout;
      dev_.relu_backward(b.out.get(), A, A, act);  // A: gradient at the sum Y + shortcut
      if (b.c3.w >= 0) {
        conv_bwd(b.c3, w, b.x, A, D, n);
        ready(b.c3.b), ready(b.c3.w);
      }
      bn_bwd(b.bn2, w, b.c2out.get(), A, C, n);
      ready(b.bn2.beta), ready(b.bn2.gamma);
      conv_bwd(b.c2, w, b.r1.get(), C, B, n);
      ready(b.c2.b), ready(b.c2.w);
      dev_.relu_backward(b.r1.get(), B, B, act);
      bn_bwd(b.bn1, w, b.c1out.get(), B, C, n);
      ready(b.bn1.beta), ready(b.bn1.gamma);
      conv_bwd(b.c1, w, b.x, C, B, n);
      ready(b.c1.b), ready(b.c1.w);
      size_t in = size_t(n) * b.c1.cin * b.hin * b.hin;
      dev_.axpy(1.0f, b.c3.w >= 0 ? D : A, B, in);  // shortcut gradient
      std::swap(A, B);
    }
    dev_.relu_backward(stem_act_.get(), A, A, stem_bn_.shape(n).size());
    bn_bwd(stem_bn_, w, stem_out_.get(), A, B, n);
    ready(stem_bn_.beta), ready(stem_bn_.gamma);
    dev_.conv2d_backward(stem_.shape(n), x_, P(w, stem_.w), B, nullptr, G(w, stem_.w),
                         G(w, stem_.b));
    ready(stem_.b), ready(stem_.w);
  }

 private:
  Conv conv(const std::string& name, int cin, int cout, int k, int pad, int stride, int h) {
    Conv c;
    c.w = table_.add(name + ".weight", {cout, cin, k, k}, Init::Normal001);
    c.b = table_.add(name + ".bias", {cout}, Init::Zero);
    c.cin = cin, c.cout = cout, c.k = k, c.pad = pad, c.stride = stride, c.h = h;
    return c;
  }
  BatchNorm bn(const std::string& name, int c, int hw) {
    BatchNorm b;
    b.gamma = table_.add(name + ".weight", {c}, Init::One);
    b.beta = table_.add(name + ".bias", {c}, Init::Zero);
    b.c = c, b.hw = hw;
    b.rmean = Buffer(dev_, c, MemCategory::Parameters, "batchnorm running mean");
    b.rvar = Buffer(dev_, c, MemCategory::Parameters, "batchnorm running var");
    dev_.fill(b.rvar.get(), 1.0f, c);
    b.smean = Buffer(dev_, c, MemCategory::Activations, "batchnorm saved mean");
    b.sinv = Buffer(dev_, c, MemCategory::Activations, "batchnorm saved inverse std");
    return b;
  }
  void conv_fwd(const Conv& c, ParamSource& w, const float* x, int n, float* y) {
    dev_.conv2d_forward(c.shape(n), x, P(w, c.w), P(w, c.b), y);
  }
  void conv_bwd(const Conv& c, ParamSource& w, const float* x, const float* dy, float* dx,
                int n) {
    dev_.conv2d_backward(c.shape(n), x, P(w, c.w), dy, dx, G(w, c.w), G(w, c.b));
  }
  void bn_fwd(BatchNorm& b, ParamSource& w, const float* x, int n, bool train, float* y) {
    if (train)
      dev_.batchnorm_forward_train(b.shape(n), x, P(w, b.gamma), P(w, b.beta), y, b.rmean.get(),
                                   b.rvar.get(), b.smean.get(), b.sinv.get());
    else
      dev_.batchnorm_forward_infer(b.shape(n), x, P(w, b.gamma), P(w, b.beta), b.rmean.get(),
                                   b.rvar.get(), y);
  }
  void bn_bwd(BatchNorm& b, ParamSource& w, const float* x, const float* dy, float* dx,
              int n) {
    dev_.batchnorm_backward(b.shape(n), x, dy, P(w, b.gamma), b.smean.get(), b.sinv.get(), dx,
                            G(w, b.gamma), G(w, b.beta));
  }

  Conv stem_;
  BatchNorm stem_bn_;
  std::vector<std::unique_ptr<Block>> blocks_;
  int final_h_ = 4, fcw_ = -1, fcb_ = -1;
  const float* x_ = nullptr;
  Buffer stem_out_, stem_act_, scratch_[4], gap_, logits_, dgap_;
};

}  // namespace

std::unique_ptr<Model> make_resnet18(Device& dev, int max_batch, const ModelOptions&) {
  return std::make_unique<ResNet18>(dev, max_batch);
}

}  // namespace dpb
