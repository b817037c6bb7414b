// op_case_io.h: helpers for writing op cases (op_table*.cpp only): deterministic random inputs
// and the device buffers of one run of a case.
#pragma once
#include <initializer_list>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/conformance/op_cases.h"

namespace dpb::op_case_io {

using Inputs = std::vector<HostVec>;
using Outputs = std::vector<OpOutput>;

inline HostVec rand_vec(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  HostVec v(n);
  for (auto& x : v) x = u(g);
  return v;
}

// Device buffers for one run of a case; outputs are downloaded after synchronize().
class Io {
 public:
  explicit Io(Device& d) : d_(d) {}
  // A buffer of offset + v.size() floats holding v at `offset`.
  float* up(const HostVec& v, size_t offset = 0) {
    float* p = filled(v.size(), 0.f, offset);
    d_.upload(p, v.data(), v.size());
    return p;
  }
  float* filled(size_t n, float value, size_t offset = 0) {
    bufs_.emplace_back(d_, n + offset, MemCategory::Temporaries, "op case buffer");
    float* p = bufs_.back().get() + offset;
    if (value != 0.f) d_.fill(p, value, n);
    return p;
  }
  void out(Outputs& o, std::string name, const float* p, size_t n, Tol tol) {
    d_.synchronize();
    HostVec v(n);
    d_.download(v.data(), p, n);
    o.push_back({std::move(name), std::move(v), tol});
  }

 private:
  Device& d_;
  std::vector<Buffer> bufs_;
};

constexpr float kGarbage = 7.f;  // initial value of every output that the op must overwrite

// dims("x", {8, 1, 28, 28}) is "x(8,1,28,28)"
inline std::string dims(const char* name, std::initializer_list<int> d) {
  std::string s = name;
  s += '(';
  for (int v : d) {
    if (s.back() != '(') s += ',';
    s += std::to_string(v);
  }
  return s + ")";
}

}  // namespace dpb::op_case_io
