// test_agree.cpp: ranks agree before they work (src/train/agree.h). check_ranks_agree over a
// threads CommGroup: equal fields pass; one rank's field different makes every rank throw naming
// the field and the ranks' values, for each kind of field (a run option, an environment knob, the
// data, the build). The processes path (mpirun, a wrapper passing different arguments per rank)
// is tests/mpi_agree_test.sh.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/allreduce.h"
#include "kernels/cpu/cpu_device.h"
#include "src/core/check.h"
#include "src/train/agree.h"
#include "src/train/run_options.h"
#include "tests/rank_threads.h"

namespace dpb {
namespace {

// Runs check_ranks_agree on k rank threads, rank r with fields_of(r); returns each rank's error
// message ("" where it returned).
std::vector<std::string> agree_on_threads(int k, const std::function<AgreeFields(int)>& fields_of) {
  std::vector<std::unique_ptr<Device>> devs;
  std::vector<Device*> raw;
  for (int r = 0; r < k; ++r) devs.push_back(make_cpu_device(r, 1));
  for (auto& d : devs) raw.push_back(d.get());
  CommGroup group(k, raw);
  std::vector<std::string> errors(static_cast<size_t>(k));
  on_ranks(k, [&](int r) {
    try {
      check_ranks_agree(group, r, fields_of(r));
    } catch (const Error& e) {
      errors[size_t(r)] = e.what();
    }
  });
  return errors;
}

AgreeFields base_fields() { return train_agree_fields(TrainConfig{}, Dataset{}); }

AgreeFields with(AgreeFields f, const std::string& name, const std::string& value) {
  for (auto& [n, v] : f)
    if (n == name) v = value;
  return f;
}

TEST(Agree, EqualFieldsPass) {
  for (int k : {1, 2, 4}) {
    const std::vector<std::string> errors = agree_on_threads(k, [](int) { return base_fields(); });
    for (int r = 0; r < k; ++r) EXPECT_EQ(errors[size_t(r)], "") << "k " << k << " rank " << r;
  }
}

// Every rank throws the same message, naming the field and each rank's value.
void expect_every_rank(const std::vector<std::string>& errors, const std::string& start) {
  for (size_t r = 0; r < errors.size(); ++r) {
    EXPECT_EQ(errors[r].rfind(start, 0), 0u) << "rank " << r << ": " << errors[r];
    EXPECT_EQ(errors[r], errors[0]) << "rank " << r;
  }
}

TEST(Agree, RunOptionNamedWithValues) {
  TrainConfig a, b;
  b.batch = 128;
  expect_every_rank(agree_on_threads(2, [&](int r) {
                      return train_agree_fields(r == 0 ? a : b, Dataset{});
                    }),
                    "ranks disagree on --batch: rank 0 256, rank 1 128.");
  // Three ranks, rank 1 different: the ranks with one value are listed together.
  expect_every_rank(agree_on_threads(3, [&](int r) {
                      return train_agree_fields(r == 1 ? b : a, Dataset{});
                    }),
                    "ranks disagree on --batch: ranks 0,2 256, rank 1 128.");
}

TEST(Agree, EveryTableFieldIsCompared) {
  // The table's entries with a field (get()) are the fields, in table order, nothing hand-listed.
  const AgreeFields f = run_option_fields(TrainConfig{});
  size_t i = 0;
  for (const RunOption& o : run_options())
    if (o.get) {
      ASSERT_LT(i, f.size());
      EXPECT_EQ(f[i++].first, "--" + o.name);
    }
  EXPECT_EQ(i, f.size());
  // A few of them, each alone different on rank 1, are named (the first one differing wins).
  struct Case {
    std::string option, value;
  } cases[] = {{"seed", "1"},     {"lr", "0.5"},   {"model", "mlp"},      {"allreduce", "naive"},
               {"epochs", "3"},   {"tf32", "true"}, {"grad-sync", "per-param"},
               {"inject", "delay:rank=1,phase=forward,ms=5"}};
  for (const Case& c : cases) {
    TrainConfig a, b;
    apply_run_option(run_option(c.option), "--" + c.option, c.value, b);
    SCOPED_TRACE(c.option);
    expect_every_rank(agree_on_threads(2, [&](int r) { return run_option_fields(r ? b : a); }),
                      "ranks disagree on --" + c.option + ": rank 0 ");
  }
  // Several differ: the first is named with values, the others after it.
  TrainConfig a, b;
  b.batch = 64;
  b.seed = 9;
  const std::string msg =
      agree_on_threads(2, [&](int r) { return run_option_fields(r ? b : a); })[0];
  EXPECT_NE(msg.find("--batch: rank 0 256, rank 1 64 (also on --seed)"), std::string::npos) << msg;
}

TEST(Agree, MicroNamesItsFlags) {
  TrainConfig a, b;
  b.sync.bucket_mb = 5;
  const std::string msg = agree_on_threads(2, [&](int r) {
    return run_option_fields(r ? b : a, /*micro=*/true);
  })[1];
  EXPECT_EQ(msg.rfind("ranks disagree on --dpb_bucket_mb: rank 0 25, rank 1 5", 0), 0u) << msg;
  for (const auto& [name, value] : run_option_fields(a, true)) {
    EXPECT_EQ(name.rfind("--dpb_", 0), 0u) << name;
    EXPECT_NE(name, "--dpb_ranks");  // the lists are dpbench-micro's own fields
  }
}

TEST(Agree, EnvironmentKnob) {
  ::setenv("DPB_SHM", "0", 1);
  const AgreeFields shm0 = base_fields();
  ::unsetenv("DPB_SHM");
  const AgreeFields unset = base_fields();
  ::setenv("DPB_SHM", "", 1);  // set but empty: the default, as unset
  EXPECT_EQ(base_fields(), unset);
  ::unsetenv("DPB_SHM");
  expect_every_rank(agree_on_threads(2, [&](int r) { return r ? shm0 : unset; }),
                    "ranks disagree on DPB_SHM: rank 0 (unset), rank 1 0.");
  // The table's knobs, but not the data directory (a path that may differ by node).
  for (const RunEnvVar& v : run_env_vars()) {
    bool found = false;
    for (const auto& [name, value] : unset) found = found || name == v.name;
    EXPECT_EQ(found, v.agree) << v.name;
  }
}

Dataset small_data(int n) {
  Dataset d;
  d.train.n = n;
  d.train.images.assign(size_t(n) * 784, 7);
  d.train.labels.assign(size_t(n), 3);
  d.test = d.train;
  return d;
}

TEST(Agree, DataDigest) {
  const Dataset a = small_data(200);
  Dataset b = a;
  b.train.images[64 * 784 + 5] = 8;  // example 64: sampled
  const std::string msg =
      agree_on_threads(2, [&](int r) { return data_fields(r ? b : a); })[0];
  EXPECT_EQ(msg.rfind("ranks disagree on data digest: rank 0 ", 0), 0u) << msg;
  b = a;
  b.train.labels[199] = 4;  // the last example: sampled
  EXPECT_NE(data_fields(a), data_fields(b));
  b = a;
  b.test.images[5] = 0;  // the test split too
  EXPECT_NE(data_fields(a), data_fields(b));
  b = a;
  b.train.images[3 * 784] = 0;  // example 3: not in the sample (the cost of hashing a sample)
  EXPECT_EQ(data_fields(a), data_fields(b));
  // Counts: named first.
  const Dataset c = small_data(100);
  const std::string counts =
      agree_on_threads(2, [&](int r) { return data_fields(r ? c : a); })[1];
  EXPECT_EQ(counts.rfind("ranks disagree on training examples: rank 0 200 of 28x28, rank 1 100 "
                         "of 28x28", 0), 0u) << counts;
}

TEST(Agree, BuildId) {
  const AgreeFields f = build_fields();
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].first, "build");
  EXPECT_NE(f[0].second.find("dpbench "), std::string::npos) << f[0].second;
  EXPECT_EQ(f[1].first, "binary");
  EXPECT_NE(f[1].second.find("bytes of /proc/self/exe"), std::string::npos) << f[1].second;
  EXPECT_EQ(build_fields(), f);  // computed once
  // Another binary on rank 1 (threads share one: its text stands in for it).
  const AgreeFields mine = base_fields();
  const AgreeFields other = with(mine, "binary", "0123456789abcdef (1 bytes of /proc/self/exe)");
  expect_every_rank(agree_on_threads(2, [&](int r) { return r ? other : mine; }),
                    "ranks disagree on binary: rank 0 " + f[1].second + ", rank 1 0123456789abcdef");
}

TEST(Agree, FieldListsOfDifferentShape) {
  // A field only one rank has (another version of the table) reads "(absent)"; an empty value
  // reads ''.
  AgreeFields a = {{"--x", "1"}}, b = {{"--x", "1"}, {"--y", ""}};
  EXPECT_EQ(disagreement({a, b}).rfind("ranks disagree on --y: rank 0 (absent), rank 1 ''", 0), 0u)
      << disagreement({a, b});
  EXPECT_EQ(disagreement({a, a, a}), "");
  const std::string long_value(1000, 'v');
  const std::string m = disagreement({{{"--z", long_value}}, {{"--z", "w"}}});
  EXPECT_LT(m.size(), 400u) << m;  // long values shortened
  // Ranks grouped into ranges.
  std::vector<AgreeFields> many(8, a);
  many[5] = {{"--x", "2"}};
  many[6] = {{"--x", "2"}};
  EXPECT_EQ(disagreement(many).rfind("ranks disagree on --x: ranks 0-4,7 1, ranks 5-6 2", 0), 0u)
      << disagreement(many);
}

}  // namespace
}  // namespace dpb
