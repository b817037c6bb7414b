// test_models.cpp: whole-model finite-difference gradient checks on the CPU backend (LeNet at the
// real size, ResNet-18 at a tiny batch), parameter layouts, and the ready-callback contract
// (every parameter reported exactly once, after its gradient is written).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "src/model/model.h"
#include "kernels/cpu/cpu_device.h"

using namespace dpb;

namespace {

struct Harness {
  std::unique_ptr<Device> dev = make_cpu_device(0, 2);
  std::unique_ptr<Model> model;
  Buffer w, g, x, y, dlogits, stats;
  int n;
  Harness(const std::string& name, int n_, double wscale) : n(n_) {
    model = make_model(name, *dev, n, ModelOptions{});
    size_t P = model->num_floats();
    std::mt19937 rng(123);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> hw = init_params(model->params(), 5);
    for (const auto& p : model->params())  // larger weights than training init: sharper gradients
      if (p.init == Init::Normal001)
        for (size_t i = 0; i < p.size; ++i) hw[p.offset + i] *= float(wscale);
    for (const auto& p : model->params())  // non-trivial biases, gammas and betas
      if (p.init != Init::Normal001)
        for (size_t i = 0; i < p.size; ++i) hw[p.offset + i] += 0.1f * nd(rng);
    w = Buffer(*dev, P, MemCategory::Temporaries, "w");
    g = Buffer(*dev, P, MemCategory::Temporaries, "g");
    dev->upload(w.get(), hw.data(), P);
    std::vector<uint8_t> px(size_t(n) * 784), lb(n);
    for (auto& v : px) v = uint8_t(rng() % 256);
    for (auto& v : lb) v = uint8_t(rng() % 10);
    x = Buffer(*dev, px.size(), MemCategory::Temporaries, "x");
    y = Buffer(*dev, n, MemCategory::Temporaries, "y");
    dlogits = Buffer(*dev, size_t(n) * 10, MemCategory::Temporaries, "dlogits");
    stats = Buffer(*dev, 2, MemCategory::Temporaries, "stats");
    dev->load_images(x.get(), px.data(), px.size());
    dev->load_labels(y.get(), lb.data(), n);
  }
  double loss() {
    dev->fill(stats.get(), 0, 2);
    const float* logits = model->forward(w.get(), x.get(), n, true);
    dev->softmax_xent(n, 10, logits, y.get(), 1.0f / n, nullptr, stats.get());
    float s[2];
    dev->download(s, stats.get(), 2);
    return s[0];
  }
  std::vector<float> grad(std::vector<int>* order = nullptr) {
    dev->fill(stats.get(), 0, 2);
    const float* logits = model->forward(w.get(), x.get(), n, true);
    dev->softmax_xent(n, 10, logits, y.get(), 1.0f / n, dlogits.get(), stats.get());
    model->backward(w.get(), g.get(), dlogits.get(), n, [&](int i) {
      if (order) order->push_back(i);
    });
    std::vector<float> hg(model->num_floats());
    dev->download(hg.data(), g.get(), hg.size());
    return hg;
  }
  void set(size_t i, float v) { dev->upload(w.get() + i, &v, 1); }
  float get(size_t i) { float v; dev->download(&v, w.get() + i, 1); return v; }
};

// Directional derivative along d = g + noise (unit norm), over all parameters at once: kinks
// average out, so this is a tight whole-model check: (L(w + eps d) - L(w - eps d)) / 2 eps == g.d
void check_directional(Harness& h, float eps, double rtol) {
  std::vector<float> an = h.grad();
  size_t P = an.size();
  std::vector<float> w0(P), d(P), wp(P);
  h.dev->download(w0.data(), h.w.get(), P);
  double g2 = 0;
  for (float v : an) g2 += double(v) * v;
  const double rms = std::sqrt(g2 / P);
  std::mt19937 rng(11);
  std::normal_distribution<double> nd(0.0, 1.0);
  double d2 = 0;
  std::vector<double> dd(P);
  for (size_t i = 0; i < P; ++i) dd[i] = an[i] + rms * nd(rng), d2 += dd[i] * dd[i];
  double gd = 0;
  for (size_t i = 0; i < P; ++i) d[i] = float(dd[i] / std::sqrt(d2)), gd += double(an[i]) * d[i];
  auto at = [&](float s) {
    for (size_t i = 0; i < P; ++i) wp[i] = w0[i] + s * d[i];
    h.dev->upload(h.w.get(), wp.data(), P);
    return h.loss();
  };
  double fd = (at(eps) - at(-eps)) / (2.0 * eps);
  h.dev->upload(h.w.get(), w0.data(), P);
  EXPECT_NEAR(fd, gd, rtol * std::fabs(gd)) << "directional derivative, |g| = " << std::sqrt(g2);
}

void check_fd(Harness& h, int samples_per_param, float eps, double atol, double rtol) {
  std::vector<float> an = h.grad();
  std::mt19937 rng(7);
  int bad = 0, checked = 0;
  for (const auto& p : h.model->params()) {
    for (int s = 0; s < samples_per_param; ++s) {
      size_t i = p.offset + rng() % p.size;
      float w0 = h.get(i);
      h.set(i, w0 + eps);
      double lp = h.loss();
      h.set(i, w0 - eps);
      double lm = h.loss();
      h.set(i, w0);
      double fd = (lp - lm) / (2.0 * eps);
      ++checked;
      if (std::fabs(fd - an[i]) > atol + rtol * std::fabs(fd)) {
        if (++bad <= 10)
          std::printf("  mismatch %s[%zu]: analytic %.6g vs finite difference %.6g\n",
                      p.name.c_str(), i - p.offset, double(an[i]), fd);
      }
    }
  }
  // Central differences straddle a ReLU kink now and then; allow one sample in 25 to miss.
  EXPECT_LE(bad, std::max(1, checked / 25)) << "of " << checked << " sampled parameters";
}

}  // namespace

TEST(Models, LayoutsMatchTheSeeds) {
  auto lenet = model_param_layout("lenet", ModelOptions{});
  ASSERT_EQ(lenet.size(), 8u);
  EXPECT_EQ(lenet[0].shape, (std::vector<int>{20, 1, 3, 3}));
  EXPECT_EQ(lenet[4].shape, (std::vector<int>{800, 128}));
  EXPECT_EQ(lenet.back().offset + lenet.back().size, 129068u);
  auto resnet = model_param_layout("resnet18", ModelOptions{});
  size_t total = resnet.back().offset + resnet.back().size;
  // d2l ResNet-18 with conv biases and 1x1 projections (no BN on the projection) for 1 channel in.
  EXPECT_EQ(total, 11175818u);
  EXPECT_THROW(model_param_layout("vgg", ModelOptions{}), std::exception);
}

TEST(Models, LeNetGradientMatchesFiniteDifferences) {
  Harness h("lenet", 6, 30.0);
  check_fd(h, 6, 1e-3f, 2e-3, 5e-2);
  check_directional(h, 1e-2f, 1e-2);
}

TEST(Models, ReadyCalledOncePerParameter) {
  for (const char* name : {"lenet", "resnet18"}) {
    Harness h(name, 2, 10.0);
    std::vector<int> order;
    h.grad(&order);
    std::vector<int> seen(h.model->params().size(), 0);
    for (int i : order) seen[i]++;
    for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], 1) << name << " param " << i;
  }
}

TEST(Models, ResNet18GradientMatchesFiniteDifferences) {
  Harness h("resnet18", 3, 10.0);
  check_directional(h, 1e-3f, 1e-2);
  check_fd(h, 1, 1e-3f, 2e-3, 5e-2);
}
