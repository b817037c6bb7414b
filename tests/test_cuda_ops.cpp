// test_cuda_ops.cpp: every CUDA op (kernels/cuda) against its CPU twin (kernels/cpu) on fresh
// random inputs, |gpu - cpu| <= atol + rtol * |cpu|, printing the first mismatches and the max
// error; plus memory, data loading, stream/event ordering, comm ops between devices (two ranks
// sharing GPU 0, and GPUs 0 and 1 when there are two) and error messages.
// Compiled only with CUDA; without a GPU every test skips. Run: ctest --test-dir build-cuda -R CudaOps
#ifdef DPB_HAVE_CUDA
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_device.h"
#include "src/core/check.h"
#include "src/core/device.h"

namespace dpb {
namespace {

using Vec = std::vector<float>;

#define REQUIRE_GPU()                                                                  \
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU: " << cuda_unavailable_reason()

Vec rand_vec(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  Vec v(n);
  for (auto& x : v) x = u(g);
  return v;
}

float max_abs(const Vec& v) {
  float m = 0.f;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

// |got - ref| <= atol + rtol*|ref| everywhere; on failure lists the first mismatches and the max.
::testing::AssertionResult close(const char* what, const Vec& got, const Vec& ref, float atol,
                                 float rtol) {
  if (got.size() != ref.size())
    return ::testing::AssertionFailure() << what << ": size " << got.size() << " vs " << ref.size();
  std::ostringstream first;
  size_t bad = 0, worst = 0;
  double max_err = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double err = std::fabs(double(got[i]) - ref[i]);
    if (!(err <= max_err)) max_err = err, worst = i;  // NaN counts as the worst
    if (!(err <= atol + rtol * std::fabs(ref[i])) && bad++ < 5)
      first << "\n  [" << i << "] gpu " << got[i] << " cpu " << ref[i];
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << bad << " of " << got.size()
                                       << " mismatch (atol " << atol << ", rtol " << rtol
                                       << "); max error " << max_err << " at [" << worst << "]"
                                       << first.str();
}

// The same buffers on the CPU twin and on a CUDA device; run the op on both, compare.
struct Twin {
  std::unique_ptr<Device> cpu, gpu;
  explicit Twin(bool tf32 = false) : cpu(make_cpu_device(0, 2)), gpu(make_cuda_device(0, 0, tf32)) {}
  struct Pair {
    Buffer c, g;
    size_t size() const { return c.size(); }
  };
  Pair up(const Vec& v) {
    Pair p{Buffer(*cpu, v.size(), "test"), Buffer(*gpu, v.size(), "test")};
    cpu->upload(p.c.get(), v.data(), v.size());
    gpu->upload(p.g.get(), v.data(), v.size());
    return p;
  }
  Pair zeros(size_t n) { return Pair{Buffer(*cpu, n, "test"), Buffer(*gpu, n, "test")}; }
  Vec down_c(const Pair& p) {
    Vec v(p.size());
    cpu->download(v.data(), p.c.get(), v.size());
    return v;
  }
  Vec down_g(const Pair& p) {
    gpu->synchronize();
    Vec v(p.size());
    gpu->download(v.data(), p.g.get(), v.size());
    return v;
  }
  ::testing::AssertionResult check(const char* what, const Pair& p, float atol, float rtol) {
    return close(what, down_g(p), down_c(p), atol, rtol);
  }
};

// Absolute tolerance for a GEMM-like output: relative to its largest entry, since long sums
// cancel to entries far below their terms. TF32 keeps 10 mantissa bits; float32 23.
// float32 gets 5e-5 of the largest entry: cudnnFind may pick Winograd or FFT algorithms, whose
// error reaches ~1e-5 of it.
float out_tol(const Vec& ref, bool tf32) { return (tf32 ? 1e-2f : 5e-5f) * max_abs(ref) + 1e-5f; }

ConvShape conv_shape(int n, int c, int h, int w, int k, int r, int s, int pad, int stride) {
  ConvShape cs;
  cs.n = n, cs.c = c, cs.h = h, cs.w = w, cs.k = k, cs.r = r, cs.s = s, cs.pad = pad;
  cs.stride = stride;
  return cs;
}

void conv_case(const ConvShape& s, bool tf32, uint32_t seed) {
  SCOPED_TRACE("conv x(" + std::to_string(s.n) + "," + std::to_string(s.c) + "," +
               std::to_string(s.h) + "," + std::to_string(s.w) + ") k " + std::to_string(s.k) +
               " " + std::to_string(s.r) + "x" + std::to_string(s.s) + " pad " +
               std::to_string(s.pad) + " stride " + std::to_string(s.stride) +
               (tf32 ? " tf32" : ""));
  Twin t(tf32);
  auto x = t.up(rand_vec(s.x_size(), seed)), w = t.up(rand_vec(s.w_size(), seed + 1, -.2f, .2f));
  auto b = t.up(rand_vec(s.k, seed + 2)), dy = t.up(rand_vec(s.y_size(), seed + 3));
  auto y = t.zeros(s.y_size()), dx = t.zeros(s.x_size()), dw = t.zeros(s.w_size());
  auto db = t.zeros(s.k);
  auto tol = [&](const Twin::Pair& p) { return out_tol(t.down_c(p), tf32); };
  for (int rep = 0; rep < 2; ++rep) {  // second pass: cached plan and algorithms
    t.cpu->conv2d_forward(s, x.c.get(), w.c.get(), b.c.get(), y.c.get());
    t.gpu->conv2d_forward(s, x.g.get(), w.g.get(), b.g.get(), y.g.get());
    t.cpu->conv2d_backward(s, x.c.get(), w.c.get(), dy.c.get(), dx.c.get(), dw.c.get(), db.c.get());
    t.gpu->conv2d_backward(s, x.g.get(), w.g.get(), dy.g.get(), dx.g.get(), dw.g.get(), db.g.get());
    EXPECT_TRUE(t.check("conv y", y, tol(y), 1e-3f));
    EXPECT_TRUE(t.check("conv dx", dx, tol(dx), 1e-3f));
    EXPECT_TRUE(t.check("conv dw", dw, tol(dw), 1e-3f));
    EXPECT_TRUE(t.check("conv db", db, tol(db), 1e-3f));
  }
  // First layer: no dx; dw and db must still be overwritten, not accumulated.
  t.gpu->conv2d_backward(s, x.g.get(), w.g.get(), dy.g.get(), nullptr, dw.g.get(), db.g.get());
  EXPECT_TRUE(t.check("conv dw (dx null)", dw, tol(dw), 1e-3f));
  EXPECT_TRUE(t.check("conv db (dx null)", db, tol(db), 1e-3f));
}

TEST(CudaOps, ConvMatchesCpu) {
  REQUIRE_GPU();
  conv_case(conv_shape(8, 1, 28, 28, 6, 5, 5, 2, 1), false, 1);   // LeNet conv1
  conv_case(conv_shape(8, 6, 14, 14, 16, 5, 5, 0, 1), false, 2);  // LeNet conv2
  conv_case(conv_shape(4, 8, 12, 12, 16, 3, 3, 1, 1), false, 3);  // ResNet 3x3
  conv_case(conv_shape(4, 8, 12, 12, 16, 3, 3, 1, 2), false, 4);  // ResNet 3x3 stride 2
  conv_case(conv_shape(4, 8, 12, 12, 16, 1, 1, 0, 2), false, 5);  // ResNet 1x1 shortcut
  conv_case(conv_shape(2, 2, 6, 7, 3, 2, 3, 2, 2), false, 6);     // rectangular, odd sizes
  conv_case(conv_shape(4, 1, 96, 96, 64, 7, 7, 3, 2), false, 7);  // ResNet-18 stem
}

TEST(CudaOps, ConvTf32WithinTf32Tolerance) {
  REQUIRE_GPU();
  conv_case(conv_shape(4, 8, 12, 12, 16, 3, 3, 1, 1), true, 11);
  conv_case(conv_shape(8, 6, 14, 14, 16, 5, 5, 0, 1), true, 12);
}

void dense_case(int n, int in, int out, bool tf32, uint32_t seed) {
  SCOPED_TRACE("dense n " + std::to_string(n) + " in " + std::to_string(in) + " out " +
               std::to_string(out) + (tf32 ? " tf32" : ""));
  Twin t(tf32);
  auto x = t.up(rand_vec(size_t(n) * in, seed)), w = t.up(rand_vec(size_t(in) * out, seed + 1));
  auto b = t.up(rand_vec(out, seed + 2)), dy = t.up(rand_vec(size_t(n) * out, seed + 3));
  auto y = t.zeros(size_t(n) * out), dx = t.zeros(size_t(n) * in), dw = t.zeros(size_t(in) * out);
  auto db = t.zeros(out);
  t.cpu->dense_forward(n, in, out, x.c.get(), w.c.get(), b.c.get(), y.c.get());
  t.gpu->dense_forward(n, in, out, x.g.get(), w.g.get(), b.g.get(), y.g.get());
  t.cpu->dense_backward(n, in, out, x.c.get(), w.c.get(), dy.c.get(), dx.c.get(), dw.c.get(),
                        db.c.get());
  t.gpu->dense_backward(n, in, out, x.g.get(), w.g.get(), dy.g.get(), dx.g.get(), dw.g.get(),
                        db.g.get());
  auto tol = [&](const Twin::Pair& p) { return out_tol(t.down_c(p), tf32); };
  EXPECT_TRUE(t.check("dense y", y, tol(y), 1e-3f));
  EXPECT_TRUE(t.check("dense dx", dx, tol(dx), 1e-3f));
  EXPECT_TRUE(t.check("dense dw", dw, tol(dw), 1e-3f));
  EXPECT_TRUE(t.check("dense db", db, tol(db), 1e-3f));
  t.gpu->fill(dw.g.get(), 7.f, dw.size());
  t.gpu->dense_backward(n, in, out, x.g.get(), w.g.get(), dy.g.get(), nullptr, dw.g.get(),
                        db.g.get());
  EXPECT_TRUE(t.check("dense dw (dx null, overwritten)", dw, tol(dw), 1e-3f));
}

TEST(CudaOps, DenseMatchesCpu) {
  REQUIRE_GPU();
  dense_case(8, 800, 128, false, 21);  // LeNet fc1 (row-major (in, out) weights)
  dense_case(5, 3, 7, false, 22);      // tiny, odd
  dense_case(256, 128, 10, false, 23);
  dense_case(64, 512, 10, true, 24);
}

TEST(CudaOps, PoolingMatchesCpu) {
  REQUIRE_GPU();
  Twin t;
  for (auto [h, w, win, stride] : {std::array<int, 4>{8, 8, 2, 2}, {7, 9, 3, 2}, {5, 5, 2, 2},
                                   {6, 6, 3, 1}}) {
    SCOPED_TRACE("pool " + std::to_string(h) + "x" + std::to_string(w) + " win " +
                 std::to_string(win) + " stride " + std::to_string(stride));
    PoolShape s;
    s.n = 3, s.c = 4, s.h = h, s.w = w, s.win = win, s.stride = stride;
    auto x = t.up(rand_vec(s.x_size(), 31)), dy = t.up(rand_vec(s.y_size(), 32));
    auto y = t.zeros(s.y_size()), dx = t.up(rand_vec(s.x_size(), 33));  // dx overwritten
    t.cpu->avgpool_forward(s, x.c.get(), y.c.get());
    t.gpu->avgpool_forward(s, x.g.get(), y.g.get());
    t.cpu->avgpool_backward(s, dy.c.get(), dx.c.get());
    t.gpu->avgpool_backward(s, dy.g.get(), dx.g.get());
    EXPECT_TRUE(t.check("avgpool y", y, 1e-6f, 1e-5f));
    EXPECT_TRUE(t.check("avgpool dx", dx, 1e-6f, 1e-5f));
  }
  for (auto [n, c, hw] : {std::array<int, 3>{4, 5, 49}, {3, 7, 1}, {2, 3, 100}}) {
    SCOPED_TRACE("gap " + std::to_string(n) + "x" + std::to_string(c) + "x" + std::to_string(hw));
    size_t total = size_t(n) * c * hw;
    auto x = t.up(rand_vec(total, 34)), dy = t.up(rand_vec(size_t(n) * c, 35));
    auto y = t.zeros(size_t(n) * c), dx = t.zeros(total);
    t.cpu->gap_forward(n, c, hw, x.c.get(), y.c.get());
    t.gpu->gap_forward(n, c, hw, x.g.get(), y.g.get());
    t.cpu->gap_backward(n, c, hw, dy.c.get(), dx.c.get());
    t.gpu->gap_backward(n, c, hw, dy.g.get(), dx.g.get());
    EXPECT_TRUE(t.check("gap y", y, 1e-6f, 1e-5f));
    EXPECT_TRUE(t.check("gap dx", dx, 1e-7f, 1e-6f));
  }
}

TEST(CudaOps, ElementwiseMatchesCpu) {
  REQUIRE_GPU();
  Twin t;
  const size_t n = 100003;  // not a multiple of any block size
  auto x = t.up(rand_vec(n, 41)), dy = t.up(rand_vec(n, 42)), g = t.up(rand_vec(n, 43));
  auto y = t.zeros(n), dx = t.zeros(n);
  t.cpu->relu_forward(x.c.get(), y.c.get(), n);
  t.gpu->relu_forward(x.g.get(), y.g.get(), n);
  EXPECT_TRUE(t.check("relu y", y, 0, 0));
  t.cpu->relu_backward(y.c.get(), dy.c.get(), dx.c.get(), n);
  t.gpu->relu_backward(y.g.get(), dy.g.get(), dx.g.get(), n);
  EXPECT_TRUE(t.check("relu dx", dx, 0, 0));
  t.cpu->relu_backward(y.c.get(), dy.c.get(), dy.c.get(), n);  // in place
  t.gpu->relu_backward(y.g.get(), dy.g.get(), dy.g.get(), n);
  EXPECT_TRUE(t.check("relu dx in place", dy, 0, 0));
  t.cpu->relu_forward(x.c.get(), x.c.get(), n);
  t.gpu->relu_forward(x.g.get(), x.g.get(), n);
  EXPECT_TRUE(t.check("relu y in place", x, 0, 0));
  t.cpu->axpy(-0.375f, g.c.get(), y.c.get(), n);
  t.gpu->axpy(-0.375f, g.g.get(), y.g.get(), n);
  EXPECT_TRUE(t.check("axpy", y, 1e-7f, 1e-6f));  // the GPU may fuse a*x+y
  t.cpu->sgd_step(y.c.get(), g.c.get(), 0.1f, n);
  t.gpu->sgd_step(y.g.get(), g.g.get(), 0.1f, n);
  EXPECT_TRUE(t.check("sgd_step", y, 1e-7f, 1e-6f));
  t.cpu->fill(dx.c.get(), 2.5f, n);
  t.gpu->fill(dx.g.get(), 2.5f, n);
  EXPECT_TRUE(t.check("fill", dx, 0, 0));
  t.cpu->copy(dx.c.get(), g.c.get(), n - 1);
  t.gpu->copy(dx.g.get(), g.g.get(), n - 1);
  EXPECT_TRUE(t.check("copy", dx, 0, 0));
}

TEST(CudaOps, SoftmaxXentMatchesCpu) {
  REQUIRE_GPU();
  Twin t;
  for (auto [n, classes] : {std::array<int, 2>{37, 10}, {5, 100}, {256, 10}}) {
    SCOPED_TRACE("softmax_xent n " + std::to_string(n) + " classes " + std::to_string(classes));
    auto logits = t.up(rand_vec(size_t(n) * classes, 51, -4.f, 4.f));
    Vec lab(n);
    std::mt19937 gen(52);
    for (auto& l : lab) l = float(gen() % classes);
    auto labels = t.up(lab);
    auto d = t.up(rand_vec(size_t(n) * classes, 53)), stats = t.up({1.5f, 2.f});  // accumulates
    float scale = 1.f / n;
    t.cpu->softmax_xent(n, classes, logits.c.get(), labels.c.get(), scale, d.c.get(), stats.c.get());
    t.gpu->softmax_xent(n, classes, logits.g.get(), labels.g.get(), scale, d.g.get(), stats.g.get());
    EXPECT_TRUE(t.check("dlogits", d, 1e-7f, 1e-5f));
    EXPECT_TRUE(t.check("stats", stats, 1e-5f, 1e-5f));
    t.cpu->softmax_xent(n, classes, logits.c.get(), labels.c.get(), 1.f, nullptr, stats.c.get());
    t.gpu->softmax_xent(n, classes, logits.g.get(), labels.g.get(), 1.f, nullptr, stats.g.get());
    EXPECT_TRUE(t.check("stats (eval, no dlogits)", stats, 1e-4f, 1e-5f));
  }
}

TEST(CudaOps, BatchNormMatchesCpu) {
  REQUIRE_GPU();
  Twin t;
  for (auto [n, c, hw] : {std::array<int, 3>{8, 6, 49}, {16, 10, 1}, {4, 64, 36}}) {
    SCOPED_TRACE("batchnorm " + std::to_string(n) + "x" + std::to_string(c) + "x" +
                 std::to_string(hw));
    BnShape s;
    s.n = n, s.c = c, s.hw = hw;
    auto x = t.up(rand_vec(s.size(), 61, 0.5f, 3.f)), dy = t.up(rand_vec(s.size(), 62));
    auto gamma = t.up(rand_vec(c, 63, 0.5f, 1.5f)), beta = t.up(rand_vec(c, 64));
    auto rmean = t.up(rand_vec(c, 65)), rvar = t.up(rand_vec(c, 66, 0.5f, 2.f));
    auto y = t.zeros(s.size()), smean = t.zeros(c), sinv = t.zeros(c);
    auto dx = t.zeros(s.size()), dgamma = t.zeros(c), dbeta = t.zeros(c);
    for (Device* d : {t.cpu.get(), t.gpu.get()}) {
      bool g = d == t.gpu.get();
      auto p = [g](Twin::Pair& b) { return g ? b.g.get() : b.c.get(); };
      d->batchnorm_forward_train(s, p(x), p(gamma), p(beta), p(y), p(rmean), p(rvar), p(smean),
                                 p(sinv));
      d->batchnorm_backward(s, p(x), p(dy), p(gamma), p(smean), p(sinv), p(dx), p(dgamma),
                            p(dbeta));
    }
    EXPECT_TRUE(t.check("bn y", y, 1e-4f, 1e-4f));
    EXPECT_TRUE(t.check("bn running_mean", rmean, 1e-5f, 1e-4f));
    EXPECT_TRUE(t.check("bn running_var (unbiased)", rvar, 1e-5f, 1e-4f));
    EXPECT_TRUE(t.check("bn save_mean", smean, 1e-5f, 1e-4f));
    EXPECT_TRUE(t.check("bn save_invstd", sinv, 1e-5f, 1e-4f));
    EXPECT_TRUE(t.check("bn dx", dx, 1e-4f, 1e-3f));
    EXPECT_TRUE(t.check("bn dgamma", dgamma, 1e-4f, 1e-3f));
    EXPECT_TRUE(t.check("bn dbeta", dbeta, 1e-4f, 1e-4f));
    t.cpu->batchnorm_forward_infer(s, x.c.get(), gamma.c.get(), beta.c.get(), rmean.c.get(),
                                   rvar.c.get(), y.c.get());
    t.gpu->batchnorm_forward_infer(s, x.g.get(), gamma.g.get(), beta.g.get(), rmean.g.get(),
                                   rvar.g.get(), y.g.get());
    EXPECT_TRUE(t.check("bn infer y", y, 1e-4f, 1e-4f));
  }
}

TEST(CudaOps, LoadImagesAndLabels) {
  REQUIRE_GPU();
  Twin t;
  std::mt19937 gen(71);
  for (size_t n : {size_t(784 * 3), size_t(784 * 64 + 5), size_t(100)}) {  // grow, then reuse
    std::vector<uint8_t> bytes(n);
    for (auto& b : bytes) b = uint8_t(gen());
    auto img = t.zeros(n), lab = t.zeros(n);
    t.cpu->load_images(img.c.get(), bytes.data(), n);
    t.gpu->load_images(img.g.get(), bytes.data(), n);
    for (auto& b : bytes) b = uint8_t(gen() % 10);
    t.cpu->load_labels(lab.c.get(), bytes.data(), n);
    t.gpu->load_labels(lab.g.get(), bytes.data(), n);  // reuses the staging just used
    EXPECT_TRUE(t.check("load_images", img, 0, 0));
    EXPECT_TRUE(t.check("load_labels", lab, 0, 0));
  }
}

// dst += src for aligned and misaligned offsets, between devices a and b (b's memory as src).
void reduce_cases(Device& a, Device& b) {
  for (size_t n : {size_t(1), size_t(5), size_t(1027), size_t(1) << 20}) {
    for (auto [od, os] : {std::array<size_t, 2>{0, 0}, {1, 1}, {1, 2}, {3, 0}}) {
      SCOPED_TRACE("n " + std::to_string(n) + " offsets " + std::to_string(od) + "," +
                   std::to_string(os));
      Vec d = rand_vec(n + 4, 81), s = rand_vec(n + 4, 82), want = d;
      for (size_t i = 0; i < n; ++i) want[od + i] = d[od + i] + s[os + i];
      Buffer bd(a, n + 4, "dst"), bs(b, n + 4, "src"), bc(a, n + 4, "copy");
      a.upload(bd.get(), d.data(), d.size());
      b.upload(bs.get(), s.data(), s.size());
      b.comm_wait_compute();  // b's upload is ordered on its compute stream
      b.comm_record();
      a.comm_wait_compute();
      a.comm_wait_peer(b);
      a.comm_reduce(bd.get() + od, bs.get() + os, n);
      a.comm_copy(bc.get(), bs.get(), n + 4);
      a.comm_synchronize();
      Vec got(n + 4), copied(n + 4);
      a.download(got.data(), bd.get(), got.size());
      a.download(copied.data(), bc.get(), copied.size());
      EXPECT_TRUE(close("comm_reduce", got, want, 0, 0));
      EXPECT_TRUE(close("comm_copy", copied, s, 0, 0));
    }
  }
}

TEST(CudaOps, CommReduceAndCopy) {
  REQUIRE_GPU();
  auto a = make_cuda_device(0, 0, false), b = make_cuda_device(1, 0, false);  // sharing GPU 0
  reduce_cases(*a, *a);
  reduce_cases(*a, *b);
  if (cuda_device_count() >= 2) {
    auto c = make_cuda_device(1, 1, false);
    reduce_cases(*a, *c);
    reduce_cases(*c, *a);
  }
}

// Work on the compute stream, handed to the comm stream and back, on buffers big enough that a
// missing wait would show.
TEST(CudaOps, StreamOrdering) {
  REQUIRE_GPU();
  auto d = make_cuda_device(0, 0, false);
  const size_t n = size_t(1) << 24;
  Buffer x(*d, n, "x"), y(*d, n, "y");
  for (int rep = 0; rep < 3; ++rep) {
    d->fill(x.get(), 1.f + rep, n);
    d->fill(y.get(), 0.f, n);
    d->comm_wait_compute();
    d->comm_reduce(y.get(), x.get(), n);  // y = 1 + rep
    d->comm_reduce(y.get(), x.get(), n);  // y = 2 (1 + rep)
    d->compute_wait_comm();
    d->axpy(1.f, x.get(), y.get(), n);  // y = 3 (1 + rep)
    Vec got(n);
    d->download(got.data(), y.get(), n);
    size_t bad = std::count_if(got.begin(), got.end(), [&](float v) { return v != 3.f * (1 + rep); });
    EXPECT_EQ(bad, 0u) << "rep " << rep << ": got[0] " << got[0] << " got[n-1] " << got[n - 1];
  }
}

TEST(CudaOps, ErrorsNameTheProblem) {
  REQUIRE_GPU();
  auto d = make_cuda_device(0, 0, false);
  EXPECT_NE(d->name().find("cuda:0"), std::string::npos) << d->name();
  try {
    d->alloc(size_t(1) << 40, "giant activations");  // 4 TiB
    ADD_FAILURE() << "alloc of 4 TiB did not throw";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("giant activations"), std::string::npos) << m;
    EXPECT_NE(m.find("MB"), std::string::npos) << m;
    EXPECT_NE(m.find("free"), std::string::npos) << m;
  }
  Buffer ok(*d, 16, "after a failed alloc");  // the device still works
  EXPECT_THROW(make_cuda_device(0, cuda_device_count() + 3, false), Error);
  ConvShape bad = conv_shape(1, 1, 2, 2, 1, 5, 5, 0, 1);  // kernel larger than the input
  EXPECT_THROW(d->conv2d_forward(bad, ok.get(), ok.get(), ok.get(), ok.get()), Error);
}

TEST(CudaOps, SkipsCleanlyOrCountsGpus) {
  EXPECT_TRUE(cuda_built());
  int n = cuda_device_count();  // must not throw, with or without a driver
  EXPECT_GE(n, 0);
  if (n == 0) EXPECT_FALSE(cuda_unavailable_reason().empty());
  std::printf("CUDA: %d GPU(s); %s\n", n, cuda_library_versions().c_str());
  REQUIRE_GPU();
  for (int g = 0; g < n; ++g) std::printf("  %s\n", make_cuda_device(g, g, false)->name().c_str());
}

}  // namespace
}  // namespace dpb
#endif  // DPB_HAVE_CUDA
