// model.h: the models dpbench trains (LeNet and ResNet-18 as in d2l 12.5 and 12.6, the sharding
// notebook's MLP), written once over the Device interface so every backend runs the same network.
//
// A Model instance is one replica bound to one device: it owns that device's activation buffers
// (sized for max_batch) and per-device state (BatchNorm running statistics, which are not
// all-reduced, as in d2l and Goyal et al.). Parameters and gradients are flat buffers owned by the
// caller, laid out in model order as params() describes; --dump-params writes that same order.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "src/core/device.h"

namespace dpb {

// N(0, 0.01) weights (d2l), zero biases/betas, one gammas; LecunNormal: flax nn.Dense's default
// kernel init, a normal truncated to 2 standard deviations, variance 1 / fan_in (fan_in: the
// product of every dimension but the last).
enum class Init { Normal001, Zero, One, LecunNormal };

// Options of the models that take them (--mlp-layers, --mlp-hidden, --mlp-input); the others
// ignore them. The MLP's defaults are the sharding notebook's (../shared/seeds/004): 90 hidden
// layers of 2056, input 1024 on synthetic data (on Fashion-MNIST the input is the 784 pixels).
struct ModelOptions {
  int mlp_layers = 90;
  int mlp_hidden = 2056;
  int mlp_input = 1024;
};

struct ParamInfo {
  std::string name;
  std::vector<int> shape;
  Init init = Init::Zero;
  size_t offset = 0, size = 0;  // in floats, within the flat buffer
};

// Appends parameters and assigns offsets.
class ParamTable {
 public:
  int add(const std::string& name, std::vector<int> shape, Init init);
  const std::vector<ParamInfo>& list() const { return list_; }
  size_t total() const { return total_; }

 private:
  std::vector<ParamInfo> list_;
  size_t total_ = 0;
};

// Where a forward or backward finds parameter i and writes its gradient. FlatParams: the
// replicated case, flat buffers in the table's layout; the sharded modes (src/train/shard.h)
// hand out gathered units and gradient buckets instead.
class ParamSource {
 public:
  virtual ~ParamSource() = default;
  virtual const float* param(int i) = 0;  // valid until the source moves to another unit
  virtual float* grad(int i) = 0;         // where parameter i's gradient goes (backward only)
};

class FlatParams final : public ParamSource {
 public:
  FlatParams(const std::vector<ParamInfo>& params, const float* w, float* g)
      : params_(params), w_(w), g_(g) {}
  const float* param(int i) override { return w_ + params_[size_t(i)].offset; }
  float* grad(int i) override { return g_ + params_[size_t(i)].offset; }

 private:
  const std::vector<ParamInfo>& params_;
  const float* w_;
  float* g_;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual std::string name() const = 0;
  const std::vector<ParamInfo>& params() const { return table_.list(); }
  size_t num_floats() const { return table_.total(); }
  std::vector<size_t> param_sizes() const;
  int max_batch() const { return max_batch_; }
  // Input features per example: 784 for the 28x28 image models, the MLP's --mlp-input.
  virtual int input_size() const { return 28 * 28; }

  // Forward on n <= max_batch examples x (n, input_size()) on the device (images: (n, 1, 28, 28));
  // returns the logits (n, 10).
  // train selects batch statistics (and saves what backward needs) vs running statistics.
  // w: the flat parameter buffer, or a ParamSource (sharded data parallelism gathers a unit's
  // parameters when the model first asks for one of them: src/train/shard.h).
  const float* forward(ParamSource& w, const float* x, int n, bool train) {
    return forward_impl(w, x, n, train);
  }
  const float* forward(const float* w, const float* x, int n, bool train);
  // Backward of the last training forward, from dlogits (n, 10). Writes every parameter's gradient
  // where the source says (flat: into g, same layout as w) and calls ready(i) as soon as parameter
  // i's gradient is final.
  void backward(ParamSource& w, const float* dlogits, int n, const std::function<void(int)>& ready) {
    backward_impl(w, dlogits, n, ready);
  }
  void backward(const float* w, float* g, const float* dlogits, int n,
                const std::function<void(int)>& ready);
 protected:
  Model(Device& dev, int max_batch) : dev_(dev), max_batch_(max_batch) {}
  // Implementations: read parameter i with P(w, i) when the op that uses it is issued, write
  // its gradient at G(w, i); use parameters in the table's order in forward and in reverse in
  // backward (a sharded run checks it: its gathers follow that order).
  virtual const float* forward_impl(ParamSource& w, const float* x, int n, bool train) = 0;
  virtual void backward_impl(ParamSource& w, const float* dlogits, int n,
                             const std::function<void(int)>& ready) = 0;
  static const float* P(ParamSource& w, int i) { return w.param(i); }
  static float* G(ParamSource& w, int i) { return w.grad(i); }

  Device& dev_;
  int max_batch_;
  ParamTable table_;
};

// The table of models (the --model choices, --help, validation, benchmarks and tests read it).
// Adding a model: its file (src/model/<name>.cpp, a Model subclass over Device) and one entry
// in model.cpp.
struct ModelEntry {
  std::string name;  // --model value
  std::string help;  // one line for --help
  // opts: the model's options (ModelOptions); models without any ignore them.
  std::unique_ptr<Model> (*make)(Device& dev, int max_batch, const ModelOptions& opts);
  // dpbench-micro's overlap family: the global batch it times by default (--dpb_<name>_batch):
  // large enough to time a step, small enough for seconds per step on a CPU.
  int bench_batch = 256;
  // Sized by ModelOptions (--mlp-layers, --mlp-hidden, --mlp-input); the others ignore them.
  bool takes_options = false;
};
const std::vector<ModelEntry>& models();

// name: an entry of models(); throws dpb::Error naming the value otherwise.
std::unique_ptr<Model> make_model(const std::string& name, Device& dev, int max_batch,
                                  const ModelOptions& opts);
bool is_model_name(const std::string& name);
// The parameter layout without allocating anything on a device (for planning and benchmarks).
std::vector<ParamInfo> model_param_layout(const std::string& name, const ModelOptions& opts);
// Model::input_size() of that model, without a device either.
int model_input_size(const std::string& name, const ModelOptions& opts);

// The layer of each parameter (index: parameter): consecutive parameters that share a name up to
// its last '.' ("conv1.weight", "conv1.bias"). A model's device op reads the parameters of one
// layer only, so sharded units made of whole layers never split an op (src/train/shard.h).
std::vector<int> param_layers(const std::vector<ParamInfo>& params);

// Deterministic host initialization from the seed (normals by Box-Muller over splitmix64, so the
// same on every platform and for every device count).
std::vector<float> init_params(const std::vector<ParamInfo>& params, uint64_t seed);

// Deterministic helpers shared by the trainer and the tests.
uint64_t splitmix64(uint64_t& state);
std::vector<int> epoch_permutation(int n, uint64_t seed, int epoch);

}  // namespace dpb
