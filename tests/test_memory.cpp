// test_memory.cpp: device memory accounting (src/core/memory.h). The ledger's counts, peak and
// breakdown, its capacity (an allocation past it throws OutOfMemory with the one message, and
// nothing is charged), sizes as --device-mem takes them; the CSV's memory columns follow the
// categories; and a training run's allocations all go through the ledger: on every CPU device,
// after steps and evaluation, the ledger's total equals the bytes the backend holds from the heap
// (buffers and oneDNN workspaces, counted apart), and the parameters, gradients and data
// categories hold exactly what the step allocates for them.
// Run: dpb_tests --gtest_filter='Memory*'
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/backends.h"
#include "kernels/cpu/cpu_device.h"
#include "src/data/dataset.h"
#include "src/model/model.h"
#include "src/train/train_csv.h"
#include "src/train/trainer.h"

namespace dpb {
namespace {

TEST(MemoryLedger, CountsPeakAndBreakdownAtThePeak) {
  MemoryLedger l("dev:0");
  int a = 0, b = 0, c = 0;
  l.add(&a, 100, MemCategory::Parameters, "w");
  l.add(&b, 300, MemCategory::Activations, "act");
  l.reserve(50, MemCategory::Workspace, "ws");
  EXPECT_EQ(l.current().total(), 450u);
  EXPECT_TRUE(l.release(&b));
  EXPECT_FALSE(l.release(&b));  // not tracked any more: nothing changes
  l.add(&c, 200, MemCategory::Gradients, "g");
  EXPECT_EQ(l.current().total(), 350u);
  const MemoryUsage p = l.peak();  // the peak was 450, with the activations in it
  EXPECT_EQ(p.total(), 450u);
  EXPECT_EQ(p[MemCategory::Activations], 300u);
  EXPECT_EQ(p[MemCategory::Gradients], 0u);
  EXPECT_EQ(l.tracked(), 2u);
  l.unreserve(50, MemCategory::Workspace);
  l.unreserve(1000, MemCategory::Workspace);  // never below zero
  EXPECT_EQ(l.current()[MemCategory::Workspace], 0u);
  EXPECT_EQ(MemoryUsage().breakdown(), "nothing");
  EXPECT_EQ(p.breakdown(), "parameters 100 B, activations 300 B, workspace 50 B");
}

TEST(MemoryLedger, CapacityRefusesWithOneMessageAndChargesNothing) {
  MemoryLedger l("cpu:3");
  l.set_capacity(1000);
  int a = 0;
  l.add(&a, 600, MemCategory::Parameters, "parameters");
  try {
    l.reserve(401, MemCategory::Activations, "conv1 output");
    FAIL() << "no OutOfMemory past the capacity";
  } catch (const OutOfMemory& e) {
    const std::string m = e.what();
    for (const char* needle : {"out of memory on cpu:3", "conv1 output", "activations", "401 bytes",
                               "600 B in use (parameters 600 B)", "capacity of 1000 B"})
      EXPECT_NE(m.find(needle), std::string::npos) << needle << " not in: " << m;
    EXPECT_EQ(e.bytes(), 401u);
    EXPECT_EQ(e.capacity(), 1000u);
  }
  EXPECT_EQ(l.current().total(), 600u);
  l.reserve(400, MemCategory::Activations, "fits exactly");
  EXPECT_EQ(l.peak().total(), 1000u);
  // A device's own refusal (cudaErrorMemoryAllocation) is an OutOfMemory too, naming the cause.
  EXPECT_THROW(l.fail(400, MemCategory::Activations, "x", "out of memory (cuda)"), OutOfMemory);
  EXPECT_EQ(l.current().total(), 600u);
}

TEST(MemorySize, ParsesDeviceMemSizes) {
  size_t b = 0;
  ASSERT_TRUE(parse_bytes("24GiB", b));
  EXPECT_EQ(b, size_t(24) << 30);
  ASSERT_TRUE(parse_bytes("80GB", b));
  EXPECT_EQ(b, size_t(80) * 1000 * 1000 * 1000);
  ASSERT_TRUE(parse_bytes("512mib", b));
  EXPECT_EQ(b, size_t(512) << 20);
  ASSERT_TRUE(parse_bytes("1.5KiB", b));
  EXPECT_EQ(b, 1536u);
  ASSERT_TRUE(parse_bytes("12345", b));
  EXPECT_EQ(b, 12345u);
  for (const char* bad : {"", "0", "-1GB", "12parsecs", "GB", "1e30", "nan"})
    EXPECT_FALSE(parse_bytes(bad, b)) << bad;
  EXPECT_EQ(format_mem_bytes(512), "512 B");
  EXPECT_EQ(format_mem_bytes(size_t(24) << 30), "24 GiB");
}

TEST(MemoryCsv, OneColumnPerCategoryAtThePeak) {
  std::vector<std::string> names;
  for (const CsvColumn& c : train_csv_columns()) names.push_back(c.name);
  EXPECT_NE(std::find(names.begin(), names.end(), "peak_mem_bytes"), names.end());
  EpochStats st;
  for (int i = 0; i < kMemCategories; ++i) st.peak_mem.bytes[i] = size_t(i + 1) * 1000;
  const TrainConfig cfg;
  const TrainCsvRun run{cfg, 1, 1, false, false, "ring"};
  for (MemCategory c : kMemCategoryList) {
    const std::string name = std::string("peak_mem_") + mem_category_name(c) + "_bytes";
    auto it = std::find(names.begin(), names.end(), name);
    ASSERT_NE(it, names.end()) << name;
    EXPECT_EQ(train_csv_columns()[it - names.begin()].format(run, st),
              std::to_string(st.peak_mem[c]));
  }
}

TEST(MemoryDevice, AsyncCountsInItsCpuLedgerAndWrappersForward) {
  auto dev = make_device("async", 0, DeviceOptions{1});
  {
    Buffer b(*dev, 1000, MemCategory::Gradients, "g");
    EXPECT_EQ(dev->memory().current()[MemCategory::Gradients], 4032u);  // 64-byte multiple
  }
  EXPECT_EQ(dev->memory().current().total(), 0u);
  dev->memory().set_capacity(4096);
  try {
    Buffer b(*dev, 2000, MemCategory::Activations, "too big");
    FAIL() << "no OutOfMemory";
  } catch (const OutOfMemory& e) {
    EXPECT_NE(std::string(e.what()).find("async:0"), std::string::npos) << e.what();
  }
}

bool have_data() { return std::filesystem::exists(resolve_data_dir("")); }

size_t round64(size_t floats) { return (floats * sizeof(float) + 63) / 64 * 64; }

// Every byte a training run holds on a CPU device is in the ledger; the categories the step
// names hold what it allocated for them.
void expect_all_accounted(const std::string& model, int k, int batch) {
  static const Dataset data = load_fashion_mnist(resolve_data_dir(""), 64, 16);
  std::mutex mu;
  std::vector<CpuDevice*> cpus(k);
  TrainConfig cfg;
  cfg.model = model, cfg.devices = k, cfg.batch = batch, cfg.epochs = 2, cfg.progress = false;
  int checked = 0;
  const DeviceFactory make = [&](int r, int threads) {
    auto d = make_cpu_device(r, threads);
    std::lock_guard<std::mutex> lk(mu);
    cpus[r] = dynamic_cast<CpuDevice*>(d.get());
    return d;
  };
  size_t P = 0;
  for (const ParamInfo& p : model_param_layout(model, ModelOptions{})) P += p.size;
  const int shard = (batch + k - 1) / k;
  const TrainResult res = train(cfg, data, [&](const EpochStats& st, const TrainResult&) {
    for (int r = 0; r < k; ++r) {  // the other ranks wait at the end of the epoch
      const MemoryUsage cur = cpus[r]->memory().current();
      EXPECT_EQ(cur.total(), cpus[r]->heap_bytes()) << model << " rank " << r << ": " << cur.breakdown();
      EXPECT_EQ(cur[MemCategory::Gradients], round64(P)) << model;
      EXPECT_EQ(cur[MemCategory::Parameters] >= round64(P), true) << model;
      const size_t mb = r == 0 ? std::max(shard, 64) : shard;  // rank 0 also evaluates
      EXPECT_EQ(cur[MemCategory::Data], round64(mb * 784) + round64(mb)) << model << " rank " << r;
      EXPECT_GT(cur[MemCategory::Activations], 0u);
      EXPECT_GT(cur[MemCategory::Workspace], 0u);  // oneDNN's conv copies and scratchpad
    }
    EXPECT_GE(st.peak_mem.total(), cpus[0]->memory().current().total());
    ++checked;
  }, make);
  EXPECT_EQ(checked, 2);
  ASSERT_EQ(res.peak_mem.size(), size_t(k));
  EXPECT_GE(res.peak_mem[0].total(), res.peak_mem[k - 1].total());
}

TEST(MemoryTrain, EveryAllocationOfAStepIsInTheLedgerLenet) {
  if (!have_data()) GTEST_SKIP() << "Fashion-MNIST not installed";
  expect_all_accounted("lenet", 1, 32);
  expect_all_accounted("lenet", 2, 64);
}

TEST(MemoryTrain, EveryAllocationOfAStepIsInTheLedgerResnet18) {
  if (!have_data()) GTEST_SKIP() << "Fashion-MNIST not installed";
  expect_all_accounted("resnet18", 2, 8);
}

}  // namespace
}  // namespace dpb
