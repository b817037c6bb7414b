// test_data_timer.cpp: what data_s times. load_examples gathers a batch on the
// host and loads it onto the device; data_s is the compute stream's loading time, so the data
// timer must begin after the host's gather: on CUDA, a timer event recorded before it on an idle
// GPU counts the host's work as the stream's. A probe timer checks, at begin(), that the host
// batch already holds the gathered examples, and at end(), that the device holds them.
#include <gtest/gtest.h>

#include <algorithm>

#include "kernels/backends.h"
#include "src/train/step.h"

namespace dpb {
namespace {

// Records whether the host staging held the expected batch when the timer began, and whether the
// device batch did when it ended.
class ProbeTimer : public StreamTimer {
 public:
  ProbeTimer(const Replica& rep, std::vector<uint8_t> expect)
      : rep_(rep), expect_(std::move(expect)) {}
  void begin() override {
    ++begins;
    gathered_at_begin = std::equal(expect_.begin(), expect_.end(), rep_.host_x.begin());
  }
  void end() override {
    ++ends;
    std::vector<float> x(expect_.size());
    rep_.dev->download(x.data(), rep_.x.get(), x.size());
    loaded_at_end = true;
    for (size_t i = 0; i < x.size(); ++i)
      loaded_at_end = loaded_at_end && x[i] == float(expect_[i]) / 255.0f;
  }
  double seconds() override { return 0; }
  void reset() override {}
  int begins = 0, ends = 0;
  bool gathered_at_begin = false, loaded_at_end = false;

 private:
  const Replica& rep_;
  std::vector<uint8_t> expect_;
};

TEST(DataTimer, BeginsAfterTheHostGather) {
  Split split;
  split.n = 6;
  split.images.resize(size_t(split.n) * kPixels);
  for (size_t i = 0; i < split.images.size(); ++i) split.images[i] = uint8_t(i * 7 % 251 + 1);
  split.labels = {0, 1, 2, 3, 4, 5};
  const std::vector<int> idx = {4, 1, 5};  // out of order: a gather, not a prefix
  std::vector<uint8_t> expect;
  for (int i : idx)
    expect.insert(expect.end(), split.images.begin() + size_t(i) * kPixels,
                  split.images.begin() + size_t(i + 1) * kPixels);

  RankSet ranks(make_devices("cpu", 1, 1, false), "ring");
  Replica rep = make_replica(ranks[0], *ranks.group, "lenet", ModelOptions{}, int(idx.size()), GradSyncConfig{},
                             *ranks.allreduce);
  auto probe = std::make_unique<ProbeTimer>(rep, expect);
  ProbeTimer* p = probe.get();
  rep.data_timer = std::move(probe);
  load_examples(rep, split, idx.data(), int(idx.size()));
  EXPECT_EQ(p->begins, 1);
  EXPECT_EQ(p->ends, 1);
  EXPECT_TRUE(p->gathered_at_begin) << "the data timer began before the host gathered the batch";
  EXPECT_TRUE(p->loaded_at_end) << "the data timer ended before the batch was on the device";
}

}  // namespace
}  // namespace dpb
