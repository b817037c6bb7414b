// op_cases.h: one table of op cases, run on every backend and compared with the CPU reference
// (as ggml's test-backend-ops). Used by the tests (tests/test_op_table.cpp) and by
// `dpbench selftest` (src/cli/selftest.cpp).
//
// A case names an op, a shape and flags (in-place, null dx, TF32, unaligned offsets), makes its
// host inputs once, and runs on any Device through the Device interface, returning named outputs
// with a tolerance each. The harness runs the case on the reference (a 1-thread CPU device) and on
// the device under test and checks |x - ref| <= atol + of_max * max|ref| + rtol * |ref| for every
// element, reporting the first mismatches and the max error.
//
// Adding an op: its case entries in op_table.cpp. Adding a backend: its entry in the backend table
// (kernels/backends.cpp); op_backends() runs the cases on every entry. The CPU reference itself is checked against naive loops and by
// finite differences in tests/test_cpu_reference.cpp.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "src/core/device.h"

namespace dpb {

using HostVec = std::vector<float>;

// |x - ref| <= atol + of_max * max|ref| + rtol * |ref|. of_max is for sums over many terms
// (GEMM, conv, reductions), whose entries can cancel far below their terms.
struct Tol {
  float atol = 0, rtol = 0, of_max = 0;
};

struct OpOutput {
  std::string name;  // "y", "dx", "running_var", ...
  HostVec v;
  Tol tol;
};

enum OpFlag : unsigned {
  kInPlace = 1,     // output aliases an input
  kNullDx = 2,      // backward with dx (or dlogits) = nullptr
  kTf32 = 4,        // device made with TF32 allowed; looser tolerance
  kUnaligned = 8,   // parameters and gradients at odd float offsets (models use one flat buffer)
  kSelftest = 16,   // part of `dpbench selftest` (one small case per op)
};

struct OpCase {
  std::string op;     // Device method family: "conv2d", "batchnorm_train", ...
  std::string shape;  // human-readable: "x(8,1,28,28) w(6,1,5,5) pad 2 stride 1"
  unsigned flags = 0;
  std::function<std::vector<HostVec>()> inputs;  // host inputs, the same for every backend
  // Runs the op on `dev` with `in` (from inputs()) and returns its outputs, downloaded.
  std::function<std::vector<OpOutput>(Device& dev, const std::vector<HostVec>& in)> run;

  std::string flag_names() const;  // "in-place null-dx tf32" or ""
  std::string label() const;       // "conv2d x(...) ... [null-dx]"
  std::string id() const;          // unique identifier: letters, digits, '_' (gtest names)
};

// The table (op_table.cpp): every case, in a fixed order; ids are unique.
const std::vector<OpCase>& op_cases();

// A backend that the cases run on. unavailable() is "" when a device can be made, else why not
// (e.g. the CUDA error string); make(rank, tf32) returns a fresh device for that rank.
struct OpBackend {
  std::string name;  // "cpu", "cuda", "cuda1", ...: letters and digits (used in test names)
  std::string description;
  std::function<std::string()> unavailable;
  std::function<std::unique_ptr<Device>(int rank, bool tf32)> make;
};

// Every backend of the backend table (kernels/backends.cpp) built into this binary, CPU ones
// with 2 math threads; CUDA as "cuda" (GPU 0, or why there is none) and cuda1, cuda2, ... for
// further GPUs. A new backend entry is picked up here: no list to extend.
std::vector<OpBackend> op_backends();
// The reference the cases are compared with: the CPU backend on one thread.
std::unique_ptr<Device> make_reference_device();

struct OutputCheck {
  std::string name;
  size_t n = 0, bad = 0, worst = 0;
  double max_err = 0;
  std::string first;  // the first mismatches, one per line: "  [i] got g ref r"
};

struct CaseResult {
  bool ok = false;
  std::string error;  // an exception from the backend (or reference), else ""
  std::vector<OutputCheck> outputs;
  double seconds = 0;  // wall time of the run on the device under test
  std::string report() const;  // multi-line: per failing output its mismatches and max error
};

// Compares outputs by name and order with the reference's, using the reference's tolerances.
CaseResult compare_outputs(const std::vector<OpOutput>& got, const std::vector<OpOutput>& ref);
// Runs `c` on `dev` and compares with `ref` (the reference's outputs for the same case). Every
// exception from the device is caught and reported in CaseResult::error.
CaseResult check_case(const OpCase& c, Device& dev, const std::vector<OpOutput>& ref,
                      const std::vector<HostVec>& inputs);

}  // namespace dpb
