// loss.cpp: the loss table (see loss.h): softmax cross-entropy on logits (d2l's LeNet and
// ResNet-18 recipes) and the sharding notebook's mean squared error against one-hot labels
// (jnp.mean((y_pred - y)**2) per example), each one Device op.
#include "src/train/loss.h"

#include "src/core/registry.h"

namespace dpb {

const std::vector<LossEntry>& losses() {
  static const std::vector<LossEntry> table = {
      {"xent", "softmax cross-entropy on the logits",
       [](Device& d, int n, int classes, const float* out, const float* labels, float scale,
          float* dout, float* stats) {
         d.softmax_xent(n, classes, out, labels, scale, dout, stats);
       }},
      {"mse", "mean over the outputs of (output - onehot(label))^2 (the sharding notebook's)",
       [](Device& d, int n, int classes, const float* out, const float* labels, float scale,
          float* dout, float* stats) {
         d.mse_loss(n, classes, out, labels, scale, dout, stats);
       }},
  };
  return table;
}

const LossEntry& find_loss(const std::string& name) {
  return lookup_entry(losses(), name, "--loss", "loss");
}

}  // namespace dpb
