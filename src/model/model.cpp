// model.cpp: parameter tables, deterministic initialization and shuffling, the model factory.
#include "src/model/model.h"

#include <cmath>

#include "kernels/backends.h"
#include "src/core/check.h"
#include "src/core/registry.h"

namespace dpb {

std::unique_ptr<Model> make_lenet(Device& dev, int max_batch, const ModelOptions& opts);
std::unique_ptr<Model> make_resnet18(Device& dev, int max_batch, const ModelOptions& opts);
std::unique_ptr<Model> make_mlp(Device& dev, int max_batch, const ModelOptions& opts);

int ParamTable::add(const std::string& name, std::vector<int> shape, Init init) {
  size_t n = 1;
  for (int d : shape) n *= size_t(d);
  list_.push_back({name, std::move(shape), init, total_, n});
  total_ += n;
  return int(list_.size()) - 1;
}

std::vector<size_t> Model::param_sizes() const {
  std::vector<size_t> s;
  for (const auto& p : params()) s.push_back(p.size);
  return s;
}

const float* Model::forward(const float* w, const float* x, int n, bool train) {
  FlatParams flat(params(), w, nullptr);
  return forward_impl(flat, x, n, train);
}

void Model::backward(const float* w, float* g, const float* dlogits, int n,
                     const std::function<void(int)>& ready) {
  FlatParams flat(params(), w, g);
  backward_impl(flat, dlogits, n, ready);
}

std::vector<int> param_layers(const std::vector<ParamInfo>& params) {
  std::vector<int> layer;
  std::string prev;
  for (const ParamInfo& p : params) {
    const std::string name = p.name.substr(0, p.name.rfind('.'));
    if (layer.empty() || name != prev) layer.push_back(layer.empty() ? 0 : layer.back() + 1);
    else layer.push_back(layer.back());
    prev = name;
  }
  return layer;
}

const std::vector<ModelEntry>& models() {
  static const std::vector<ModelEntry> table = {
      {"lenet", "LeNet as in the d2l seeds: 2 conv + 2 dense layers, ReLU (129,068 parameters)",
       make_lenet, 256},
      {"resnet18", "ResNet-18 as in the d2l seeds, batch norm (11,175,818 parameters)",
       make_resnet18, 32},
      {"mlp", "MLP as in the sharding notebook (seed 004): --mlp-layers x (Dense(--mlp-hidden), "
              "ReLU), Dense(10); input: the data's features (378,526,058 parameters at 90 x 2056 "
              "on --data synthetic's 1024)",
       make_mlp, 64, /*takes_options=*/true},
  };
  return table;
}

bool is_model_name(const std::string& name) { return find_entry(models(), name) != nullptr; }

std::unique_ptr<Model> make_model(const std::string& name, Device& dev, int max_batch,
                                  const ModelOptions& opts) {
  const ModelEntry& m = lookup_entry(models(), name, "--model", "model");
  DPB_CHECK(max_batch >= 1, "model batch must be >= 1, got " << max_batch);
  return m.make(dev, max_batch, opts);
}

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::vector<float> init_params(const std::vector<ParamInfo>& params, uint64_t seed) {
  size_t total = 0;
  for (const auto& p : params) total = std::max(total, p.offset + p.size);
  std::vector<float> w(total, 0.0f);
  uint64_t state = seed * 0x2545F4914F6CDD1Dull + 1;
  auto uniform = [&] { return (double(splitmix64(state) >> 11) + 0.5) * 0x1.0p-53; };  // (0, 1)
  auto normal = [&] {
    const double u1 = uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  };
  for (const auto& p : params) {
    float* dst = w.data() + p.offset;
    // LecunNormal: jax.nn.initializers.lecun_normal, i.e. variance_scaling(1, fan_in,
    // truncated_normal): N(0, 1) truncated to [-2, 2], scaled by sqrt(1 / fan_in) / 0.8796...,
    // the truncated normal's standard deviation, so that the variance is 1 / fan_in.
    double lecun_scale = 0;
    if (p.init == Init::LecunNormal) {
      double fan_in = 1;
      for (size_t d = 0; d + 1 < p.shape.size(); ++d) fan_in *= p.shape[d];
      lecun_scale = std::sqrt(1.0 / fan_in) / 0.87962566103423978;
    }
    for (size_t i = 0; i < p.size; ++i) {
      switch (p.init) {
        case Init::Zero: dst[i] = 0.0f; break;
        case Init::One: dst[i] = 1.0f; break;
        case Init::Normal001: dst[i] = float(0.01 * normal()); break;
        case Init::LecunNormal: {
          double z = normal();
          while (std::fabs(z) > 2.0) z = normal();  // rejection: the truncated normal exactly
          dst[i] = float(lecun_scale * z);
          break;
        }
      }
    }
  }
  return w;
}

std::vector<int> epoch_permutation(int n, uint64_t seed, int epoch) {
  std::vector<int> perm(n);
  for (int i = 0; i < n; ++i) perm[i] = i;
  uint64_t state = seed ^ (0x9E3779B97F4A7C15ull * uint64_t(epoch + 1));
  for (int i = n - 1; i > 0; --i) {  // Fisher-Yates
    int j = int(splitmix64(state) % uint64_t(i + 1));
    std::swap(perm[i], perm[j]);
  }
  return perm;
}

}  // namespace dpb

namespace dpb {
std::vector<ParamInfo> model_param_layout(const std::string& name, const ModelOptions& opts) {
  // The layout is the same on every backend: build the model once on the planning device, whose
  // buffers cost no memory (a 10000 x 1000000 MLP's activations at batch 1 would be 40 GB).
  auto dev = backend_of_kind(BackendKind::Meta).make(0, DeviceOptions{1});
  return make_model(name, *dev, 1, opts)->params();
}

int model_input_size(const std::string& name, const ModelOptions& opts) {
  auto dev = backend_of_kind(BackendKind::Meta).make(0, DeviceOptions{1});
  return make_model(name, *dev, 1, opts)->input_size();
}
}  // namespace dpb
