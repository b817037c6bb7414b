// optimizer.h: the table of optimizers (--optimizer). Each entry makes the per-replica optimizer
// over a Device; the optimizer allocates its state there (MemCategory::OptimizerState, so the
// memory ledger and the planner see it) and updates the flat parameter buffer from the summed
// gradients with the Device's ops (sgd_step, adam_step), on the compute stream. Every replica
// takes the same steps from the same gradients, so the replicas stay in sync.
//   const OptimizerEntry& e = find_optimizer("adam");
//   std::unique_ptr<Optimizer> opt = e.make(dev, num_params);
//   opt->step(w, g, lr);  // once per training step
// Adding an optimizer: a Device op if it needs one (kernels/), one Optimizer subclass and one
// entry in optimizer.cpp.
#pragma once
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "src/core/device.h"

namespace dpb {

// A run of parameters and their gradients: the sharded modes update a rank's chunk of every unit
// (src/train/shard.h), the optimizer's state holding the segments one after the other.
struct OptSegment {
  float* w;
  const float* g;
  size_t n;
};

class Optimizer {
 public:
  explicit Optimizer(size_t n) : n_(n) {}
  virtual ~Optimizer() = default;
  size_t size() const { return n_; }  // parameters it updates (and holds state for)
  // One update at learning rate lr of the optimizer's n parameters, given as segments whose
  // lengths add up to n (one step: Adam's step count advances once).
  virtual void step(std::span<const OptSegment> segments, float lr) = 0;
  // The n parameters w from their gradient g: one segment.
  void step(float* w, const float* g, float lr) {
    const OptSegment all{w, g, n_};
    step(std::span<const OptSegment>(&all, 1), lr);
  }

 protected:
  size_t n_;
};

struct OptimizerEntry {
  std::string name;  // --optimizer value
  std::string help;  // one line for --help
  // Floats of optimizer state per parameter (Adam: 2, its moments m and v).
  int state_floats = 0;
  // The optimizer of n parameters on dev, its state allocated there and zero.
  std::unique_ptr<Optimizer> (*make)(Device& dev, size_t n);
};

const std::vector<OptimizerEntry>& optimizers();
// The entry called name; throws dpb::Error "--optimizer: unknown optimizer 'x' (valid: ...)".
const OptimizerEntry& find_optimizer(const std::string& name);

}  // namespace dpb
