// test_tuning.cpp: the tuning table of --allreduce auto (collectives/tuning.h): parsing and its
// errors, which table applies to k ranks, and auto running the chosen algorithm per message
// size with exact sums. Run: ./dpb_tests --gtest_filter='Tuning*'
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "collectives/registry.h"
#include "collectives/tuning.h"
#include "src/core/check.h"
#include "tests/rank_threads.h"
#include "kernels/cpu/cpu_device.h"

namespace dpb {
namespace {

const char* kTable = R"({"format": "dpbench-allreduce-tuning/1", "tables": [
  {"backend": "cpu", "ranks": 2, "rules": [{"up_to_bytes": 64, "algorithm": "direct"},
                                           {"up_to_bytes": 4096, "algorithm": "rhd"},
                                           {"up_to_bytes": null, "algorithm": "ring"}]},
  {"backend": "cpu", "ranks": 4, "rules": [{"up_to_bytes": 1024, "algorithm": "rhd"},
                                           {"up_to_bytes": null, "algorithm": "naive"}]}]})";

std::string error_of(const std::string& json) {
  try {
    parse_tune_json(json, "t.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Tuning, ParsesAndDescribes) {
  TuneFile f = parse_tune_json(kTable, "t.json");
  ASSERT_EQ(f.tables.size(), 2u);
  std::string why;
  auto rules = resolve_tuning(f, BackendKind::Cpu, 2, &why);
  EXPECT_EQ(describe_rules(rules), "direct<=64B; rhd<=4KiB; ring");
  EXPECT_EQ(why, "table t.json: cpu k=2");
  EXPECT_NO_THROW(load_tune_file(""));  // the compiled-in default is valid
}

TEST(Tuning, ErrorsNameTheFileAndEntry) {
  const std::string head = R"({"format": "dpbench-allreduce-tuning/1", "tables": [{"backend": )";
  struct Case { std::string json, needle; };
  const Case cases[] = {
      {"{", "not JSON"},
      {R"({"format": "x", "tables": []})", "format"},
      {head + R"("cpu", "ranks": 2, "rules": [{"up_to_bytes": null, "algorithm": "tree"}]}]})",
       "unknown algorithm 'tree'"},
      {head + R"("cpu", "ranks": 2, "rules": [{"up_to_bytes": null, "algorithm": "auto"}]}]})",
       "unknown algorithm 'auto'"},
      {head + R"("tpu", "ranks": 2, "rules": [{"up_to_bytes": null, "algorithm": "ring"}]}]})",
       "unknown backend 'tpu'"},
      {head + R"("cpu", "ranks": 2, "rules": [{"up_to_bytes": 8, "algorithm": "ring"}]}]})",
       "only the last rule"},
      {head + R"("cpu", "ranks": 2, "rules": [{"up_to_bytes": 8, "algorithm": "ring"},
          {"up_to_bytes": 4, "algorithm": "rhd"}, {"up_to_bytes": null, "algorithm": "ring"}]}]})",
       "increase"},
      {head + R"("cpu", "ranks": "two", "rules": []}]})", "t.json"},
  };
  for (const Case& c : cases) {
    const std::string e = error_of(c.json);
    EXPECT_NE(e.find(c.needle), std::string::npos) << c.json << "\n -> " << e;
    EXPECT_NE(e.find("t.json"), std::string::npos) << e;
  }
  EXPECT_THROW(load_tune_file("/nonexistent/tuning.json"), Error);
}

// Issue 25: every number of a tuning file is checked, never coerced (up_to_bytes -5 became
// 2^64-5, 1e30 became 0, 100.7 became 100; ranks 2^31 became -2^31); the error names the file,
// the table or rule and the field.
TEST(Tuning, NumbersAreCheckedNotCoerced) {
  const std::string head = R"({"format": "dpbench-allreduce-tuning/1", "tables": [{"backend": "cpu", )";
  auto rule = [&](const std::string& up) {
    return head + R"("ranks": 2, "rules": [{"up_to_bytes": )" + up +
           R"(, "algorithm": "direct"}, {"up_to_bytes": null, "algorithm": "ring"}]}]})";
  };
  for (const char* bad : {"-5", "1e30", "100.7", "0", "18446744073709551616", "\"64\"", "true"}) {
    const std::string e = error_of(rule(bad));
    EXPECT_NE(e.find("t.json table 1 rule 1"), std::string::npos) << bad << " -> " << e;
    EXPECT_NE(e.find("\"up_to_bytes\" must be an integer"), std::string::npos) << bad << " -> " << e;
  }
  EXPECT_EQ(error_of(rule("18446744073709551615")), "");  // the largest uint64 is a bound
  for (const char* bad : {"2147483648", "-1", "0", "2.5", "1e3"}) {
    const std::string e = error_of(head + R"("ranks": )" + bad +
                                   R"(, "rules": [{"up_to_bytes": null, "algorithm": "ring"}]}]})");
    EXPECT_NE(e.find("t.json table 1: \"ranks\" must be an integer"), std::string::npos)
        << bad << " -> " << e;
  }
  const std::string e = error_of(head + R"("ranks": 2, "rules": [{"up_to_bytes": null, "algorithm": 7}]}]})");
  EXPECT_NE(e.find("rule 1: \"algorithm\" must be a string"), std::string::npos) << e;
}

TEST(Tuning, NearestTableAndFallbacks) {
  TuneFile f = parse_tune_json(kTable, "t.json");
  std::string why;
  // k=3: k=2 and k=4 are equally near, the smaller wins; rhd refuses k=3 and becomes ring.
  auto rules = resolve_tuning(f, BackendKind::Cpu, 3, &why);
  EXPECT_EQ(describe_rules(rules), "direct<=64B; ring<=4KiB; ring");
  EXPECT_NE(why.find("cpu k=2 nearest to k=3"), std::string::npos) << why;
  EXPECT_NE(why.find("rhd refuses k=3"), std::string::npos) << why;
  rules = resolve_tuning(f, BackendKind::Cpu, 8, &why);  // nearest is k=4, rhd accepts 8
  EXPECT_EQ(describe_rules(rules), "rhd<=1KiB; naive");
  rules = resolve_tuning(f, BackendKind::Cuda, 2, &why);  // no cuda table
  EXPECT_EQ(describe_rules(rules), "ring");
  EXPECT_NE(why.find("no cuda entry"), std::string::npos) << why;
}

// auto with the table above: every size runs the rule's algorithm and sums exactly.
TEST(Tuning, AutoRunsTheChosenAlgorithmWithExactSums) {
  const std::string path = testing::TempDir() + "dpb_tuning_test.json";
  { std::ofstream(path) << kTable; }
  for (int k : {2, 3, 4}) {
    std::vector<std::unique_ptr<Device>> devs;
    std::vector<Device*> raw;
    for (int r = 0; r < k; ++r) devs.push_back(make_cpu_device(r, 1));
    for (auto& d : devs) raw.push_back(d.get());
    CommGroup group(k, raw);
    auto ar = make_allreduce("auto", group, AllReduceOptions{path});
    EXPECT_EQ(ar->name(), "auto");
    EXPECT_EQ(ar->describe().rfind("auto: ", 0), 0u) << ar->describe();
    EXPECT_EQ(ar->describe().find(','), std::string::npos) << "must fit a CSV field";
    for (size_t n : {size_t(0), size_t(1), size_t(16), size_t(17), size_t(1024), size_t(1025),
                     size_t(5000)}) {
      const size_t bytes = n * sizeof(float);
      const char* want = k == 4 ? (bytes <= 1024 ? "rhd" : "naive")
                                : bytes <= 64 ? "direct" : bytes <= 4096 && k == 2 ? "rhd" : "ring";
      EXPECT_EQ(ar->choice(n), want) << "k=" << k << " n=" << n;
      on_ranks(k, [&](int r) {
        std::vector<float> host(n);
        for (size_t i = 0; i < n; ++i) host[i] = float((r + 1) * int(i % 7 + 1));
        Buffer buf(*raw[r], n, MemCategory::Temporaries, "buf");
        raw[r]->upload(buf.get(), host.data(), n);
        ar->run(r, buf.get(), n);
        raw[r]->download(host.data(), buf.get(), n);
        size_t wrong = 0;
        for (size_t i = 0; i < n; ++i) wrong += host[i] != float(k * (k + 1) / 2 * int(i % 7 + 1));
        EXPECT_EQ(wrong, 0u) << "k=" << k << " n=" << n << " rank " << r;
      });
    }
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace dpb
