// shard_test_util.h: helpers the --shard tests share (test_shard.cpp, test_shard_models.cpp):
// random MLP input, a run's --shard flags in words, the four shard modes.
#pragma once
#include <cstdint>
#include <string>

#include "src/data/dataset.h"
#include "src/model/model.h"
#include "src/train/shard.h"
#include "src/train/trainer.h"

namespace dpb {

// n examples of `features` random bytes and random labels (the MLP's input; deterministic).
inline Split random_split(int n, int features, uint64_t seed) {
  Split s;
  s.n = n, s.rows = 1, s.cols = features;
  s.images.resize(size_t(n) * size_t(features));
  s.labels.resize(size_t(n));
  for (uint8_t& b : s.images) b = uint8_t(splitmix64(seed) >> 56);
  for (uint8_t& l : s.labels) l = uint8_t(splitmix64(seed) % 10);
  return s;
}

inline std::string describe(const TrainConfig& c) {
  return "--shard " + to_string(c.shard) + " --optimizer " + c.optimizer + " --devices " +
         std::to_string(c.devices) + " --grad-sync " + to_string(c.sync.mode) + " --overlap " +
         (c.sync.overlap ? "on" : "off") + " --backend " + c.backend + " --model " + c.model;
}

const ShardMode kModes[] = {ShardMode::None, ShardMode::Optimizer, ShardMode::Gradients,
                            ShardMode::Parameters};

}  // namespace dpb
