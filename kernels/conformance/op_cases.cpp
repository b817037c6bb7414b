// op_cases.cpp: the op-case harness: backends to run on, the comparison with the CPU reference,
// and case labels. The cases themselves are in op_table.cpp.
#include "kernels/conformance/op_cases.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <exception>
#include <sstream>

#include "kernels/backends.h"
#include "kernels/cpu/cpu_device.h"
#include "kernels/cuda/cuda_backend.h"
#include "src/core/check.h"

namespace dpb {

std::string OpCase::flag_names() const {
  static const std::pair<unsigned, const char*> kNames[] = {
      {kInPlace, "in-place"}, {kNullDx, "null-dx"}, {kTf32, "tf32"}, {kUnaligned, "unaligned"}};
  std::string s;
  for (auto [bit, name] : kNames) {
    if (!(flags & bit)) continue;
    if (!s.empty()) s += ' ';
    s += name;
  }
  return s;
}

std::string OpCase::label() const {
  const std::string f = flag_names();
  return op + " " + shape + (f.empty() ? "" : " [" + f + "]");
}

std::string OpCase::id() const {
  std::string s = op + "_" + shape + "_" + flag_names();
  std::string out;
  for (char ch : s) {
    const bool alnum = std::isalnum(static_cast<unsigned char>(ch));
    if (alnum) out += ch;
    else if (!out.empty() && out.back() != '_') out += '_';
  }
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out;
}

// ---- backends: every entry of the backend table (kernels/backends.cpp), CUDA per GPU ----

namespace {

// GPU 0 is "cuda" whether or not it is present, so that test names found by ctest on a build
// machine without a GPU still name it on the GPU machine; further GPUs are cuda1, cuda2, ...
void add_cuda_backends(const BackendEntry& e, std::vector<OpBackend>& b) {
  const std::string why = e.unavailable();  // the CUDA runtime's words (kernels/cuda)
  b.push_back({e.name, e.help + " (GPU 0)", [why] { return why; },
               [](int rank, bool tf32) { return make_cuda_device(rank, 0, tf32); }});
  for (int g = 1; g < cuda_device_count(); ++g)
    b.push_back({e.name + std::to_string(g), e.help + " (GPU " + std::to_string(g) + ")",
                 [] { return std::string(); },
                 [g](int rank, bool tf32) { return make_cuda_device(rank, g, tf32); }});
}

}  // namespace

std::vector<OpBackend> op_backends() {
  std::vector<OpBackend> b;
  for (const BackendEntry& e : backends()) {
    if (!e.runs_math) continue;  // the meta backend computes nothing to compare
    if (e.kind == BackendKind::Cuda) {
      if (cuda_built()) add_cuda_backends(e, b);
      continue;
    }
    const BackendEntry* entry = &e;  // the table is static
    b.push_back({e.name, e.help, e.unavailable, [entry](int rank, bool tf32) {
                   DeviceOptions o;
                   o.threads = 2, o.tf32 = tf32;
                   return entry->make(rank, o);
                 }});
  }
  return b;
}

std::unique_ptr<Device> make_reference_device() { return make_cpu_device(0, 1); }

// ---- comparison ----

namespace {

OutputCheck compare_one(const OpOutput& got, const OpOutput& ref) {
  OutputCheck c;
  c.name = ref.name;
  c.n = ref.v.size();
  if (got.v.size() != ref.v.size()) {
    c.bad = std::max<size_t>(1, ref.v.size());
    c.first = "  size " + std::to_string(got.v.size()) + ", reference " +
              std::to_string(ref.v.size()) + "\n";
    return c;
  }
  float max_ref = 0;
  for (float r : ref.v) max_ref = std::max(max_ref, std::fabs(r));
  const double atol = double(ref.tol.atol) + double(ref.tol.of_max) * max_ref;
  std::ostringstream first;
  first.precision(9);
  for (size_t i = 0; i < ref.v.size(); ++i) {
    const double err = std::fabs(double(got.v[i]) - double(ref.v[i]));
    if (!std::isnan(c.max_err) && !(err <= c.max_err)) c.max_err = err, c.worst = i;  // NaN: worst
    if (!(err <= atol + ref.tol.rtol * std::fabs(double(ref.v[i]))) && c.bad++ < 5)
      first << "  [" << i << "] got " << got.v[i] << " ref " << ref.v[i] << "\n";
  }
  c.first = first.str();
  return c;
}

}  // namespace

CaseResult compare_outputs(const std::vector<OpOutput>& got, const std::vector<OpOutput>& ref) {
  CaseResult r;
  r.ok = true;
  if (got.size() != ref.size()) {
    r.ok = false;
    r.error = std::to_string(got.size()) + " outputs, reference has " + std::to_string(ref.size());
    return r;
  }
  for (size_t i = 0; i < ref.size(); ++i) {
    OutputCheck c = compare_one(got[i], ref[i]);
    if (got[i].name != ref[i].name)
      c.bad = std::max<size_t>(c.bad, 1), c.first += "  named " + got[i].name + "\n";
    r.ok = r.ok && c.bad == 0;
    r.outputs.push_back(std::move(c));
  }
  return r;
}

CaseResult check_case(const OpCase& c, Device& dev, const std::vector<OpOutput>& ref,
                      const std::vector<HostVec>& inputs) {
  std::vector<OpOutput> got;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    got = c.run(dev, inputs);
  } catch (const std::exception& e) {
    CaseResult r;
    r.error = e.what();
    return r;
  }
  CaseResult r = compare_outputs(got, ref);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

std::string CaseResult::report() const {
  std::ostringstream o;
  if (!error.empty()) o << "error: " << error << "\n";
  for (const OutputCheck& c : outputs) {
    if (c.bad == 0) continue;
    o << c.name << ": " << c.bad << " of " << c.n << " outside tolerance; max error " << c.max_err
      << " at [" << c.worst << "]\n"
      << c.first;
  }
  return o.str();
}

}  // namespace dpb
