// test_trace.cpp: the Chrome trace writer (src/core/trace_json.h): a trace of hand-made spans (2
// ranks x 3 tracks) parses, names every rank and track, and holds one complete event per span
// with its times relative to the earliest span and its args; the file is replaced atomically
// (no temporary file left), an unwritable path is refused naming it, odd names are escaped.
// Run: ./dpb_tests --gtest_filter='Trace*'
// The time to write 10^6 spans: ./dpb_tests --gtest_filter='Trace*Million*' --gtest_also_run_disabled_tests
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "src/core/check.h"
#include "src/core/files.h"
#include "src/core/trace_json.h"
#include "tests/data_test_util.h"

namespace {

using dpb_test::TempDir;
using json = nlohmann::json;
namespace fs = std::filesystem;

dpb::Span make_span(int rank, dpb::Track t, const char* name, double t0, double t1, int step) {
  dpb::Span s;
  s.set_name(name);
  s.rank = rank;
  s.track = t;
  s.epoch = 1;
  s.step = step;
  s.t0 = t0;
  s.t1 = t1;
  if (t == dpb::Track::Comm) {
    s.set_algorithm("ring");
    s.bytes = 4096;
    s.bucket = 2;
  }
  return s;
}

// 2 ranks x (host "forward", compute "forward", comm "all-reduce"); times in seconds from 100 s.
std::vector<dpb::Span> two_ranks() {
  std::vector<dpb::Span> v;
  for (int r = 0; r < 2; ++r) {
    const double base = 100.0 + 0.001 * r;  // rank 1 starts 1 ms later
    v.push_back(make_span(r, dpb::Track::Host, "forward", base, base + 0.002, 0));
    v.push_back(make_span(r, dpb::Track::Compute, "forward", base + 0.0005, base + 0.0025, 0));
    v.push_back(make_span(r, dpb::Track::Comm, "all-reduce", base + 0.003, base + 0.0035, 0));
  }
  return v;
}

json read_json(const std::string& path) { return json::parse(dpb::read_file(path)); }

std::vector<std::string> dir_names(const TempDir& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir.path)) out.push_back(e.path().filename().string());
  return out;
}

TEST(Trace, TwoRanksThreeTracks) {
  TempDir dir;
  const std::string path = dir.file("t.json");
  dpb::TraceInfo info;
  info.process_names = {"rank 0: cpu:0 (1 thread)", "rank 1: cpu:1 (1 thread)"};
  info.other = {{"command", "dpbench train --trace t.json"}, {"model", "lenet"}};
  dpb::write_chrome_trace(path, two_ranks(), info);
  EXPECT_EQ(dir_names(dir), std::vector<std::string>{"t.json"});  // no temporary file left

  const json doc = read_json(path);
  EXPECT_EQ(doc["displayTimeUnit"], "ms");
  EXPECT_EQ(doc["otherData"]["command"], "dpbench train --trace t.json");
  EXPECT_EQ(doc["otherData"]["model"], "lenet");
  EXPECT_NEAR(doc["otherData"]["time_origin_s"].get<double>(), 100.0, 1e-9);

  std::map<int, std::string> procs;                       // pid -> name
  std::map<std::pair<int, int>, std::string> threads;     // (pid, tid) -> name
  std::map<std::pair<int, int>, int> thread_sort;
  std::vector<json> xs;
  for (const json& e : doc["traceEvents"]) {
    const std::string ph = e["ph"];
    if (ph == "M" && e["name"] == "process_name") procs[e["pid"]] = e["args"]["name"];
    if (ph == "M" && e["name"] == "thread_name") threads[{e["pid"], e["tid"]}] = e["args"]["name"];
    if (ph == "M" && e["name"] == "thread_sort_index")
      thread_sort[{e["pid"], e["tid"]}] = e["args"]["sort_index"];
    if (ph == "X") xs.push_back(e);
  }
  ASSERT_EQ(procs.size(), 2u);
  EXPECT_EQ(procs[1], "rank 0: cpu:0 (1 thread)");  // pid = rank + 1: Perfetto treats pid 0 apart
  EXPECT_EQ(procs[2], "rank 1: cpu:1 (1 thread)");
  ASSERT_EQ(threads.size(), 6u);
  for (int pid = 1; pid <= 2; ++pid) {
    EXPECT_EQ(threads[std::make_pair(pid, 10 * pid + 1)], "host");
    EXPECT_EQ(threads[std::make_pair(pid, 10 * pid + 2)], "compute stream");
    EXPECT_EQ(threads[std::make_pair(pid, 10 * pid + 3)], "comm stream");
    EXPECT_EQ(thread_sort[std::make_pair(pid, 10 * pid + 3)], 2);
  }
  ASSERT_EQ(xs.size(), 6u);
  bool saw_comm1 = false, saw_compute0 = false;
  for (const json& e : xs) {
    EXPECT_GE(e["dur"].get<double>(), 0.0);
    EXPECT_EQ(e["args"]["epoch"], 1);
    EXPECT_EQ(e["args"]["step"], 0);
    if (e["pid"] == 2 && e["name"] == "all-reduce") {  // rank 1: 1 ms + 3 ms after the origin
      saw_comm1 = true;
      EXPECT_EQ(e["tid"], 23);
      EXPECT_EQ(e["cat"], "comm");
      EXPECT_NEAR(e["ts"].get<double>(), 4000.0, 1e-3);
      EXPECT_NEAR(e["dur"].get<double>(), 500.0, 1e-3);
      EXPECT_EQ(e["args"]["algorithm"], "ring");
      EXPECT_EQ(e["args"]["bytes"], 4096);
      EXPECT_EQ(e["args"]["bucket"], 2);
    }
    if (e["pid"] == 1 && e["tid"] == 12) {
      saw_compute0 = true;
      EXPECT_EQ(e["name"], "forward");
      EXPECT_NEAR(e["ts"].get<double>(), 500.0, 1e-3);
      EXPECT_NEAR(e["dur"].get<double>(), 2000.0, 1e-3);
      EXPECT_FALSE(e["args"].contains("algorithm"));  // collectives only
    }
  }
  EXPECT_TRUE(saw_comm1);
  EXPECT_TRUE(saw_compute0);

  // Written again over the same file: replaced, still nothing else in the directory.
  dpb::write_chrome_trace(path, {two_ranks()[0]}, info);
  EXPECT_EQ(dir_names(dir), std::vector<std::string>{"t.json"});
  EXPECT_EQ(read_json(path)["traceEvents"].size(), 2u + 2u + 2u + 1u);  // 2 ranks, 1 track, 1 span
}

TEST(Trace, OrderAndOddInput) {
  TempDir dir;
  const std::string path = dir.file("odd.json");
  std::vector<dpb::Span> v;
  v.push_back(make_span(0, dpb::Track::Host, "inner", 5.0, 5.5, 3));
  v.push_back(make_span(0, dpb::Track::Host, "outer", 5.0, 6.0, 3));  // same start, longer
  v.push_back(make_span(0, dpb::Track::Host, "before", 4.0, 4.5, 2));
  v.push_back(make_span(0, dpb::Track::Host, "quote\"back\\slash", 7.0, 6.0, 4));  // t1 < t0
  dpb::Span bad = make_span(1, dpb::Track::Compute, "x", 4.0, 4.0, -1);
  bad.name[0] = char(0xe2), bad.name[1] = char(0x82);  // a UTF-8 character cut short
  v.push_back(bad);
  dpb::write_chrome_trace(path, v, dpb::TraceInfo{});
  const json doc = read_json(path);  // parses: the odd names are escaped
  std::vector<std::string> host;
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name")
      EXPECT_EQ(e["args"]["name"], "rank " + std::to_string(e["pid"].get<int>() - 1));
    if (e["ph"] != "X") continue;
    EXPECT_GE(e["dur"].get<double>(), 0.0);  // clamped
    if (e["pid"] == 1) host.push_back(e["name"]);
    if (e["pid"] == 2) EXPECT_EQ(e["args"]["step"], -1);
  }
  // Time order per track; at equal starts the enclosing span first.
  EXPECT_EQ(host, (std::vector<std::string>{"before", "outer", "inner", "quote\"back\\slash"}));
}

TEST(Trace, EmptyAndUnwritable) {
  TempDir dir;
  const std::string path = dir.file("empty.json");
  dpb::TraceInfo info;
  info.process_names = {"rank 0: idle"};
  dpb::write_chrome_trace(path, {}, info);  // a rank with no spans still has its process
  const json doc = read_json(path);
  ASSERT_EQ(doc["traceEvents"].size(), 2u);
  EXPECT_EQ(doc["traceEvents"][0]["args"]["name"], "rank 0: idle");
  const std::string missing = dir.file("no/such/dir/t.json");
  try {
    dpb::write_chrome_trace(missing, two_ranks(), info);
    FAIL() << "wrote into a missing directory";
  } catch (const dpb::Error& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
  EXPECT_EQ(dir_names(dir), std::vector<std::string>{"empty.json"});
}

// The cost of a large run's trace (not in CI): 10^6 spans, 4 ranks x 3 tracks.
TEST(Trace, DISABLED_MillionSpans) {
  TempDir dir;
  std::vector<dpb::Span> v;
  v.reserve(1000000);
  for (int i = 0; i < 1000000; ++i) {
    const int r = i % 4;
    const auto t = dpb::Track(i / 4 % 3);
    v.push_back(make_span(r, t, t == dpb::Track::Comm ? "all-reduce" : "backward", 1e4 + i * 1e-5,
                          1e4 + i * 1e-5 + 4e-6, i / 12));
  }
  const auto t0 = std::chrono::steady_clock::now();
  dpb::write_chrome_trace(dir.file("big.json"), v, dpb::TraceInfo{});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto bytes = fs::file_size(dir.file("big.json"));
  std::printf("10^6 spans: %.3f s, %.1f MB\n", s, double(bytes) / 1e6);
  EXPECT_EQ(read_json(dir.file("big.json"))["traceEvents"].size(), 1000000u + 4 * 2 + 12 * 2);
}

}  // namespace
