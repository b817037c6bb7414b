// test_cpu_ops.cpp: CPU backend (kernels/cpu) op tests: forwards against naive reference loops,
// every backward against central finite differences of its forward (L = sum(g * y) for a random
// g), batch-norm running statistics, memory and communication ops, errors, and two devices used
// concurrently. Run: ctest --test-dir build -R CpuOps (well under 30 s).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "src/core/check.h"
#include "src/core/device.h"

namespace dpb {
namespace {

using Vec = std::vector<float>;

Vec rand_vec(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  Vec v(n);
  for (auto& x : v) x = u(g);
  return v;
}

struct Ctx {  // a device plus helpers to move vectors in and out
  std::unique_ptr<Device> dev;
  explicit Ctx(int threads = 1) : dev(make_cpu_device(0, threads)) {}
  Buffer up(const Vec& v) {
    Buffer b(*dev, v.size(), "test");
    dev->upload(b.get(), v.data(), v.size());
    return b;
  }
  Vec down(const Buffer& b) {
    Vec v(b.size());
    dev->download(v.data(), b.get(), v.size());
    return v;
  }
};

void expect_near_all(const Vec& got, const Vec& want, float atol, float rtol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i)
    if (!(std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i])))
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << " want " << want[i], ++bad;
}

// Checks the analytic gradient `grad` of L(inputs) with respect to inputs[k] by central
// differences on every entry (up to 400 evenly spread ones for larger inputs). loss() reads the
// (host) inputs.
void grad_check(std::vector<Vec*> inputs, const std::vector<Vec>& grads,
                const std::function<double()>& loss, float eps, float atol, float rtol,
                const char* what) {
  for (size_t k = 0; k < inputs.size(); ++k) {
    Vec& in = *inputs[k];
    const size_t step = std::max<size_t>(1, in.size() / 400);
    for (size_t i = 0; i < in.size(); i += step) {
      const float x0 = in[i];
      in[i] = x0 + eps;
      const double lp = loss();
      in[i] = x0 - eps;
      const double lm = loss();
      in[i] = x0;
      const double num = (lp - lm) / (2.0 * eps), ana = grads[k][i];
      EXPECT_LE(std::fabs(num - ana), atol + rtol * std::fabs(num))
          << what << ": input " << k << " index " << i << " numeric " << num << " analytic " << ana;
    }
  }
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += double(a[i]) * b[i];
  return s;
}

// ---- convolution ----

Vec conv_ref(const ConvShape& s, const Vec& x, const Vec& w, const Vec& b) {
  Vec y(s.y_size());
  for (int n = 0; n < s.n; ++n)
    for (int k = 0; k < s.k; ++k)
      for (int i = 0; i < s.oh(); ++i)
        for (int j = 0; j < s.ow(); ++j) {
          double acc = b[k];
          for (int c = 0; c < s.c; ++c)
            for (int u = 0; u < s.r; ++u)
              for (int v = 0; v < s.s; ++v) {
                const int yy = i * s.stride - s.pad + u, xx = j * s.stride - s.pad + v;
                if (yy < 0 || yy >= s.h || xx < 0 || xx >= s.w) continue;
                acc += double(x[((size_t(n) * s.c + c) * s.h + yy) * s.w + xx]) *
                       w[((size_t(k) * s.c + c) * s.r + u) * s.s + v];
              }
          y[((size_t(n) * s.k + k) * s.oh() + i) * s.ow() + j] = float(acc);
        }
  return y;
}

ConvShape conv_shape(int n, int c, int h, int w, int k, int r, int s, int pad, int stride) {
  ConvShape cs;
  cs.n = n, cs.c = c, cs.h = h, cs.w = w, cs.k = k, cs.r = r, cs.s = s, cs.pad = pad;
  cs.stride = stride;
  return cs;
}

TEST(CpuOps, ConvForwardMatchesReference) {
  Ctx t(2);
  for (const ConvShape& s :
       {conv_shape(2, 1, 28, 28, 20, 3, 3, 0, 1), conv_shape(2, 20, 13, 13, 50, 5, 5, 0, 1),
        conv_shape(3, 5, 9, 8, 6, 3, 3, 1, 2), conv_shape(2, 3, 7, 6, 4, 3, 2, 2, 1),
        conv_shape(2, 1, 28, 28, 20, 3, 3, 0, 1)}) {  // cached again
    Vec x = rand_vec(s.x_size(), 1), w = rand_vec(s.w_size(), 2), b = rand_vec(s.k, 3);
    Buffer dx = t.up(x), dw = t.up(w), db = t.up(b), dy(*t.dev, s.y_size(), "y");
    t.dev->conv2d_forward(s, dx.get(), dw.get(), db.get(), dy.get());
    expect_near_all(t.down(dy), conv_ref(s, x, w, b), 1e-4f, 1e-4f, "conv y");
  }
}

void conv_grad_check(const ConvShape& s, bool with_dx) {
  Ctx t(1);
  Vec x = rand_vec(s.x_size(), 4), w = rand_vec(s.w_size(), 5), b = rand_vec(s.k, 6);
  const Vec g = rand_vec(s.y_size(), 7);
  Buffer bx = t.up(x), bw = t.up(w), bg = t.up(g), by(*t.dev, s.y_size(), "y");
  Buffer bb = t.up(b), bdx(*t.dev, s.x_size(), "dx"), bdw(*t.dev, s.w_size(), "dw"),
         bdb(*t.dev, s.k, "db");
  t.dev->fill(bdw.get(), 7.0f, s.w_size());  // must be overwritten, not accumulated
  t.dev->conv2d_backward(s, bx.get(), bw.get(), bg.get(), with_dx ? bdx.get() : nullptr, bdw.get(),
                         bdb.get());
  auto loss = [&] {
    Buffer px = t.up(x), pw = t.up(w), pb = t.up(b);
    t.dev->conv2d_forward(s, px.get(), pw.get(), pb.get(), by.get());
    return dot(t.down(by), g);
  };
  // Linear in each input: a large step is exact up to rounding.
  if (with_dx)
    grad_check({&x, &w, &b}, {t.down(bdx), t.down(bdw), t.down(bdb)}, loss, 0.25f, 1e-4f, 1e-3f,
               "conv");
  else
    grad_check({&w, &b}, {t.down(bdw), t.down(bdb)}, loss, 0.25f, 1e-4f, 1e-3f, "conv (no dx)");
}

TEST(CpuOps, ConvBackwardPadStride1) {
  conv_grad_check(conv_shape(2, 3, 7, 6, 4, 3, 3, 1, 1), true);
}
TEST(CpuOps, ConvBackwardPadStride2) {
  conv_grad_check(conv_shape(2, 3, 8, 7, 5, 3, 3, 1, 2), true);
}
TEST(CpuOps, ConvBackwardRectKernel) {
  conv_grad_check(conv_shape(2, 2, 6, 7, 3, 2, 3, 2, 2), true);
}
TEST(CpuOps, ConvBackwardFirstLayerNoDx) {
  conv_grad_check(conv_shape(2, 1, 10, 10, 6, 3, 3, 0, 1), false);
}

// Channel-blocked layouts (c, k >= 16), stride 2, 1x1 projections and weights at unaligned
// offsets (models keep all parameters in one flat buffer), against a double-precision reference.
TEST(CpuOps, ConvBackwardBlockedShapesMatchReference) {
  Ctx t(2);
  for (const ConvShape& s :
       {conv_shape(2, 32, 12, 12, 48, 3, 3, 1, 2), conv_shape(2, 32, 12, 12, 48, 1, 1, 0, 2),
        conv_shape(2, 20, 13, 13, 50, 5, 5, 0, 1)}) {
    const Vec x = rand_vec(s.x_size(), 30), w = rand_vec(s.w_size(), 31),
              dy = rand_vec(s.y_size(), 32);
    std::vector<double> dx(s.x_size()), dw(s.w_size()), db(s.k);
    for (int n = 0; n < s.n; ++n)
      for (int k = 0; k < s.k; ++k)
        for (int i = 0; i < s.oh(); ++i)
          for (int j = 0; j < s.ow(); ++j) {
            const double g = dy[((size_t(n) * s.k + k) * s.oh() + i) * s.ow() + j];
            db[k] += g;
            for (int c = 0; c < s.c; ++c)
              for (int u = 0; u < s.r; ++u)
                for (int v = 0; v < s.s; ++v) {
                  const int yy = i * s.stride - s.pad + u, xx = j * s.stride - s.pad + v;
                  if (yy < 0 || yy >= s.h || xx < 0 || xx >= s.w) continue;
                  const size_t xi = ((size_t(n) * s.c + c) * s.h + yy) * s.w + xx;
                  const size_t wi = ((size_t(k) * s.c + c) * s.r + u) * s.s + v;
                  dx[xi] += g * w[wi], dw[wi] += g * x[xi];
                }
          }
    Buffer bx = t.up(x), bdy = t.up(dy), bw(*t.dev, s.w_size() + 3, "w"),
           bdx(*t.dev, s.x_size(), "dx");
    Buffer g(*t.dev, s.w_size() + s.k + 1, "grads");
    t.dev->upload(bw.get() + 3, w.data(), w.size());
    t.dev->conv2d_backward(s, bx.get(), bw.get() + 3, bdy.get(), bdx.get(), g.get() + 1,
                           g.get() + 1 + s.w_size());
    const Vec gv = t.down(g);
    expect_near_all(t.down(bdx), Vec(dx.begin(), dx.end()), 1e-4f, 1e-4f, "blocked conv dx");
    expect_near_all(Vec(gv.begin() + 1, gv.begin() + 1 + s.w_size()), Vec(dw.begin(), dw.end()),
                    1e-3f, 1e-4f, "blocked conv dw");
    expect_near_all(Vec(gv.begin() + 1 + s.w_size(), gv.end()), Vec(db.begin(), db.end()), 1e-3f,
                    1e-4f, "blocked conv db");
  }
}

// ---- dense ----

TEST(CpuOps, DenseForwardAndBackward) {
  Ctx t(2);
  const int n = 5, in = 7, out = 4;
  Vec x = rand_vec(n * in, 8), w = rand_vec(in * out, 9), b = rand_vec(out, 10);
  const Vec g = rand_vec(n * out, 11);
  Vec ref(n * out);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < out; ++j) {
      double acc = b[j];
      for (int p = 0; p < in; ++p) acc += double(x[i * in + p]) * w[p * out + j];
      ref[i * out + j] = float(acc);
    }
  Buffer bx = t.up(x), bw = t.up(w), bb = t.up(b), by(*t.dev, n * out, "y"), bg = t.up(g);
  t.dev->dense_forward(n, in, out, bx.get(), bw.get(), bb.get(), by.get());
  expect_near_all(t.down(by), ref, 1e-5f, 1e-5f, "dense y");
  Buffer bdx(*t.dev, n * in, "dx"), bdw(*t.dev, in * out, "dw"), bdb(*t.dev, out, "db");
  t.dev->fill(bdw.get(), 3.0f, in * out);
  t.dev->fill(bdb.get(), 3.0f, out);
  t.dev->dense_backward(n, in, out, bx.get(), bw.get(), bg.get(), bdx.get(), bdw.get(), bdb.get());
  auto loss = [&] {
    Buffer px = t.up(x), pw = t.up(w), pb = t.up(b);
    t.dev->dense_forward(n, in, out, px.get(), pw.get(), pb.get(), by.get());
    return dot(t.down(by), g);
  };
  grad_check({&x, &w, &b}, {t.down(bdx), t.down(bdw), t.down(bdb)}, loss, 0.25f, 1e-4f, 1e-4f,
             "dense");
  Vec dw1 = t.down(bdw);  // dx == nullptr leaves dw unchanged
  t.dev->dense_backward(n, in, out, bx.get(), bw.get(), bg.get(), nullptr, bdw.get(), bdb.get());
  expect_near_all(t.down(bdw), dw1, 0, 0, "dense dw without dx");
}

// ---- pooling ----

TEST(CpuOps, AvgPoolForwardAndBackward) {
  for (auto [h, w, win, stride] : {std::array{6, 8, 2, 2}, std::array{9, 7, 2, 2},
                                   std::array{7, 5, 3, 2}, std::array{5, 5, 2, 1}}) {
    Ctx t(1);
    PoolShape s;
    s.n = 2, s.c = 3, s.h = h, s.w = w, s.win = win, s.stride = stride;
    Vec x = rand_vec(s.x_size(), 12);
    const Vec g = rand_vec(s.y_size(), 13);
    Vec ref(s.y_size());
    for (int p = 0; p < s.n * s.c; ++p)
      for (int i = 0; i < s.oh(); ++i)
        for (int j = 0; j < s.ow(); ++j) {
          double acc = 0;
          for (int u = 0; u < win; ++u)
            for (int v = 0; v < win; ++v) acc += x[(p * h + i * stride + u) * w + j * stride + v];
          ref[(p * s.oh() + i) * s.ow() + j] = float(acc / (win * win));
        }
    Buffer bx = t.up(x), by(*t.dev, s.y_size(), "y"), bg = t.up(g),
           bdx = t.up(rand_vec(s.x_size(), 1));
    t.dev->avgpool_forward(s, bx.get(), by.get());
    expect_near_all(t.down(by), ref, 1e-6f, 1e-5f, "avgpool y");
    t.dev->avgpool_backward(s, bg.get(), bdx.get());
    auto loss = [&] {
      Buffer px = t.up(x);
      t.dev->avgpool_forward(s, px.get(), by.get());
      return dot(t.down(by), g);
    };
    grad_check({&x}, {t.down(bdx)}, loss, 0.25f, 1e-4f, 1e-3f, "avgpool");
  }
}

TEST(CpuOps, GlobalAvgPoolForwardAndBackward) {
  Ctx t(1);
  const int n = 3, c = 4, hw = 10;
  Vec x = rand_vec(n * c * hw, 14);
  const Vec g = rand_vec(n * c, 15);
  Vec ref(n * c);
  for (int p = 0; p < n * c; ++p) {
    double acc = 0;
    for (int i = 0; i < hw; ++i) acc += x[p * hw + i];
    ref[p] = float(acc / hw);
  }
  Buffer bx = t.up(x), by(*t.dev, n * c, "y"), bg = t.up(g), bdx(*t.dev, n * c * hw, "dx");
  t.dev->gap_forward(n, c, hw, bx.get(), by.get());
  expect_near_all(t.down(by), ref, 1e-6f, 1e-5f, "gap y");
  t.dev->gap_backward(n, c, hw, bg.get(), bdx.get());
  auto loss = [&] {
    Buffer px = t.up(x);
    t.dev->gap_forward(n, c, hw, px.get(), by.get());
    return dot(t.down(by), g);
  };
  grad_check({&x}, {t.down(bdx)}, loss, 0.25f, 1e-4f, 1e-3f, "gap");
}

// ---- elementwise ----

TEST(CpuOps, ReluAndElementwise) {
  Ctx t(1);
  const size_t n = 101;
  Vec x = rand_vec(n, 16);
  for (auto& v : x) v = v < 0 ? v - 0.05f : v + 0.05f;  // keep |x| > eps for the check
  const Vec g = rand_vec(n, 17);
  Buffer bx = t.up(x), by(*t.dev, n, "y"), bg = t.up(g);
  t.dev->relu_forward(bx.get(), by.get(), n);
  Vec y = t.down(by);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(y[i], x[i] > 0 ? x[i] : 0.0f);
  t.dev->relu_backward(by.get(), bg.get(), bg.get(), n);  // in place
  auto loss = [&] {
    Buffer px = t.up(x);
    t.dev->relu_forward(px.get(), px.get(), n);  // in place
    return dot(t.down(px), g);
  };
  grad_check({&x}, {t.down(bg)}, loss, 1e-2f, 1e-5f, 1e-4f, "relu");

  Buffer a = t.up(Vec(n, 2.0f)), b = t.up(Vec(n, 1.0f));
  t.dev->axpy(0.5f, a.get(), b.get(), n);       // 1 + 0.5*2 = 2
  t.dev->sgd_step(b.get(), a.get(), 0.25f, n);  // 2 - 0.25*2 = 1.5
  expect_near_all(t.down(b), Vec(n, 1.5f), 0, 0, "axpy+sgd");
  t.dev->fill(a.get(), -3.0f, n);
  t.dev->copy(b.get(), a.get(), n);
  expect_near_all(t.down(b), Vec(n, -3.0f), 0, 0, "fill+copy");
  const uint8_t pix[4] = {0, 1, 128, 255};
  Buffer img(*t.dev, 4, "img");
  t.dev->load_images(img.get(), pix, 4);
  expect_near_all(t.down(img), {0.0f, 1.0f / 255, 128.0f / 255, 1.0f}, 0, 1e-7f, "images");
  t.dev->load_labels(img.get(), pix, 4);
  expect_near_all(t.down(img), {0.0f, 1.0f, 128.0f, 255.0f}, 0, 0, "labels");
}

// ---- batch norm ----

TEST(CpuOps, BatchNormTrainBackwardAndRunningStats) {
  Ctx t(1);
  BnShape s;
  s.n = 4, s.c = 3, s.hw = 5, s.momentum = 0.1f;
  const size_t m = size_t(s.n) * s.hw;
  Vec x = rand_vec(s.size(), 18, -2.0f, 3.0f), gamma = rand_vec(s.c, 19, 0.5f, 1.5f),
      beta = rand_vec(s.c, 20);
  const Vec g = rand_vec(s.size(), 21);
  Buffer bx = t.up(x), bgam = t.up(gamma), bbet = t.up(beta), by(*t.dev, s.size(), "y");
  Buffer rm = t.up(Vec(s.c, 0.5f)), rv = t.up(Vec(s.c, 2.0f)), sm(*t.dev, s.c, "sm"),
         si(*t.dev, s.c, "si");
  t.dev->batchnorm_forward_train(s, bx.get(), bgam.get(), bbet.get(), by.get(), rm.get(), rv.get(),
                                 sm.get(), si.get());
  // Reference statistics and output.
  Vec mean(s.c), var(s.c), yref(s.size()), rm_ref(s.c), rv_ref(s.c);
  for (int c = 0; c < s.c; ++c) {
    double sum = 0, sq = 0;
    for (int n = 0; n < s.n; ++n)
      for (int i = 0; i < s.hw; ++i) sum += x[(n * s.c + c) * s.hw + i];
    mean[c] = float(sum / m);
    for (int n = 0; n < s.n; ++n)
      for (int i = 0; i < s.hw; ++i) sq += std::pow(x[(n * s.c + c) * s.hw + i] - mean[c], 2);
    var[c] = float(sq / m);
    rm_ref[c] = 0.9f * 0.5f + 0.1f * mean[c];
    rv_ref[c] = float(0.9 * 2.0 + 0.1 * sq / (m - 1));
    for (int n = 0; n < s.n; ++n)
      for (int i = 0; i < s.hw; ++i) {
        const size_t k = (n * s.c + c) * s.hw + i;
        yref[k] = float(gamma[c] * (x[k] - mean[c]) / std::sqrt(var[c] + s.eps) + beta[c]);
      }
  }
  expect_near_all(t.down(by), yref, 1e-5f, 1e-4f, "bn y");
  expect_near_all(t.down(sm), mean, 1e-6f, 1e-5f, "bn save_mean");
  expect_near_all(t.down(rm), rm_ref, 1e-6f, 1e-5f, "bn running_mean");
  expect_near_all(t.down(rv), rv_ref, 1e-6f, 1e-5f, "bn running_var (unbiased)");

  Buffer bg = t.up(g), bdx(*t.dev, s.size(), "dx"), bdg(*t.dev, s.c, "dg"), bdb(*t.dev, s.c, "db");
  t.dev->batchnorm_backward(s, bx.get(), bg.get(), bgam.get(), sm.get(), si.get(), bdx.get(),
                            bdg.get(), bdb.get());
  auto loss = [&] {
    Buffer px = t.up(x), pg = t.up(gamma), pb = t.up(beta);
    t.dev->batchnorm_forward_train(s, px.get(), pg.get(), pb.get(), by.get(), rm.get(), rv.get(),
                                   sm.get(), si.get());
    return dot(t.down(by), g);
  };
  grad_check({&x, &gamma, &beta}, {t.down(bdx), t.down(bdg), t.down(bdb)}, loss, 1e-2f, 3e-4f,
             2e-3f, "batchnorm");
}

// Model-sized batch norm (parallel path on 2 threads): directional derivative along a random
// direction in (x, gamma, beta) against the backward.
TEST(CpuOps, BatchNormBackwardModelSized) {
  Ctx t(2);
  for (auto [n, c, hw] : {std::array{3, 64, 784}, std::array{3, 512, 16}}) {
    BnShape s;
    s.n = n, s.c = c, s.hw = hw;
    const Vec x = rand_vec(s.size(), 33), gam = rand_vec(c, 34, 0.5f, 1.5f), bet = rand_vec(c, 35);
    const Vec g = rand_vec(s.size(), 36), ux = rand_vec(s.size(), 37), ug = rand_vec(c, 38);
    Buffer bx = t.up(x), bg = t.up(g), bgam = t.up(gam), bbet = t.up(bet), y(*t.dev, s.size(), "y");
    Buffer rm(*t.dev, c, "rm"), rv(*t.dev, c, "rv"), sm(*t.dev, c, "sm"), si(*t.dev, c, "si");
    Buffer dx(*t.dev, s.size(), "dx"), dg(*t.dev, c, "dg"), db(*t.dev, c, "db");
    t.dev->batchnorm_forward_train(s, bx.get(), bgam.get(), bbet.get(), y.get(), rm.get(), rv.get(),
                                   sm.get(), si.get());
    t.dev->batchnorm_backward(s, bx.get(), bg.get(), bgam.get(), sm.get(), si.get(), dx.get(),
                              dg.get(), db.get());
    const double ana = dot(t.down(dx), ux) + dot(t.down(dg), ug) + dot(t.down(db), ug);
    auto loss = [&](float e) {
      Vec xe = x, ge = gam, be = bet;
      for (size_t i = 0; i < xe.size(); ++i) xe[i] += e * ux[i];
      for (int i = 0; i < c; ++i) ge[i] += e * ug[i], be[i] += e * ug[i];
      Buffer px = t.up(xe), pg = t.up(ge), pb = t.up(be);
      t.dev->batchnorm_forward_train(s, px.get(), pg.get(), pb.get(), y.get(), rm.get(), rv.get(),
                                     sm.get(), si.get());
      return dot(t.down(y), g);
    };
    const double fd = (loss(1e-3f) - loss(-1e-3f)) / 2e-3;
    EXPECT_NEAR(ana, fd, 2e-3 * std::fabs(fd)) << "bn n=" << n << " c=" << c << " hw=" << hw;
  }
}

TEST(CpuOps, BatchNormInferenceUsesRunningStats) {
  Ctx t(1);
  BnShape s;
  s.n = 3, s.c = 2, s.hw = 4;
  const Vec x = rand_vec(s.size(), 22), gamma = {1.5f, -0.5f}, beta = {0.1f, 0.2f},
            rm = {0.3f, -0.2f}, rv = {0.5f, 2.0f};
  Buffer bx = t.up(x), bgam = t.up(gamma), bbet = t.up(beta), brm = t.up(rm), brv = t.up(rv),
         by(*t.dev, s.size(), "y");
  t.dev->batchnorm_forward_infer(s, bx.get(), bgam.get(), bbet.get(), brm.get(), brv.get(),
                                 by.get());
  Vec ref(s.size());
  for (size_t k = 0; k < ref.size(); ++k) {
    const int c = int(k / s.hw) % s.c;
    ref[k] = gamma[c] * (x[k] - rm[c]) / std::sqrt(rv[c] + s.eps) + beta[c];
  }
  expect_near_all(t.down(by), ref, 1e-6f, 1e-5f, "bn infer");
  expect_near_all(t.down(brm), rm, 0, 0, "bn infer leaves running_mean");
}

// ---- softmax cross-entropy ----

TEST(CpuOps, SoftmaxXentLossGradAndAccuracy) {
  Ctx t(1);
  const int n = 6, classes = 5;
  const float scale = 1.0f / n;
  Vec z = rand_vec(n * classes, 23, -3.0f, 3.0f);
  z[0] = 1000.0f;  // stability: huge logits must not overflow
  const Vec labels = {0, 1, 4, 2, 3, 3};
  Buffer bz = t.up(z), bl = t.up(labels), bd(*t.dev, n * classes, "d"), st = t.up({1.0f, 2.0f});
  t.dev->softmax_xent(n, classes, bz.get(), bl.get(), scale, bd.get(), st.get());
  double loss = 0;
  int correct = 0;
  for (int i = 0; i < n; ++i) {
    const float* r = &z[i * classes];
    const float mx = *std::max_element(r, r + classes);
    double sum = 0;
    for (int j = 0; j < classes; ++j) sum += std::exp(double(r[j]) - mx);
    loss += std::log(sum) - (r[int(labels[i])] - mx);
    correct += int(std::max_element(r, r + classes) - r) == int(labels[i]);
  }
  Vec stats = t.down(st);
  EXPECT_NEAR(stats[0], 1.0 + scale * loss, 1e-5);
  EXPECT_EQ(stats[1], 2.0f + correct);
  Vec dz = t.down(bd);
  auto f = [&] {
    Buffer pz = t.up(z), ps(*t.dev, 2, "s");
    t.dev->softmax_xent(n, classes, pz.get(), bl.get(), scale, nullptr, ps.get());
    return double(t.down(ps)[0]);
  };
  grad_check({&z}, {dz}, f, 1e-2f, 1e-4f, 2e-3f, "softmax_xent");
  const float bad[1] = {7.0f};
  Buffer bbad = t.up({bad[0]});
  EXPECT_THROW(t.dev->softmax_xent(1, classes, bz.get(), bbad.get(), 1, nullptr, st.get()), Error);
}

// ---- memory, communication, errors, threads ----

TEST(CpuOps, AllocIsZeroFilledAndAligned) {
  Ctx t(1);
  for (size_t n : {size_t(0), size_t(1), size_t(17), size_t(100000)}) {
    Buffer b(*t.dev, n, "test");
    ASSERT_NE(b.get(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.get()) % 64, 0u);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(b.get()[i], 0.0f) << i;
  }
  try {
    t.dev->alloc(size_t(1) << 60, "huge_activations");
    FAIL() << "expected an allocation error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("huge_activations"), std::string::npos) << e.what();
  }
}

TEST(CpuOps, CommReduceAndCopy) {
  Ctx t(2);
  for (size_t n : {size_t(0), size_t(1), size_t(1000003)}) {
    Vec a(n), b(n);
    for (size_t i = 0; i < n; ++i) a[i] = float(i % 1000), b[i] = 0.5f * float(i % 7);
    Buffer da = t.up(a), db = t.up(b);
    t.dev->comm_reduce(da.get(), db.get(), n);
    Vec r = t.down(da);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(r[i], a[i] + b[i]) << i;
    t.dev->comm_copy(db.get(), da.get(), n);
    r = t.down(db);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(r[i], a[i] + b[i]) << i;
  }
}

TEST(CpuOps, NameKindAndErrors) {
  Ctx t(2);
  EXPECT_EQ(t.dev->kind(), BackendKind::Cpu);
  EXPECT_EQ(t.dev->name().rfind("cpu:0 (2 threads, oneDNN ", 0), 0u) << t.dev->name();
  ConvShape bad = conv_shape(1, 1, 2, 2, 1, 5, 5, 0, 1);  // kernel larger than the image
  Buffer b(*t.dev, 64, "b");
  try {
    t.dev->conv2d_forward(bad, b.get(), b.get(), b.get(), b.get());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("conv"), std::string::npos) << e.what();
  }
}

// Large ops take the OpenMP paths; two devices on two threads (plus a comm loop beside one of
// them) must give the same results as one device alone.
TEST(CpuOps, ThreadedAndConcurrentDevicesAgree) {
  const ConvShape s = conv_shape(8, 4, 24, 24, 8, 3, 3, 1, 1);
  BnShape bs;
  bs.n = 8, bs.c = 8, bs.hw = 24 * 24;
  const Vec x = rand_vec(s.x_size(), 24), w = rand_vec(s.w_size(), 25), b = rand_vec(s.k, 26);
  auto run = [&](Device& dev, Vec& out) {
    Ctx t;
    t.dev.reset(&dev);
    Buffer bx = t.up(x), bw = t.up(w), bb = t.up(b), y(dev, s.y_size(), "y"),
           y2(dev, s.y_size(), "y2");
    Buffer g = t.up(Vec(bs.c, 1.0f)), be = t.up(Vec(bs.c, 0.0f)), rm(dev, bs.c, "rm"),
           rv(dev, bs.c, "rv"), sm(dev, bs.c, "sm"), si(dev, bs.c, "si");
    for (int it = 0; it < 3; ++it) {
      dev.conv2d_forward(s, bx.get(), bw.get(), bb.get(), y.get());
      dev.batchnorm_forward_train(bs, y.get(), g.get(), be.get(), y2.get(), rm.get(), rv.get(),
                                  sm.get(), si.get());
      dev.relu_forward(y2.get(), y2.get(), s.y_size());
      dev.conv2d_backward(s, bx.get(), bw.get(), y2.get(), bx.get(), bw.get(), bb.get());
    }
    out = t.down(bw);
    t.dev.release();  // not owned
  };
  auto d0 = make_cpu_device(0, 1), d1 = make_cpu_device(1, 2), d2 = make_cpu_device(2, 1);
  Vec ref, r1, r2;
  run(*d0, ref);
  Vec big(1 << 20, 1.0f), acc(1 << 20, 0.0f);
  std::thread th1([&] { run(*d1, r1); });
  std::thread th2([&] { run(*d2, r2); });
  std::thread comm([&] {
    for (int i = 0; i < 20; ++i) d1->comm_reduce(acc.data(), big.data(), big.size());
  });
  th1.join(), th2.join(), comm.join();
  expect_near_all(r1, ref, 1e-3f, 1e-3f, "2-thread device");
  expect_near_all(r2, ref, 1e-5f, 1e-5f, "concurrent 1-thread device");
  EXPECT_EQ(acc[12345], 20.0f);
}

}  // namespace
}  // namespace dpb
