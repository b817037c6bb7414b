// cpu_reference_test_util.h: helpers the CPU reference tests share (test_cpu_reference.cpp,
// test_cpu_reference_device.cpp, test_optimizer_loss.cpp): random vectors, a CPU device with
// host <-> device copies, an element-wise tolerance check, and one batch-norm layer's device
// buffers. In their own namespace: names as short as Ctx and Vec stay out of dpb (the test
// files' `using namespace`).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "src/core/device.h"
#include "kernels/conformance/op_case_io.h"
#include "kernels/cpu/cpu_device.h"

namespace dpb::cpu_reference_test {

using Vec = std::vector<float>;

using op_case_io::rand_vec;  // uniform in [lo, hi), the op table's inputs (op_case_io.h)

struct Ctx {  // a device plus helpers to move vectors in and out
  std::unique_ptr<Device> dev;
  explicit Ctx(int threads = 1) : dev(make_cpu_device(0, threads)) {}
  Buffer buf(size_t n) { return Buffer(*dev, n, MemCategory::Temporaries, "test"); }
  Buffer up(const Vec& v) {
    Buffer b = buf(v.size());
    dev->upload(b.get(), v.data(), v.size());
    return b;
  }
  Vec down(const Buffer& b) {
    Vec v(b.size());
    dev->download(v.data(), b.get(), v.size());
    return v;
  }
};

inline void expect_near_all(const Vec& got, const Vec& want, float atol, float rtol,
                            const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i)
    if (!(std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i])))
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << " want " << want[i], ++bad;
}

struct BnBufs {  // device buffers for one batch-norm layer
  Buffer x, gamma, beta, y, rm, rv, sm, si;
  BnBufs(Ctx& t, const BnShape& s, const Vec& x_, const Vec& g_, const Vec& b_)
      : x(t.up(x_)),
        gamma(t.up(g_)),
        beta(t.up(b_)),
        y(t.buf(s.size())),
        rm(t.up(Vec(s.c, 0.5f))),
        rv(t.up(Vec(s.c, 2.0f))),
        sm(t.buf(s.c)),
        si(t.buf(s.c)) {}
  void train(Device& d, const BnShape& s) {
    d.batchnorm_forward_train(s, x.get(), gamma.get(), beta.get(), y.get(), rm.get(), rv.get(),
                              sm.get(), si.get());
  }
};

}  // namespace dpb::cpu_reference_test
