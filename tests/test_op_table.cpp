// test_op_table.cpp: every case of the op table (src/core/op_table*.cpp) on every backend built
// into this binary, against the CPU reference (1-thread CPU backend), |x - ref| <= atol +
// of_max * max|ref| + rtol * |ref|; a failure prints each failing output's first mismatches and
// max error. Backends without a device (CUDA built, no GPU) skip with the reason.
// Test names: OpTable/Backend.MatchesCpuReference/<backend>__<op>_<shape>_<flags>, e.g.
//   ./build/dpb_tests --gtest_filter='OpTable/*cuda__conv2d*'
// The CPU reference itself is checked in test_cpu_reference.cpp (naive loops, finite differences).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "src/core/check.h"
#include "kernels/conformance/op_cases.h"

namespace dpb {
namespace {

std::vector<std::string> backend_names() {
  std::vector<std::string> names;
  for (const OpBackend& b : op_backends()) names.push_back(b.name);
  return names;
}

class Backend : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(Backend, MatchesCpuReference) {
  const auto& [backend, index] = GetParam();
  const OpCase& c = op_cases()[index];
  OpBackend be;
  for (const OpBackend& b : op_backends())
    if (b.name == backend) be = b;
  ASSERT_FALSE(be.name.empty()) << "backend " << backend << " is no longer listed";
  if (const std::string why = be.unavailable(); !why.empty()) GTEST_SKIP() << why;
  const std::vector<HostVec> in = c.inputs();
  auto ref_dev = make_reference_device();
  const std::vector<OpOutput> ref = c.run(*ref_dev, in);
  auto dev = be.make(0, c.flags & kTf32);
  const CaseResult r = check_case(c, *dev, ref, in);
  EXPECT_TRUE(r.ok) << c.label() << " on " << dev->name() << " vs the CPU reference:\n"
                    << r.report();
}

INSTANTIATE_TEST_SUITE_P(
    OpTable, Backend,
    ::testing::Combine(::testing::ValuesIn(backend_names()),
                       ::testing::Range(0, int(op_cases().size()))),
    [](const ::testing::TestParamInfo<Backend::ParamType>& info) {
      return std::get<0>(info.param) + "__" + op_cases()[std::get<1>(info.param)].id();
    });

// The table's invariants: unique ids (checked when it is built), every case has outputs, and
// `dpbench selftest` has at least one case per op.
TEST(OpTableShape, EveryOpHasASelftestCaseAndOutputs) {
  std::vector<std::string> ops, selftest_ops;
  for (const OpCase& c : op_cases()) {
    if (std::find(ops.begin(), ops.end(), c.op) == ops.end()) ops.push_back(c.op);
    if (c.flags & kSelftest) selftest_ops.push_back(c.op);
    EXPECT_FALSE(c.id().empty());
  }
  for (const std::string& op : ops)
    EXPECT_NE(std::find(selftest_ops.begin(), selftest_ops.end(), op), selftest_ops.end())
        << op << " has no case marked kSelftest";
  EXPECT_EQ(selftest_ops.size(), ops.size()) << "one selftest case per op keeps it short";
}

// The harness catches a wrong result and reports it by output name, index and max error.
TEST(OpTableShape, CompareReportsMismatches) {
  std::vector<OpOutput> ref = {{"y", {1.f, 2.f, 3.f}, {1e-6f, 1e-6f}}};
  std::vector<OpOutput> got = {{"y", {1.f, 2.5f, 3.f}, {}}};
  CaseResult r = compare_outputs(got, ref);
  EXPECT_FALSE(r.ok);
  const std::string rep = r.report();
  EXPECT_NE(rep.find("y: 1 of 3"), std::string::npos) << rep;
  EXPECT_NE(rep.find("[1] got 2.5 ref 2"), std::string::npos) << rep;
  EXPECT_NE(rep.find("max error 0.5"), std::string::npos) << rep;
  got[0].v[1] = 2.f;
  EXPECT_TRUE(compare_outputs(got, ref).ok);
  got[0].v[2] = std::nanf("");
  EXPECT_FALSE(compare_outputs(got, ref).ok) << "NaN must fail";
}

// An op that throws (as a CUDA error would) is reported as that case's error, not thrown on.
TEST(OpTableShape, CheckCaseCatchesErrors) {
  OpCase c;
  c.op = "broken";
  c.run = [](Device&, const std::vector<HostVec>&) -> std::vector<OpOutput> {
    throw Error("cudaErrorIllegalAddress: an illegal memory access was encountered");
  };
  auto dev = make_reference_device();
  const CaseResult r = check_case(c, *dev, {}, {});
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.report().find("error: cudaErrorIllegalAddress"), std::string::npos) << r.report();
}

}  // namespace
}  // namespace dpb
