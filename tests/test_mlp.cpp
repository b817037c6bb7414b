// test_mlp.cpp: the sharding notebook's MLP (src/model/mlp.cpp) and synthetic data
// (src/data/synthetic.h, src/train/run_data.h): parameter count and layout, flax's lecun_normal
// initialization, gradients against a double-precision reference (finite differences), the memory
// it holds (activations per layer, two gradient buffers), k = 2 and 3 devices equal to one,
// synthetic data's shape and values, the --data / --mlp-input rules.
//   build/dpb_tests --gtest_filter='Mlp*:Synthetic*'
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "kernels/backends.h"
#include "kernels/cpu/cpu_device.h"
#include "src/data/synthetic.h"
#include "src/model/model.h"
#include "src/train/run_data.h"
#include "src/train/trainer.h"
#include "tests/train_test_util.h"

using namespace dpb;

namespace {

ModelOptions mlp_opts(int layers, int hidden, int input) {
  ModelOptions o;
  o.mlp_layers = layers;
  o.mlp_hidden = hidden;
  o.mlp_input = input;
  return o;
}

size_t total_floats(const std::vector<ParamInfo>& layout) {
  return layout.back().offset + layout.back().size;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Mlp, LayoutAndParameterCount) {
  const auto l = model_param_layout("mlp", mlp_opts(2, 8, 784));
  ASSERT_EQ(l.size(), 6u);
  const char* names[] = {"layers_0.kernel", "layers_0.bias", "layers_1.kernel",
                         "layers_1.bias",   "output_layer.kernel", "output_layer.bias"};
  const std::vector<std::vector<int>> shapes = {{784, 8}, {8}, {8, 8}, {8}, {8, 10}, {10}};
  for (size_t i = 0; i < l.size(); ++i) {
    EXPECT_EQ(l[i].name, names[i]);
    EXPECT_EQ(l[i].shape, shapes[i]) << l[i].name;
    EXPECT_EQ(l[i].init, i % 2 == 0 ? Init::LecunNormal : Init::Zero) << l[i].name;
  }
  EXPECT_EQ(total_floats(l), size_t((784 * 8 + 8) + (8 * 8 + 8) + (8 * 10 + 10)));
  // The notebook's 90 x 2056 on 1024 inputs (the models table's help quotes it).
  const size_t notebook = size_t(1024) * 2056 + 2056 + size_t(89) * (2056 * 2056 + 2056) + 20570;
  EXPECT_EQ(total_floats(model_param_layout("mlp", ModelOptions{})), notebook);
  EXPECT_EQ(notebook, 378526058u);
  EXPECT_EQ(model_input_size("mlp", mlp_opts(3, 4, 1234)), 1234);
  EXPECT_EQ(model_input_size("lenet", mlp_opts(3, 4, 1234)), 784);
  EXPECT_EQ(model_input_size("resnet18", ModelOptions{}), 784);
  // The image models ignore the options.
  EXPECT_EQ(total_floats(model_param_layout("lenet", mlp_opts(3, 4, 5))), 129068u);
}

TEST(Mlp, LecunNormalInit) {
  // flax nn.Dense: kernel ~ truncated normal (2 sd), variance 1 / fan_in; biases zero.
  const auto l = model_param_layout("mlp", mlp_opts(1, 400, 1000));
  const std::vector<float> w = init_params(l, 3);
  EXPECT_EQ(w, init_params(l, 3)) << "deterministic";
  const ParamInfo& k = l[0];
  double sum = 0, sq = 0, mx = 0;
  for (size_t i = 0; i < k.size; ++i) {
    const double v = w[k.offset + i];
    sum += v, sq += v * v, mx = std::max(mx, std::fabs(v));
  }
  const double mean = sum / k.size, var = sq / k.size - mean * mean;
  EXPECT_NEAR(var * 1000, 1.0, 0.02) << "variance 1 / fan_in";
  EXPECT_NEAR(mean, 0.0, 1e-4);
  EXPECT_LE(mx, 2.0 / std::sqrt(1000.0) / 0.87962566103423978 + 1e-6) << "truncated at 2 sd";
  EXPECT_GT(mx, 1.9 / std::sqrt(1000.0) / 0.87962566103423978) << "reaches the truncation";
  for (size_t i = 0; i < l[1].size; ++i) EXPECT_EQ(w[l[1].offset + i], 0.0f);
  // The output layer's fan_in is the hidden width.
  const ParamInfo& o = l[2];
  double osq = 0;
  for (size_t i = 0; i < o.size; ++i) osq += double(w[o.offset + i]) * w[o.offset + i];
  EXPECT_NEAR(osq / o.size * 400, 1.0, 0.15);
}

namespace {

// A tiny MLP on the CPU device and the same network in double precision on the host.
struct TinyMlp {
  static constexpr int kLayers = 2, kHidden = 5, kIn = 7, kN = 3;
  std::unique_ptr<Device> dev = make_cpu_device(0, 1);
  std::unique_ptr<Model> model = make_model("mlp", *dev, kN, mlp_opts(kLayers, kHidden, kIn));
  std::vector<float> w;
  std::vector<uint8_t> x;
  std::vector<uint8_t> y;
  Buffer dw, dg, dx, dy, dl, st;

  TinyMlp() {
    w = init_params(model->params(), 9);
    std::mt19937 rng(4);
    std::normal_distribution<float> nd(0.0f, 0.3f);
    for (const auto& p : model->params())  // non-zero biases: every term of the gradient counts
      if (p.init == Init::Zero)
        for (size_t i = 0; i < p.size; ++i) w[p.offset + i] = nd(rng);
    x.resize(size_t(kN) * kIn);
    for (auto& v : x) v = uint8_t(rng() % 256);
    y = {3, 0, 9};
    const size_t P = model->num_floats();
    dw = Buffer(*dev, P, MemCategory::Parameters, "w");
    dg = Buffer(*dev, P, MemCategory::Gradients, "g");
    dx = Buffer(*dev, x.size(), MemCategory::Data, "x");
    dy = Buffer(*dev, kN, MemCategory::Data, "y");
    dl = Buffer(*dev, size_t(kN) * 10, MemCategory::Temporaries, "dlogits");
    st = Buffer(*dev, 2, MemCategory::Temporaries, "stats");
    dev->upload(dw.get(), w.data(), P);
    dev->load_images(dx.get(), x.data(), x.size());
    dev->load_labels(dy.get(), y.data(), kN);
  }

  // The analytic gradient of the mean softmax cross-entropy; ready order into `order`.
  std::vector<float> grad(std::vector<int>* order) {
    dev->fill(st.get(), 0, 2);
    const float* logits = model->forward(dw.get(), dx.get(), kN, true);
    dev->softmax_xent(kN, 10, logits, dy.get(), 1.0f / kN, dl.get(), st.get());
    model->backward(dw.get(), dg.get(), dl.get(), kN, [&](int i) { order->push_back(i); });
    std::vector<float> g(model->num_floats());
    dev->download(g.data(), dg.get(), g.size());
    return g;
  }

  // The same loss in double on the host, at parameters v.
  double ref_loss(const std::vector<double>& v) const {
    const auto& ps = model->params();
    double loss = 0;
    for (int e = 0; e < kN; ++e) {
      std::vector<double> a(kIn);
      for (int i = 0; i < kIn; ++i) a[i] = x[size_t(e) * kIn + i] / 255.0;
      int pi = 0;
      for (int l = 0; l <= kLayers; ++l, pi += 2) {
        const ParamInfo &K = ps[pi], &B = ps[pi + 1];
        const int in = K.shape[0], out = K.shape[1];
        std::vector<double> z(out);
        for (int o = 0; o < out; ++o) {
          double s = v[B.offset + o];
          for (int i = 0; i < in; ++i) s += a[i] * v[K.offset + size_t(i) * out + o];
          z[o] = l < kLayers ? std::max(0.0, s) : s;
        }
        a = z;
      }
      double m = a[0];
      for (double t : a) m = std::max(m, t);
      double se = 0;
      for (double t : a) se += std::exp(t - m);
      loss += (m + std::log(se) - a[y[e]]) / kN;
    }
    return loss;
  }
};

}  // namespace

TEST(Mlp, GradientMatchesDoubleFiniteDifferences) {
  TinyMlp t;
  std::vector<int> order;
  const std::vector<float> g = t.grad(&order);
  // Every parameter reported once, the output layer first, bias before kernel, layer by layer back.
  EXPECT_EQ(order, (std::vector<int>{5, 4, 3, 2, 1, 0}));
  std::vector<double> v(t.w.begin(), t.w.end());
  const double h = 1e-6;
  int checked = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    const double w0 = v[i];
    v[i] = w0 + h;
    const double lp = t.ref_loss(v);
    v[i] = w0 - h;
    const double lm = t.ref_loss(v);
    v[i] = w0;
    const double fd = (lp - lm) / (2 * h);
    EXPECT_NEAR(g[i], fd, 2e-5 + 1e-4 * std::fabs(fd)) << "parameter " << i;
    ++checked;
  }
  EXPECT_EQ(checked, (7 * 5 + 5) + (5 * 5 + 5) + (5 * 10 + 10));
  // And the device's own loss, by central differences in float at a few entries.
  for (size_t i : {size_t(0), size_t(17), size_t(41), size_t(70), size_t(75), size_t(129)}) {
    auto loss_at = [&](float wi) {
      t.dev->upload(t.dw.get() + i, &wi, 1);
      t.dev->fill(t.st.get(), 0, 2);
      const float* logits = t.model->forward(t.dw.get(), t.dx.get(), TinyMlp::kN, true);
      t.dev->softmax_xent(TinyMlp::kN, 10, logits, t.dy.get(), 1.0f / TinyMlp::kN, nullptr,
                          t.st.get());
      float s[2];
      t.dev->download(s, t.st.get(), 2);
      return double(s[0]);
    };
    const float e = 1e-2f;
    const double fd = (loss_at(t.w[i] + e) - loss_at(t.w[i] - e)) / (2 * e);
    loss_at(t.w[i]);
    EXPECT_NEAR(g[i], fd, 2e-3 + 2e-2 * std::fabs(fd)) << "parameter " << i << " (float)";
  }
}

TEST(Mlp, MemoryIsActivationsPerLayerAndTwoGradientBuffers) {
  for (int layers : {1, 2, 90}) {
    auto dev = make_cpu_device(0, 1);
    const int B = 16, H = 24;
    const MemoryUsage before = dev->memory().current();
    auto m = make_model("mlp", *dev, B, mlp_opts(layers, H, 30));
    const MemoryUsage now = dev->memory().current();
    const size_t f = sizeof(float);
    EXPECT_EQ(now[MemCategory::Activations] - before[MemCategory::Activations],
              (size_t(layers) * B * H + size_t(B) * 10) * f)
        << layers << " layers: every hidden output and the logits";
    EXPECT_EQ(now[MemCategory::Temporaries] - before[MemCategory::Temporaries],
              size_t(std::min(layers, 2)) * B * H * f)
        << layers << " layers: at most two gradient buffers, whatever the depth";
    EXPECT_EQ(now.total() - before.total(),
              (now[MemCategory::Activations] - before[MemCategory::Activations]) +
                  (now[MemCategory::Temporaries] - before[MemCategory::Temporaries]));
  }
}

TEST(Mlp, RejectsBadOptions) {
  auto dev = make_cpu_device(0, 1);
  EXPECT_NE(error_of([&] { make_model("mlp", *dev, 1, mlp_opts(0, 4, 4)); }).find("--mlp-layers"),
            std::string::npos);
  EXPECT_NE(error_of([&] { make_model("mlp", *dev, 1, mlp_opts(1, 0, 4)); }).find("--mlp-hidden"),
            std::string::npos);
  EXPECT_NE(error_of([&] { make_model("mlp", *dev, 1, mlp_opts(1, 4, 0)); }).find("--mlp-input"),
            std::string::npos);
}

namespace {

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += double(a[i] - b[i]) * (a[i] - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

bool have_fashion_mnist() { return std::filesystem::exists(resolve_data_dir("")); }

// The MLP on Fashion-MNIST's first 600 examples: 12 steps of the shared small configuration.
TrainConfig mlp_small(int k, SyncMode mode, bool overlap) {
  TrainConfig c = dpb_test::small_train_config("cpu", k, "ring", mode, overlap, "mlp");
  c.model_opts = mlp_opts(3, 64, 784);
  c.lr = 0.1;
  return c;
}

}  // namespace

TEST(Mlp, DataParallelMatchesOneDevice) {
  if (!have_fashion_mnist()) GTEST_SKIP() << "Fashion-MNIST not installed";
  TrainConfig c1 = mlp_small(1, SyncMode::Fused, false);
  const Dataset data = load_run_data(c1, "", 600, 100);
  const TrainResult ref = train(c1, data);
  ASSERT_EQ(ref.final_params.size(), size_t(784 * 64 + 64 + 2 * (64 * 64 + 64) + 650));
  EXPECT_GT(rel_l2(ref.final_params, init_params(model_param_layout("mlp", c1.model_opts), 7)),
            1e-3) << "the parameters moved";
  for (const auto& [k, mode, overlap] :
       {std::tuple{2, SyncMode::Fused, false}, std::tuple{3, SyncMode::Bucketed, true},
        std::tuple{2, SyncMode::PerParam, true}}) {
    const TrainResult res = train(mlp_small(k, mode, overlap), data);
    EXPECT_LE(rel_l2(res.final_params, ref.final_params), 1e-5)
        << "k=" << k << " " << to_string(mode) << " overlap=" << overlap;
    ASSERT_EQ(res.epochs.size(), 1u);
    EXPECT_TRUE(res.epochs[0].replicas_in_sync) << "k=" << k;
    EXPECT_NEAR(res.epochs[0].train_loss, ref.epochs[0].train_loss, 1e-4) << "k=" << k;
  }
}

TEST(Synthetic, ShapeAndValues) {
  const Dataset d = synthetic_dataset(1024, 100, 7);
  EXPECT_EQ(d.dir, "synthetic");
  EXPECT_EQ(d.train.n, 100);
  EXPECT_EQ(d.test.n, 7);
  for (const Split* s : {&d.train, &d.test}) {
    EXPECT_EQ(s->features(), 1024);
    EXPECT_EQ(s->rows, 1);
    EXPECT_TRUE(s->repeated);
    EXPECT_EQ(s->images.size(), 1024u) << "one example, stored once";
    ASSERT_EQ(s->labels.size(), size_t(s->n));
    for (uint8_t l : s->labels) EXPECT_EQ(l, kSyntheticLabel);
    for (int i : {0, s->n - 1})
      for (int f = 0; f < 1024; ++f) ASSERT_EQ(s->example(i)[f], 255) << "feature 1.0";
  }
  // On a device every feature is 1.0.
  auto dev = make_cpu_device(0, 1);
  Buffer x(*dev, 1024, MemCategory::Data, "x");
  dev->load_images(x.get(), d.train.example(5), 1024);
  std::vector<float> h(1024);
  dev->download(h.data(), x.get(), h.size());
  for (float v : h) ASSERT_EQ(v, 1.0f);
  // Image models: 28x28; limit 0: Fashion-MNIST's counts.
  const Dataset img = synthetic_dataset(784);
  EXPECT_EQ(img.train.rows, 28);
  EXPECT_EQ(img.train.cols, 28);
  EXPECT_EQ(img.train.n, kSyntheticTrain);
  EXPECT_EQ(img.test.n, kSyntheticTest);
  EXPECT_EQ(kSyntheticTrain, 60000);
  EXPECT_EQ(kSyntheticTest, 10000);
  EXPECT_NE(error_of([] { synthetic_dataset(8, -1, 0); }).find("train_limit -1"), std::string::npos);
}

TEST(Synthetic, RunDataFollowsTheModelAndTheOptions) {
  TrainConfig c;
  c.data = "synthetic";
  c.model = "mlp";
  c.model_opts = mlp_opts(2, 8, 300);
  settle_data_features(c, true);  // synthetic: --mlp-input stands
  EXPECT_EQ(c.model_opts.mlp_input, 300);
  Dataset d = load_run_data(c, "", 64, 8);
  EXPECT_EQ(d.train.features(), 300);
  EXPECT_EQ(d.train.n, 64);
  EXPECT_EQ(d.test.n, 8);
  c.model = "lenet";
  d = load_run_data(c, "", 4, 2);
  EXPECT_EQ(d.train.rows, 28);
  EXPECT_EQ(d.train.cols, 28);
  // Fashion-MNIST fixes the MLP's input at 784; a given --mlp-input other than that is an error
  // naming both options.
  c.data = "fashion-mnist";
  c.model_opts.mlp_input = 1024;
  settle_data_features(c, false);
  EXPECT_EQ(c.model_opts.mlp_input, 784);
  settle_data_features(c, true);  // 784 given: fine
  c.model_opts.mlp_input = 1000;
  const std::string e = error_of([&] { settle_data_features(c, true); });
  EXPECT_NE(e.find("--mlp-input 1000"), std::string::npos) << e;
  EXPECT_NE(e.find("--data fashion-mnist"), std::string::npos) << e;
  c.data = "imagenet";
  EXPECT_NE(error_of([&] { settle_data_features(c, false); }).find("--data"), std::string::npos);
  // validate(): the model's input against the data's features.
  TrainConfig v;
  v.model = "mlp";
  v.model_opts = mlp_opts(1, 4, 100);
  const std::string m = error_of([&] { validate(v, synthetic_dataset(784, 8, 8)); });
  EXPECT_NE(m.find("--model mlp takes 100 features"), std::string::npos) << m;
  v.model = "lenet";
  EXPECT_NE(error_of([&] { validate(v, synthetic_dataset(100, 8, 8)); }).find("784"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { validate(v, synthetic_dataset(784, 8, 8)); }), "");
}

TEST(Synthetic, MlpTrainsOnOnesAndMatchesAcrossDevices) {
  // The notebook's setting, small: every example is the same, every label class 1.
  TrainConfig c = dpb_test::small_train_config("cpu", 1, "ring", SyncMode::Fused, false, "mlp");
  c.data = "synthetic";
  c.model_opts = mlp_opts(4, 32, 1024);
  c.lr = 0.05;
  const Dataset d = load_run_data(c, "", 100, 10);
  const TrainResult one = train(c, d);
  EXPECT_EQ(one.epochs[0].test_acc, 1.0) << "one example, one label: learned in 2 steps";
  c.devices = 3;
  const TrainResult three = train(c, d);
  EXPECT_LE(rel_l2(three.final_params, one.final_params), 1e-5);
}
