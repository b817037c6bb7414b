// test_run_options.cpp: the shared run options (src/train/run_options.h): every front end's
// spelling of an option gets the same limits and a message naming that spelling; the checks set
// the TrainConfig fields they describe.
//   build/dpb_tests --gtest_filter='RunOptions*'
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "kernels/backends.h"
#include "src/core/check.h"
#include "src/model/model.h"
#include "src/train/run_options.h"

namespace dpb {
namespace {

// The message of apply_run_option for this flag spelling, "" when the value is accepted.
std::string refusal(const std::string& name, const std::string& flag, const std::string& v) {
  TrainConfig cfg;
  try {
    apply_run_option(run_option(name), flag, v, cfg);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(RunOptions, SameLimitsForDpbenchAndMicroSpellings) {
  // Values at and beyond each limit, plus junk: accepted or refused alike by every front end.
  const std::vector<std::string> values = {"-1", "0", "1", "2", "64", "65", "4096", "4097", "60000",
                                           "60001", "0.5", "1e7", "1e8", "nan", "inf", "abc", "",
                                           "cpu", "cuda", "async", "auto", "gpu"};
  int shared = 0;
  for (const RunOption& o : run_options()) {
    if (o.micro.empty()) continue;
    ++shared;
    for (const std::string& v : values) {
      const std::string a = refusal(o.name, "--" + o.name, v);
      const std::string b = refusal(o.name, "--dpb_" + o.micro, v);
      EXPECT_EQ(a.empty(), b.empty()) << o.name << " = '" << v << "': " << a << " | " << b;
      if (!a.empty()) {
        EXPECT_EQ(a.rfind("--" + o.name, 0), 0u) << a;  // names the flag as dpbench spells it
        EXPECT_EQ(b.rfind("--dpb_" + o.micro, 0), 0u) << b;  // and as dpbench-micro does
      }
    }
  }
  EXPECT_GE(shared, 8);
}

TEST(RunOptions, Limits) {
  EXPECT_EQ(refusal("devices", "--devices", "1"), "");
  EXPECT_EQ(refusal("devices", "--devices", std::to_string(kMaxRanks)), "");
  EXPECT_NE(refusal("devices", "--devices", "0"), "");
  EXPECT_NE(refusal("devices", "--devices", std::to_string(kMaxRanks + 1)), "");
  EXPECT_NE(refusal("devices", "--devices", "2x"), "");
  EXPECT_EQ(refusal("batch", "--batch", std::to_string(kMaxBatch)), "");
  EXPECT_NE(refusal("batch", "--batch", std::to_string(kMaxBatch + 1)), "");
  EXPECT_EQ(refusal("threads", "--threads", "0"), "");  // 0: cores / ranks, in every front end
  EXPECT_NE(refusal("threads", "--threads", "-1"), "");
  EXPECT_NE(refusal("threads", "--threads", std::to_string(kMaxThreads + 1)), "");
  EXPECT_NE(refusal("bucket-mb", "--bucket-mb", "0"), "");
  EXPECT_NE(refusal("link-gbps", "--link-gbps", "-1"), "");
  EXPECT_NE(refusal("link-latency-us", "--link-latency-us", "nan"), "");
  EXPECT_NE(refusal("lr", "--lr", "abc"), "");
  EXPECT_NE(refusal("epochs", "--epochs", "1.5x"), "");
  EXPECT_NE(refusal("seed", "--seed", "-3"), "");
  EXPECT_NE(refusal("overlap", "--overlap", "maybe"), "");
  const std::string tune = refusal("tune-file", "--dpb_tune_file", "/nonexistent/t.json");
  EXPECT_EQ(tune.rfind("--dpb_tune_file /nonexistent/t.json", 0), 0u) << tune;
}

TEST(RunOptions, ChoicesComeFromTheTables) {
  for (const ModelEntry& m : models()) EXPECT_EQ(refusal("model", "--model", m.name), "");
  for (const BackendEntry& b : backends()) EXPECT_EQ(refusal("backend", "--backend", b.name), "");
  EXPECT_EQ(refusal("backend", "--backend", "auto"), "");
  const std::string bad = refusal("backend", "--dpb_backends", "gpu");
  EXPECT_NE(bad.find("--dpb_backends: unknown backend 'gpu'"), std::string::npos) << bad;
  EXPECT_NE(refusal("model", "--model", "vgg").find("valid: "), std::string::npos);
  EXPECT_EQ(&resolve_backend("auto"), &auto_backend());
  for (const BackendEntry& b : backends()) EXPECT_EQ(&resolve_backend(b.name), &b);
  for (const ModelEntry& m : models()) {  // dpbench-micro's --dpb_<model>_batch defaults
    EXPECT_GE(m.bench_batch, 1) << m.name;
    EXPECT_LE(m.bench_batch, kMaxBatch) << m.name;
  }
}

TEST(RunOptions, SetTheirFields) {
  TrainConfig cfg;
  apply_run_option(run_option("devices"), "--devices", "4", cfg);
  apply_run_option(run_option("grad-sync"), "--grad-sync", "bucketed", cfg);
  apply_run_option(run_option("overlap"), "--overlap", "on", cfg);
  apply_run_option(run_option("bucket-mb"), "--bucket-mb", "0.5", cfg);
  apply_run_option(run_option("link-gbps"), "--link-gbps", "10", cfg);
  apply_run_option(run_option("seed"), "--seed", "7", cfg);
  EXPECT_EQ(cfg.devices, 4);
  EXPECT_EQ(cfg.sync.mode, SyncMode::Bucketed);
  EXPECT_TRUE(cfg.sync.overlap);
  EXPECT_DOUBLE_EQ(cfg.sync.bucket_mb, 0.5);
  EXPECT_DOUBLE_EQ(cfg.link.gbps, 10);
  EXPECT_EQ(cfg.seed, 7u);
  // get() shows what set() stored (the --help defaults).
  for (const RunOption& o : run_options())
    if (o.get && o.set) {
      TrainConfig c;
      o.set(c, o.get(TrainConfig{}));
      EXPECT_EQ(o.get(c), o.get(TrainConfig{})) << o.name;
    }
}

TEST(RunOptions, NamesAreUnique) {
  std::set<std::string> names, micros;
  for (const RunOption& o : run_options()) {
    EXPECT_TRUE(names.insert(o.name).second) << o.name;
    if (!o.micro.empty()) {
      EXPECT_TRUE(micros.insert(o.micro).second) << o.micro;
      EXPECT_EQ(find_micro_option(o.micro), &o);
    }
    EXPECT_FALSE(o.help.empty()) << o.name;
  }
  EXPECT_THROW(run_option("no-such-option"), Error);
  EXPECT_NE(run_env_help().find("DPB_SPIN_US"), std::string::npos);
}

}  // namespace
}  // namespace dpb
