// test_cpu_reference.cpp: checks of the CPU backend (kernels/cpu) as the reference every backend is
// compared with (test_op_table.cpp): forwards against naive loops, every backward against central
// finite differences of its forward (L = sum(g * y) for a random g), conv at channel-blocked
// shapes against a double reference, batch-norm running statistics and inference. Memory and
// communication ops, errors and concurrent devices: test_cpu_reference_device.cpp.
// Run: ./build/dpb_tests --gtest_filter='CpuReference*' (about a second).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "src/core/check.h"
#include "src/core/device.h"
#include "tests/cpu_reference_test_util.h"

namespace dpb {
namespace {

using namespace cpu_reference_test;

// Checks grads[k] = dL/d(*inputs[k]) by central differences on every entry (400 evenly spread
// ones for larger inputs); loss() reads the host-side inputs.
void grad_check(std::vector<Vec*> inputs, const std::vector<Vec>& grads,
                const std::function<double()>& loss, float eps, float atol, float rtol,
                const char* what) {
  for (size_t k = 0; k < inputs.size(); ++k) {
    Vec& in = *inputs[k];
    for (size_t i = 0; i < in.size(); i += std::max<size_t>(1, in.size() / 400)) {
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

struct ConvRef {
  Vec y, dx, dw, db;
};

// Naive double-precision forward (y) and, for output gradient dy, backward (dx, dw, db).
ConvRef conv_ref(const ConvShape& s, const Vec& x, const Vec& w, const Vec& b, const Vec& dy) {
  std::vector<double> y(s.y_size()), dx(s.x_size()), dw(s.w_size()), db(s.k);
  for (int n = 0; n < s.n; ++n)
    for (int k = 0; k < s.k; ++k)
      for (int i = 0; i < s.oh(); ++i)
        for (int j = 0; j < s.ow(); ++j) {
          const size_t yi = ((size_t(n) * s.k + k) * s.oh() + i) * s.ow() + j;
          const double g = dy[yi];
          y[yi] = b[k], db[k] += g;
          for (int c = 0; c < s.c; ++c)
            for (int u = 0; u < s.r; ++u)
              for (int v = 0; v < s.s; ++v) {
                const int yy = i * s.stride - s.pad + u, xx = j * s.stride - s.pad + v;
                if (yy < 0 || yy >= s.h || xx < 0 || xx >= s.w) continue;
                const size_t xi = ((size_t(n) * s.c + c) * s.h + yy) * s.w + xx;
                const size_t wi = ((size_t(k) * s.c + c) * s.r + u) * s.s + v;
                y[yi] += double(x[xi]) * w[wi], dx[xi] += g * w[wi], dw[wi] += g * x[xi];
              }
        }
  auto f = [](const std::vector<double>& v) { return Vec(v.begin(), v.end()); };
  return {f(y), f(dx), f(dw), f(db)};
}

void conv_grad_check(const ConvShape& s, bool with_dx) {
  Ctx t(1);
  Vec x = rand_vec(s.x_size(), 4), w = rand_vec(s.w_size(), 5), b = rand_vec(s.k, 6);
  const Vec g = rand_vec(s.y_size(), 7);
  Buffer bx = t.up(x), bw = t.up(w), bg = t.up(g), by = t.buf(s.y_size());
  Buffer bdx = t.buf(s.x_size()), bdw = t.up(Vec(s.w_size(), 7.0f)), bdb = t.buf(s.k);
  t.dev->conv2d_backward(s, bx.get(), bw.get(), bg.get(), with_dx ? bdx.get() : nullptr, bdw.get(),
                         bdb.get());  // dw is overwritten, not accumulated
  auto loss = [&] {
    Buffer px = t.up(x), pw = t.up(w), pb = t.up(b);
    t.dev->conv2d_forward(s, px.get(), pw.get(), pb.get(), by.get());
    return dot(t.down(by), g);
  };
  std::vector<Vec*> in{&w, &b};
  std::vector<Vec> grads{t.down(bdw), t.down(bdb)};
  if (with_dx) in.push_back(&x), grads.push_back(t.down(bdx));
  // Linear in each input: a large step is exact up to rounding.
  grad_check(in, grads, loss, 0.25f, 1e-4f, 1e-3f, with_dx ? "conv" : "conv (no dx)");
}

TEST(CpuReference, ConvBackwardPadStride1) { conv_grad_check({2, 3, 7, 6, 4, 3, 3, 1, 1}, true); }
TEST(CpuReference, ConvBackwardPadStride2) { conv_grad_check({2, 3, 8, 7, 5, 3, 3, 1, 2}, true); }
TEST(CpuReference, ConvBackwardRectKernel) { conv_grad_check({2, 2, 6, 7, 3, 2, 3, 2, 2}, true); }
TEST(CpuReference, ConvBackwardNoDx) { conv_grad_check({2, 1, 10, 10, 6, 3, 3, 0, 1}, false); }

// Forward and backward against the double reference, including channel-blocked layouts (c, k >=
// 16), stride 2, 1x1 projections, a rectangular kernel, a repeated (cached) shape, and weights and
// gradients at unaligned offsets (models keep parameters in one flat buffer).
TEST(CpuReference, ConvMatchesReference) {
  Ctx t(2);
  for (const ConvShape& s :
       {ConvShape{2, 1, 28, 28, 20, 3, 3, 0, 1}, ConvShape{2, 20, 13, 13, 50, 5, 5, 0, 1},
        ConvShape{2, 32, 12, 12, 48, 3, 3, 1, 2}, ConvShape{2, 32, 12, 12, 48, 1, 1, 0, 2},
        ConvShape{3, 5, 9, 8, 6, 3, 2, 2, 1}, ConvShape{2, 1, 28, 28, 20, 3, 3, 0, 1}}) {
    const Vec x = rand_vec(s.x_size(), 30), w = rand_vec(s.w_size(), 31), b = rand_vec(s.k, 32);
    const Vec dy = rand_vec(s.y_size(), 33);
    const ConvRef ref = conv_ref(s, x, w, b, dy);
    Buffer bx = t.up(x), bdy = t.up(dy), bw = t.buf(s.w_size() + s.k + 3), by = t.buf(s.y_size());
    Buffer bdx = t.buf(s.x_size()), g = t.buf(s.w_size() + s.k + 1);
    float *pw = bw.get() + 3, *pb = pw + s.w_size(), *gw = g.get() + 1, *gb = gw + s.w_size();
    t.dev->upload(pw, w.data(), w.size());
    t.dev->upload(pb, b.data(), b.size());
    t.dev->conv2d_forward(s, bx.get(), pw, pb, by.get());
    t.dev->conv2d_backward(s, bx.get(), pw, bdy.get(), bdx.get(), gw, gb);
    const Vec gv = t.down(g);
    const auto dw_end = gv.begin() + 1 + s.w_size();
    expect_near_all(t.down(by), ref.y, 1e-4f, 1e-4f, "conv y");
    expect_near_all(t.down(bdx), ref.dx, 1e-4f, 1e-4f, "conv dx");
    expect_near_all(Vec(gv.begin() + 1, dw_end), ref.dw, 1e-3f, 1e-4f, "conv dw");
    expect_near_all(Vec(dw_end, gv.end()), ref.db, 1e-3f, 1e-4f, "conv db");
  }
}

// ---- dense ----

TEST(CpuReference, DenseForwardAndBackward) {
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
  Buffer bx = t.up(x), bw = t.up(w), bb = t.up(b), by = t.buf(n * out), bg = t.up(g);
  t.dev->dense_forward(n, in, out, bx.get(), bw.get(), bb.get(), by.get());
  expect_near_all(t.down(by), ref, 1e-5f, 1e-5f, "dense y");
  Buffer bdx = t.buf(n * in), bdw = t.up(Vec(in * out, 3.0f)), bdb = t.up(Vec(out, 3.0f));
  t.dev->dense_backward(n, in, out, bx.get(), bw.get(), bg.get(), bdx.get(), bdw.get(), bdb.get());
  auto loss = [&] {
    Buffer px = t.up(x), pw = t.up(w), pb = t.up(b);
    t.dev->dense_forward(n, in, out, px.get(), pw.get(), pb.get(), by.get());
    return dot(t.down(by), g);
  };
  grad_check({&x, &w, &b}, {t.down(bdx), t.down(bdw), t.down(bdb)}, loss, 0.25f, 1e-4f, 1e-4f,
             "dense");
}

// ---- pooling ----

TEST(CpuReference, AvgPoolForwardAndBackward) {
  for (auto [h, w, win, stride] : {std::array{6, 8, 2, 2}, std::array{9, 7, 2, 2},
                                   std::array{7, 5, 3, 2}, std::array{5, 5, 2, 1}}) {
    Ctx t(1);
    const PoolShape s{2, 3, h, w, win, stride};
    Vec x = rand_vec(s.x_size(), 12), ref(s.y_size());
    const Vec g = rand_vec(s.y_size(), 13);
    for (int p = 0; p < s.n * s.c; ++p)
      for (int i = 0; i < s.oh(); ++i)
        for (int j = 0; j < s.ow(); ++j) {
          double acc = 0;
          for (int u = 0; u < win; ++u)
            for (int v = 0; v < win; ++v) acc += x[(p * h + i * stride + u) * w + j * stride + v];
          ref[(p * s.oh() + i) * s.ow() + j] = float(acc / (win * win));
        }
    // dx starts as garbage: entries no window covers must come back as zero.
    Buffer bx = t.up(x), by = t.buf(s.y_size()), bg = t.up(g), bdx = t.up(rand_vec(x.size(), 1));
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

TEST(CpuReference, GlobalAvgPoolForwardAndBackward) {
  Ctx t(1);
  const int n = 3, c = 4, hw = 10;
  Vec x = rand_vec(n * c * hw, 14), ref(n * c);
  const Vec g = rand_vec(n * c, 15);
  for (int p = 0; p < n * c; ++p) {
    double acc = 0;
    for (int i = 0; i < hw; ++i) acc += x[p * hw + i];
    ref[p] = float(acc / hw);
  }
  Buffer bx = t.up(x), by = t.buf(n * c), bg = t.up(g), bdx = t.buf(n * c * hw);
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

// ---- elementwise and data loading ----

TEST(CpuReference, ReluAndElementwise) {
  Ctx t(1);
  const size_t n = 101;
  Vec x = rand_vec(n, 16);
  for (auto& v : x) v += v < 0 ? -0.05f : 0.05f;  // keep |x| > eps for the check
  const Vec g = rand_vec(n, 17);
  Buffer bx = t.up(x), by = t.buf(n), bg = t.up(g);
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
  t.dev->axpy(0.5f, a.get(), b.get(), n);       // 1 + 0.5 * 2 = 2
  t.dev->sgd_step(b.get(), a.get(), 0.25f, n);  // 2 - 0.25 * 2 = 1.5
  expect_near_all(t.down(b), Vec(n, 1.5f), 0, 0, "axpy + sgd_step");
  t.dev->fill(a.get(), -3.0f, n);
  t.dev->copy(b.get(), a.get(), n);
  expect_near_all(t.down(b), Vec(n, -3.0f), 0, 0, "fill + copy");
  const uint8_t pix[4] = {0, 1, 128, 255};
  Buffer img = t.buf(4);
  t.dev->load_images(img.get(), pix, 4);
  expect_near_all(t.down(img), {0.0f, 1.0f / 255, 128.0f / 255, 1.0f}, 0, 1e-7f, "images");
  t.dev->load_labels(img.get(), pix, 4);
  expect_near_all(t.down(img), {0.0f, 1.0f, 128.0f, 255.0f}, 0, 0, "labels");
}

// ---- batch norm ----

TEST(CpuReference, BatchNormTrainBackwardAndRunningStats) {
  Ctx t(1);
  const BnShape s{4, 3, 5};
  const size_t m = size_t(s.n) * s.hw;
  Vec x = rand_vec(s.size(), 18, -2.0f, 3.0f), gamma = rand_vec(s.c, 19, 0.5f, 1.5f);
  Vec beta = rand_vec(s.c, 20);
  const Vec g = rand_vec(s.size(), 21);
  BnBufs bn(t, s, x, gamma, beta);
  bn.train(*t.dev, s);
  Vec mean(s.c), yref(s.size()), rm_ref(s.c), rv_ref(s.c);
  for (int c = 0; c < s.c; ++c) {
    double sum = 0, sq = 0;
    for (int n = 0; n < s.n; ++n)
      for (int i = 0; i < s.hw; ++i) sum += x[(n * s.c + c) * s.hw + i];
    mean[c] = float(sum / m);
    for (int n = 0; n < s.n; ++n)
      for (int i = 0; i < s.hw; ++i) sq += std::pow(x[(n * s.c + c) * s.hw + i] - mean[c], 2);
    rm_ref[c] = 0.9f * 0.5f + 0.1f * mean[c];
    rv_ref[c] = float(0.9 * 2.0 + 0.1 * sq / (m - 1));  // unbiased, as PyTorch
    for (int n = 0; n < s.n; ++n)
      for (int i = 0; i < s.hw; ++i) {
        const size_t k = (n * s.c + c) * s.hw + i;
        yref[k] = float(gamma[c] * (x[k] - mean[c]) / std::sqrt(sq / m + s.eps) + beta[c]);
      }
  }
  expect_near_all(t.down(bn.y), yref, 1e-5f, 1e-4f, "bn y");
  expect_near_all(t.down(bn.sm), mean, 1e-6f, 1e-5f, "bn save_mean");
  expect_near_all(t.down(bn.rm), rm_ref, 1e-6f, 1e-5f, "bn running_mean");
  expect_near_all(t.down(bn.rv), rv_ref, 1e-6f, 1e-5f, "bn running_var");

  Buffer bg = t.up(g), bdx = t.buf(s.size()), bdg = t.buf(s.c), bdb = t.buf(s.c);
  t.dev->batchnorm_backward(s, bn.x.get(), bg.get(), bn.gamma.get(), bn.sm.get(), bn.si.get(),
                            bdx.get(), bdg.get(), bdb.get());
  auto loss = [&] {
    BnBufs p(t, s, x, gamma, beta);
    p.train(*t.dev, s);
    return dot(t.down(p.y), g);
  };
  grad_check({&x, &gamma, &beta}, {t.down(bdx), t.down(bdg), t.down(bdb)}, loss, 1e-2f, 3e-4f,
             2e-3f, "batchnorm");
}

// Model-sized (parallel path on 2 threads): directional derivative along a random direction u in
// (x, gamma, beta) against the backward.
TEST(CpuReference, BatchNormBackwardModelSized) {
  Ctx t(2);
  for (const BnShape& s : {BnShape{3, 64, 784}, BnShape{3, 512, 16}}) {
    const Vec x = rand_vec(s.size(), 33), gam = rand_vec(s.c, 34, 0.5f, 1.5f);
    const Vec bet = rand_vec(s.c, 35), g = rand_vec(s.size(), 36);
    const Vec ux = rand_vec(s.size(), 37), ug = rand_vec(s.c, 38);
    BnBufs bn(t, s, x, gam, bet);
    bn.train(*t.dev, s);
    Buffer bg = t.up(g), dx = t.buf(s.size()), dg = t.buf(s.c), db = t.buf(s.c);
    t.dev->batchnorm_backward(s, bn.x.get(), bg.get(), bn.gamma.get(), bn.sm.get(), bn.si.get(),
                              dx.get(), dg.get(), db.get());
    const double ana = dot(t.down(dx), ux) + dot(t.down(dg), ug) + dot(t.down(db), ug);
    auto loss = [&](float e) {
      Vec xe = x, ge = gam, be = bet;
      for (size_t i = 0; i < xe.size(); ++i) xe[i] += e * ux[i];
      for (int i = 0; i < s.c; ++i) ge[i] += e * ug[i], be[i] += e * ug[i];
      BnBufs p(t, s, xe, ge, be);
      p.train(*t.dev, s);
      return dot(t.down(p.y), g);
    };
    const double fd = (loss(1e-3f) - loss(-1e-3f)) / 2e-3;
    EXPECT_NEAR(ana, fd, 2e-3 * std::fabs(fd)) << "bn c=" << s.c << " hw=" << s.hw;
  }
}

TEST(CpuReference, BatchNormInferenceUsesRunningStats) {
  Ctx t(1);
  const BnShape s{3, 2, 4};
  const Vec x = rand_vec(s.size(), 22), gamma = {1.5f, -0.5f}, beta = {0.1f, 0.2f},
            rm = {0.3f, -0.2f}, rv = {0.5f, 2.0f};
  Buffer bx = t.up(x), bgam = t.up(gamma), bbet = t.up(beta), brm = t.up(rm), brv = t.up(rv);
  Buffer by = t.buf(s.size());
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

TEST(CpuReference, SoftmaxXentLossGradAndAccuracy) {
  Ctx t(1);
  const int n = 6, classes = 5;
  const float scale = 1.0f / n;
  Vec z = rand_vec(n * classes, 23, -3.0f, 3.0f);
  z[0] = 1000.0f;  // stability: huge logits must not overflow
  Vec labels(n);   // rows 0-3 labelled with their argmax (correct), rows 4-5 not
  for (int i = 0; i < n; ++i) {
    const int arg = int(std::max_element(&z[i * classes], &z[(i + 1) * classes]) - &z[i * classes]);
    labels[i] = float(i < 4 ? arg : (arg + 1) % classes);
  }
  Buffer bz = t.up(z), bl = t.up(labels), bd = t.buf(n * classes), st = t.up({1.0f, 2.0f});
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
  const Vec stats = t.down(st);  // accumulated onto {1, 2}
  EXPECT_NEAR(stats[0], 1.0 + scale * loss, 1e-5);
  ASSERT_EQ(correct, 4);
  EXPECT_EQ(stats[1], 2.0f + correct);
  auto f = [&] {
    Buffer pz = t.up(z), ps = t.buf(2);
    t.dev->softmax_xent(n, classes, pz.get(), bl.get(), scale, nullptr, ps.get());
    return double(t.down(ps)[0]);
  };
  grad_check({&z}, {t.down(bd)}, f, 1e-2f, 1e-4f, 2e-3f, "softmax_xent");
  Buffer bad = t.up({7.0f});  // not a class id
  EXPECT_THROW(t.dev->softmax_xent(1, classes, bz.get(), bad.get(), 1, nullptr, st.get()), Error);
}

}  // namespace
}  // namespace dpb
