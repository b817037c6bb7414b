// test_inject.cpp: --inject (src/train/inject.h): specs parsed and written back the same
// (describe round-trips through parse), every bad spec refused naming --inject and the bad part,
// ranks checked against the run's, the run option's table entry, a delay sleeping on its rank,
// phase and steps only, and link injections becoming per-rank overrides of the emulated link.
// The slow link itself (the fabric, a ring on it) is tested in tests/test_link.cpp.
// Run: ./dpb_tests --gtest_filter='Inject*'
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "src/core/check.h"
#include "src/train/inject.h"
#include "src/train/run_options.h"

namespace dpb {
namespace {

Injections parsed(const std::string& spec) {
  Injections inj;
  parse_injections(spec, inj);
  return inj;
}

bool same(const Injections& a, const Injections& b) {
  if (a.delays.size() != b.delays.size() || a.links.size() != b.links.size()) return false;
  for (size_t i = 0; i < a.delays.size(); ++i) {
    const DelayInjection &x = a.delays[i], &y = b.delays[i];
    if (x.rank != y.rank || x.phase != y.phase || x.ms != y.ms || x.every != y.every) return false;
  }
  for (size_t i = 0; i < a.links.size(); ++i)
    if (a.links[i].rank != b.links[i].rank || a.links[i].gbps != b.links[i].gbps) return false;
  return true;
}

TEST(Inject, ParseAndDescribeRoundTrip) {
  const Injections a = parsed("delay:rank=2,phase=backward,ms=30;link:rank=1,gbps=0.5");
  ASSERT_EQ(a.delays.size(), 1u);
  ASSERT_EQ(a.links.size(), 1u);
  EXPECT_EQ(a.delays[0].rank, 2);
  EXPECT_EQ(a.delays[0].phase, "backward");
  EXPECT_DOUBLE_EQ(a.delays[0].ms, 30);
  EXPECT_EQ(a.delays[0].every, 1);
  EXPECT_EQ(a.links[0].rank, 1);
  EXPECT_DOUBLE_EQ(a.links[0].gbps, 0.5);
  EXPECT_EQ(a.describe(), "delay:rank=2,phase=backward,ms=30;link:rank=1,gbps=0.5");
  EXPECT_EQ(Injections{}.describe(), "");
  EXPECT_TRUE(Injections{}.empty());
  EXPECT_FALSE(a.empty());

  // Canonical text: spaces dropped, every=1 left out, delays before links; numbers read back
  // exactly (0.1 + 0.2 is not 0.3).
  const Injections b = parsed(" link:rank=3, gbps=1e-6 ; delay: rank=0,ms=0.30000000000000004,"
                              "phase=data,every=1;delay:rank=1,phase=optimizer,ms=5,every=4");
  EXPECT_EQ(b.describe(),
            "delay:rank=0,phase=data,ms=0.30000000000000004;"
            "delay:rank=1,phase=optimizer,ms=5,every=4;link:rank=3,gbps=1e-06");
  for (const Injections& x : {a, b}) {
    const Injections back = parsed(x.describe());
    EXPECT_TRUE(same(back, x)) << x.describe() << " -> " << back.describe();
    EXPECT_EQ(back.describe(), x.describe());
  }

  // Each call adds (the flag given twice).
  Injections c = parsed("delay:rank=0,phase=forward,ms=1");
  parse_injections("link:rank=0,gbps=2", c);
  EXPECT_EQ(c.describe(), "delay:rank=0,phase=forward,ms=1;link:rank=0,gbps=2");
  for (const std::string& p : injectable_phases())
    EXPECT_EQ(parsed("delay:rank=0,phase=" + p + ",ms=1").delays[0].phase, p);
  EXPECT_EQ(injectable_phases(),
            (std::vector<std::string>{"data", "forward", "backward", "optimizer"}));
}

TEST(Inject, BadSpecsAreRefusedNamingTheFlagAndThePart) {
  const std::vector<std::pair<std::string, std::string>> bad = {  // spec, what the message says
      {"", "empty spec"},
      {"bogus", "unknown kind 'bogus'"},
      {"slow:rank=1,ms=3", "unknown kind 'slow'"},
      {"delay:rank=1,phase=backward,ms=30;", "empty spec"},
      {"delay:rank=1,phase=backward", "lacks ms="},
      {"delay:phase=backward,ms=3", "lacks rank="},
      {"delay:rank=1,ms=3", "lacks phase="},
      {"delay", "expected key=value"},
      {"delay:rank=1,phase=backward,ms", "expected key=value, got 'ms'"},
      {"delay:rank=1,phase=sleep,ms=3", "unknown phase 'sleep' (valid: data, forward"},
      {"delay:rank=-1,phase=data,ms=3", "rank must be an integer in [0, "},
      {"delay:rank=1.5,phase=data,ms=3", "rank must be an integer"},
      {"delay:rank=1,phase=data,ms=0", "ms must be milliseconds in (0, 600000], got '0'"},
      {"delay:rank=1,phase=data,ms=-4", "ms must be"},
      {"delay:rank=1,phase=data,ms=600001", "ms must be"},
      {"delay:rank=1,phase=data,ms=nan", "ms must be"},
      {"delay:rank=1,phase=data,ms=5x", "ms must be"},
      {"delay:rank=1,phase=data,ms=5,every=0", "every must be an integer in [1, "},
      {"delay:rank=1,phase=data,ms=5,gbps=1", "unknown key 'gbps' for delay"},
      {"delay:rank=1,rank=2,phase=data,ms=5", "rank given twice"},
      {"link:rank=1", "lacks gbps="},
      {"link:rank=1,gbps=0", "gbps must be a number of Gb/s >= 1e-6, got '0'"},
      {"link:rank=1,gbps=-1", "gbps must be"},
      {"link:rank=1,gbps=1e-7", "gbps must be"},
      {"link:rank=1,gbps=inf", "gbps must be"},
      {"link:rank=1,gbps=1,ms=3", "unknown key 'ms' for link (valid: rank, gbps)"},
  };
  for (const auto& [spec, needle] : bad) {
    Injections into = parsed("link:rank=0,gbps=1");
    try {
      parse_injections(spec, into);
      ADD_FAILURE() << "accepted '" << spec << "'";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.rfind("--inject: ", 0), 0u) << m;
      EXPECT_NE(m.find(needle), std::string::npos) << "'" << spec << "': " << m;
    }
    EXPECT_EQ(into.describe(), "link:rank=0,gbps=1") << "a refused spec changed the injections";
  }
}

TEST(Inject, RanksAreCheckedAgainstTheRun) {
  const Injections inj = parsed("delay:rank=2,phase=backward,ms=30;link:rank=1,gbps=0.5");
  EXPECT_NO_THROW(validate_injections(inj, 3));
  EXPECT_NO_THROW(validate_injections(Injections{}, 1));
  try {
    validate_injections(inj, 2);
    ADD_FAILURE() << "rank 2 of 2 accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--inject: delay:rank=2,phase=backward,ms=30 names rank 2, but the run has 2 "
                     "ranks (0 to 1)"),
              std::string::npos)
        << m;
  }
  EXPECT_THROW(validate_injections(parsed("link:rank=1,gbps=1"), 1), Error);
}

// The run option: --inject in the table, refused with its name, appending to TrainConfig::inject.
TEST(Inject, RunOption) {
  const RunOption& o = run_option("inject");
  EXPECT_TRUE(o.repeat);
  EXPECT_TRUE(o.micro.empty());  // train only
  TrainConfig cfg;
  apply_run_option(o, "--inject", "delay:rank=1,phase=data,ms=2", cfg);
  apply_run_option(o, "--inject", "link:rank=0,gbps=3", cfg);
  EXPECT_EQ(cfg.inject.describe(), "delay:rank=1,phase=data,ms=2;link:rank=0,gbps=3");
  try {
    apply_run_option(o, "--inject", "bogus", cfg);
    ADD_FAILURE() << "--inject bogus accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("--inject: unknown kind 'bogus'", 0), 0u) << e.what();
  }
  EXPECT_EQ(cfg.inject.delays.size(), 1u);
}

double seconds_of(const Injections& inj, int rank, const char* phase, int step) {
  const auto t0 = std::chrono::steady_clock::now();
  inject_delay(inj, rank, phase, step);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(Inject, DelaySleepsOnItsRankPhaseAndStepsOnly) {
  const Injections inj = parsed("delay:rank=1,phase=backward,ms=60,every=2");
  EXPECT_GE(seconds_of(inj, 1, "backward", 0), 0.060);
  EXPECT_GE(seconds_of(inj, 1, "backward", 4), 0.060);
  // No sleep elsewhere (a bound half the delay: a call preempted on a loaded machine stays under).
  EXPECT_LT(seconds_of(inj, 1, "backward", 1), 0.030);
  EXPECT_LT(seconds_of(inj, 1, "backward", 3), 0.030);
  EXPECT_LT(seconds_of(inj, 0, "backward", 0), 0.030);
  EXPECT_LT(seconds_of(inj, 2, "backward", 0), 0.030);
  EXPECT_LT(seconds_of(inj, 1, "forward", 0), 0.030);
  EXPECT_LT(seconds_of(inj, 1, "comm", 0), 0.030);
  // Two delays at one place add up.
  const Injections two = parsed("delay:rank=0,phase=data,ms=20;delay:rank=0,phase=data,ms=25");
  EXPECT_GE(seconds_of(two, 0, "data", 7), 0.045);
}

TEST(Inject, LinkInjectionsBecomeOverridesOfTheLink) {
  const LinkSpec base{1.0, 50.0};
  const LinkSpec same_link = injected_link(base, parsed("delay:rank=0,phase=data,ms=1"));
  EXPECT_TRUE(same_link.rank_gbps.empty());
  EXPECT_EQ(same_link.label(), "1 Gb/s, 50 us");
  const LinkSpec l = injected_link(base, parsed("link:rank=1,gbps=0.1"));
  EXPECT_DOUBLE_EQ(l.gbps, 1.0);
  EXPECT_DOUBLE_EQ(l.latency_us, 50.0);
  ASSERT_EQ(l.rank_gbps.size(), 1u);
  EXPECT_EQ(l.rank_gbps[0].first, 1);
  EXPECT_DOUBLE_EQ(l.gbps_of(1), 0.1);
  EXPECT_DOUBLE_EQ(l.gbps_of(0), 1.0);
  EXPECT_EQ(l.label(), "1 Gb/s, 50 us; rank 1 0.1 Gb/s");
  // No emulated link asked for: the injection alone turns it on (that rank's links only).
  const LinkSpec only = injected_link(LinkSpec{}, parsed("link:rank=2,gbps=0.5"));
  EXPECT_TRUE(only.enabled());
  EXPECT_DOUBLE_EQ(only.gbps_of(2), 0.5);
  EXPECT_DOUBLE_EQ(only.gbps_of(0), 0.0);
  EXPECT_NO_THROW(validate_link(only, "--link-gbps", "--link-latency-us"));
}

}  // namespace
}  // namespace dpb
