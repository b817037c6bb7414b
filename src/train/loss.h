// loss.h: the table of losses (--loss). Each entry applies one Device op to the model's outputs
// (n, classes) and float class-id labels: stats[0] += scale * the sum of the examples' losses,
// stats[1] += correct argmax predictions, and, when dout is not null (training), the gradient of
// scale * that sum with respect to the outputs. The step (src/train/step.cpp) calls it with
// scale = 1 / global batch, so k ranks compute the same update as one; evaluation with dout null.
// Adding a loss: its Device op (kernels/, with its CPU, async and CUDA twins and conformance
// cases) and one entry in loss.cpp.
#pragma once
#include <string>
#include <vector>

#include "src/core/device.h"

namespace dpb {

struct LossEntry {
  std::string name;  // --loss value
  std::string help;  // one line for --help
  void (*apply)(Device& dev, int n, int classes, const float* out, const float* labels,
                float scale, float* dout, float* stats);
};

const std::vector<LossEntry>& losses();
// The entry called name; throws dpb::Error "--loss: unknown loss 'x' (valid: ...)".
const LossEntry& find_loss(const std::string& name);

}  // namespace dpb
