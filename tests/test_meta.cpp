// test_meta.cpp: training on the planning backend (`--backend meta`, kernels/meta; its device call
// by call: tests/test_meta_device.cpp). A run on meta has the CPU run's peak per rank within 1%,
// category by category (LeNet and the MLP with SGD and Adam at k = 1, 2, 3; ResNet-18 with SGD at
// k = 1, 2, 3 and Adam at k = 2); a plan far larger than
// this machine (ResNet-18 at batch 2048, a peak over 10 GB) finishes in seconds without touching
// memory (the process's peak RSS stays small); the CSV leaves what meta does not measure empty.
// Run: dpb_tests --gtest_filter='MetaTrain*'
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kernels/backends.h"
#include "src/data/dataset.h"
#include "src/data/synthetic.h"
#include "src/model/model.h"
#include "src/train/train_csv.h"
#include "src/train/trainer.h"

namespace dpb {
namespace {

bool have_data() { return std::filesystem::exists(resolve_data_dir("")); }

// The same sizes of every category, and the total, within 1% of the CPU's total.
void expect_same_usage(const MemoryUsage& meta, const MemoryUsage& cpu, const std::string& what) {
  const double tol = 0.01 * double(cpu.total());
  EXPECT_NEAR(double(meta.total()), double(cpu.total()), tol) << what;
  for (MemCategory c : kMemCategoryList)
    EXPECT_NEAR(double(meta[c]), double(cpu[c]), tol) << what << ": " << mem_category_name(c);
}

// ---- training runs: meta's peak is the CPU's ----

TrainConfig config(const std::string& backend, const std::string& model, int k, int batch) {
  TrainConfig cfg;
  cfg.backend = backend;
  cfg.model = model;
  cfg.devices = k;
  cfg.batch = batch;
  cfg.lr = 0.05;
  cfg.epochs = 1;
  cfg.progress = false;
  cfg.allreduce = "ring";
  cfg.sync.mode = k == 2 ? SyncMode::Bucketed : SyncMode::Fused;
  cfg.sync.overlap = k == 2;
  cfg.sync.bucket_mb = 0.5;
  return cfg;
}

void expect_meta_matches_cpu(TrainConfig cfg, const Dataset& data) {
  cfg.backend = "cpu";
  const TrainResult cpu = train(cfg, data);
  cfg.backend = "meta";
  const TrainResult meta = train(cfg, data);
  ASSERT_EQ(meta.peak_mem.size(), cpu.peak_mem.size());
  for (size_t r = 0; r < cpu.peak_mem.size(); ++r) {
    const std::string what = cfg.model + " " + cfg.optimizer + " " + cfg.loss + " k=" +
                             std::to_string(cfg.devices) + " rank " + std::to_string(r);
    expect_same_usage(meta.peak_mem[r], cpu.peak_mem[r], what);
    std::printf("  %-34s cpu %10.3f MiB  meta %10.3f MiB\n", what.c_str(),
                cpu.peak_mem[r].total() / 1048576.0, meta.peak_mem[r].total() / 1048576.0);
  }
  ASSERT_EQ(meta.epochs.size(), cpu.epochs.size());
  expect_same_usage(meta.epochs.back().peak_mem, cpu.epochs.back().peak_mem, "epoch peak");
}

TrainConfig with_optimizer(TrainConfig cfg, const std::string& optimizer) {
  cfg.optimizer = optimizer;
  cfg.lr = optimizer == "adam" ? 1e-3 : 0.05;
  return cfg;
}

TEST(MetaTrain, PeakMatchesCpuLenet) {
  if (!have_data()) GTEST_SKIP() << "Fashion-MNIST not installed";
  const Dataset data = load_fashion_mnist(resolve_data_dir(""), 96, 40);
  for (const char* opt : {"sgd", "adam"})
    for (int k : {1, 2, 3})
      expect_meta_matches_cpu(with_optimizer(config("cpu", "lenet", k, 32), opt), data);
}

// ResNet-18's CPU runs are seconds each (oneDNN makes every layer's primitives): SGD at every k,
// Adam at k = 2 (its state is the same on every k: LeNet and the MLP cover them all).
TEST(MetaTrain, PeakMatchesCpuResnet18) {
  if (!have_data()) GTEST_SKIP() << "Fashion-MNIST not installed";
  const Dataset data = load_fashion_mnist(resolve_data_dir(""), 12, 6);  // one step
  for (int k : {1, 2, 3}) expect_meta_matches_cpu(config("cpu", "resnet18", k, 12), data);
  expect_meta_matches_cpu(with_optimizer(config("cpu", "resnet18", 2, 12), "adam"), data);
}

// The sharding notebook's model, small: 3 x 96 on 40 synthetic features; SGD with softmax
// cross-entropy and the notebook's Adam with MSE.
TEST(MetaTrain, PeakMatchesCpuMlp) {
  const Dataset data = synthetic_dataset(40, 90, 30);
  for (const char* opt : {"sgd", "adam"})
    for (int k : {1, 2, 3}) {
      TrainConfig cfg = with_optimizer(config("cpu", "mlp", k, 30), opt);
      cfg.model_opts = ModelOptions{3, 96, 40};
      cfg.data = "synthetic";
      cfg.loss = std::string(opt) == "adam" ? "mse" : "xent";
      expect_meta_matches_cpu(cfg, data);
    }
}

// ---- a plan larger than the machine ----

size_t status_kib(const char* field) {  // a "VmRSS:" / "VmHWM:" line of /proc/self/status
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(field, 0) == 0) return std::stoul(line.substr(std::string(field).size()));
  return 0;
}

TEST(MetaTrain, LargePlanTouchesNoMemory) {
  if (!have_data()) GTEST_SKIP() << "Fashion-MNIST not installed";
  const Dataset data = load_fashion_mnist(resolve_data_dir(""), 2048, 64);
  TrainConfig cfg = config("meta", "resnet18", 1, 2048);
  const size_t rss_before = status_kib("VmRSS:");
  {
    std::ofstream reset("/proc/self/clear_refs");  // resets VmHWM to the current RSS
    reset << "5";
  }
  const auto t0 = std::chrono::steady_clock::now();
  const TrainResult res = train(cfg, data);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const size_t hwm = status_kib("VmHWM:");
  const double peak_gib = res.peak_mem[0].total() / double(1 << 30);
  std::printf("  resnet18 batch 2048 on meta: peak %.2f GiB (%s), %.2f s, process peak RSS "
              "%.0f MiB (%.0f MiB before)\n",
              peak_gib, res.peak_mem[0].breakdown().c_str(), secs, hwm / 1024.0,
              rss_before / 1024.0);
  EXPECT_GT(double(res.peak_mem[0].total()), 10e9);  // 10 GB
  EXPECT_LT(secs, 30.0);
  if (hwm > 0 && rss_before > 0)  // the host memory the run used: far below the plan
    EXPECT_LT(double(hwm) - double(rss_before), 512.0 * 1024) << "KiB";
}

// ---- what the CSV and the table say ----

TEST(MetaTrain, CsvLeavesUnmeasuredColumnsEmpty) {
  if (!have_data()) GTEST_SKIP() << "Fashion-MNIST not installed";
  const Dataset data = load_fashion_mnist(resolve_data_dir(""), 64, 16);
  TrainConfig cfg = config("meta", "lenet", 2, 32);
  const TrainResult res = train(cfg, data);
  ASSERT_EQ(res.epochs.size(), 1u);
  const TrainCsvRun run{cfg, data.train.n, data.test.n, true, false, res.allreduce_resolved};
  const std::string row = train_csv_row(run, res.epochs[0]);
  std::vector<std::string> cells;
  size_t pos = 0;
  for (size_t c; (c = row.find(',', pos)) != std::string::npos; pos = c + 1)
    cells.push_back(row.substr(pos, c - pos));
  cells.push_back(row.substr(pos));
  const auto& cols = train_csv_columns();
  ASSERT_EQ(cells.size(), cols.size());
  for (size_t i = 0; i < cols.size(); ++i) {
    const std::string name = cols[i].name;
    const bool unmeasured =
        name == "train_loss" || name == "train_acc" || name == "test_acc" ||
        name == "epoch_s" || name == "images_per_s" || name == "data_s" || name == "compute_s" ||
        name == "comm_s" || name == "exposed_comm_s" || name == "replicas_in_sync" ||
        name == "max_replica_diff" || name == "diverged" || name == "stalled_s";
    // The per-rank breakdown's figures are times (none planned), and nothing was injected.
    auto ends = [&](const std::string& suffix) {
      return name.size() > suffix.size() &&
             name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    const bool breakdown = ends("_min_s") || ends("_avg_s") || ends("_max_s") ||
                           name.rfind("step_p", 0) == 0 || name.rfind("straggler_", 0) == 0 ||
                           name == "inject";
    const bool mlp_only = name.rfind("mlp_", 0) == 0;  // the MLP's shape: empty for LeNet
    if (name == "busy") continue;  // the machine's verdict: empty when it was quiet
    if (unmeasured || mlp_only || breakdown)
      EXPECT_EQ(cells[i], "") << name;
    else
      EXPECT_NE(cells[i], "") << name;
    if (name == "peak_mem_bytes") EXPECT_EQ(cells[i], std::to_string(res.peak_mem[0].total()));
  }
  EXPECT_TRUE(res.final_params.empty());  // nothing computed, nothing copied to the host
}

TEST(MetaTrain, TableEntryRunsNoMathAndProcessesAreRefused) {
  const BackendEntry& m = find_backend("meta");
  EXPECT_FALSE(m.runs_math);
  EXPECT_EQ(m.kind, BackendKind::Meta);
  EXPECT_TRUE(find_backend("cpu").runs_math);
  TrainConfig cfg = config("meta", "lenet", 2, 32);
  cfg.procs = {2, 0, 0, 2};
  Dataset d;
  d.train.n = 64;
  d.test.n = 8;
  try {
    validate(cfg, d);
    FAIL() << "meta under mpirun was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("without mpirun"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dpb
