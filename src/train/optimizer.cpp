// optimizer.cpp: the optimizer table (see optimizer.h): SGD without momentum (no state) and Adam
// with optax's defaults (b1 0.9, b2 0.999, eps 1e-8; bias-corrected, eps outside the square root,
// as torch.optim.Adam: tests/test_optimizer_loss.cpp and tests/adam_torch_test.py check it).
#include "src/train/optimizer.h"

#include "src/core/registry.h"

namespace dpb {
namespace {

class Sgd final : public Optimizer {
 public:
  Sgd(Device& dev, size_t n) : dev_(dev), n_(n) {}
  void step(float* w, const float* g, float lr) override { dev_.sgd_step(w, g, lr, n_); }

 private:
  Device& dev_;
  size_t n_;
};

class Adam final : public Optimizer {
 public:
  Adam(Device& dev, size_t n)
      : dev_(dev), n_(n), m_(dev, n, MemCategory::OptimizerState, "Adam first moment (m)"),
        v_(dev, n, MemCategory::OptimizerState, "Adam second moment (v)") {}
  void step(float* w, const float* g, float lr) override {
    s_.lr = lr;
    ++s_.t;  // 1-based: the bias corrections of step t
    dev_.adam_step(w, g, m_.get(), v_.get(), n_, s_);
  }

 private:
  Device& dev_;
  size_t n_;
  Buffer m_, v_;  // zero-filled by alloc: the moments before step 1
  AdamStep s_{.t = 0};  // optax's b1, b2, eps (AdamStep's defaults)
};

template <class O>
std::unique_ptr<Optimizer> make(Device& dev, size_t n) {
  return std::make_unique<O>(dev, n);
}

}  // namespace

const std::vector<OptimizerEntry>& optimizers() {
  static const std::vector<OptimizerEntry> table = {
      {"sgd", "SGD without momentum: w -= lr * g (no state)", 0, make<Sgd>},
      {"adam",
       "Adam, optax's defaults b1 0.9, b2 0.999, eps 1e-8, bias-corrected (as torch.optim.Adam); "
       "m and v: 2 floats of state per parameter",
       2, make<Adam>},
  };
  return table;
}

const OptimizerEntry& find_optimizer(const std::string& name) {
  return lookup_entry(optimizers(), name, "--optimizer", "optimizer");
}

}  // namespace dpb
