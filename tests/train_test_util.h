// train_test_util.h: the small training configuration the trainer tests share (test_train.cpp,
// test_async_train.cpp): LeNet, global batch 50 (not divisible by 3, 4 or 8, so the last step's
// split is uneven), lr 0.2, one epoch, 0.05 MB buckets (several even for LeNet), seed 7, one math
// thread per rank, no progress output.
#pragma once
#include <string>

#include "src/train/trainer.h"

namespace dpb_test {

inline dpb::TrainConfig small_train_config(const std::string& backend, int k, const std::string& ar,
                                           dpb::SyncMode mode, bool overlap,
                                           const std::string& model = "lenet") {
  dpb::TrainConfig c;
  c.model = model;
  c.backend = backend;
  c.devices = k;
  c.batch = 50;
  c.lr = 0.2;
  c.epochs = 1;
  c.allreduce = ar;
  c.sync.mode = mode;
  c.sync.overlap = overlap;
  c.sync.bucket_mb = 0.05;
  c.seed = 7;
  c.threads = 1;
  c.progress = false;
  return c;
}

}  // namespace dpb_test
