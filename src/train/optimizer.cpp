// optimizer.cpp: the optimizer table (see optimizer.h): SGD without momentum (no state) and Adam
// with optax's defaults (b1 0.9, b2 0.999, eps 1e-8; bias-corrected, eps outside the square root,
// as torch.optim.Adam: tests/test_optimizer_loss.cpp and tests/adam_torch_test.py check it).
#include "src/train/optimizer.h"

#include "src/core/check.h"
#include "src/core/registry.h"

namespace dpb {
namespace {

// The segments' lengths add up to the optimizer's size (its state lies in their order).
void check_segments(std::span<const OptSegment> segments, size_t n) {
  size_t total = 0;
  for (const OptSegment& s : segments) total += s.n;
  DPB_CHECK(total == n, "optimizer of " << n << " parameters given segments of " << total);
}

class Sgd final : public Optimizer {
 public:
  Sgd(Device& dev, size_t n) : Optimizer(n), dev_(dev) {}
  void step(std::span<const OptSegment> segments, float lr) override {
    check_segments(segments, n_);
    for (const OptSegment& s : segments) dev_.sgd_step(s.w, s.g, lr, s.n);
  }

 private:
  Device& dev_;
};

class Adam final : public Optimizer {
 public:
  Adam(Device& dev, size_t n)
      : Optimizer(n), dev_(dev), m_(dev, n, MemCategory::OptimizerState, "Adam first moment (m)"),
        v_(dev, n, MemCategory::OptimizerState, "Adam second moment (v)") {}
  void step(std::span<const OptSegment> segments, float lr) override {
    check_segments(segments, n_);
    s_.lr = lr;
    ++s_.t;  // 1-based: the bias corrections of step t
    size_t at = 0;  // the segment's state
    for (const OptSegment& seg : segments) {
      dev_.adam_step(seg.w, seg.g, m_.get() + at, v_.get() + at, seg.n, s_);
      at += seg.n;
    }
  }

 private:
  Device& dev_;
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
