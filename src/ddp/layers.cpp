#include "loom/ddp/layers.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include <fmt/format.h>

#include "loom/loom.hpp"
#include "loom/trace.hpp"

namespace loom::ddp {

namespace {

// Uniform in [-bound, bound) from 53 random bits: the same on every platform, unlike
// std::uniform_real_distribution.
void fill_uniform(Tensor& t, float bound, std::mt19937_64& rng) {
  for (std::size_t i = 0; i < t.numel(); ++i) {
    const double u = static_cast<double>(rng() >> 11) * 0x1p-53;  // [0, 1)
    t[i] = static_cast<float>((2.0 * u - 1.0) * bound);
  }
}

void check_input(const Module& m, const Tensor& x, std::size_t features) {
  if (x.rank() != 2 || x.dim(1) != features)
    throw InvalidArgument(
        fmt::format("{}: input {} is not [batch, {}]", m.name(), x.shape_string(), features));
}

void report_ready(Parameter& p) {
  if (p.on_grad_ready) p.on_grad_ready(p);
}

}  // namespace

void Module::zero_grad() {
  for (Parameter* p : parameters()) p->grad.zero();
}

Linear::Linear(std::size_t in, std::size_t out, std::uint64_t seed, std::string name)
    : name_(std::move(name)) {
  weight_ = Parameter{name_ + ".weight", Tensor({out, in}), Tensor({out, in}), nullptr};
  bias_ = Parameter{name_ + ".bias", Tensor({out}), Tensor({out}), nullptr};
  std::mt19937_64 rng(seed);
  const float bound = in > 0 ? 1.0f / std::sqrt(static_cast<float>(in)) : 0.0f;
  fill_uniform(weight_.value, bound, rng);
  fill_uniform(bias_.value, bound, rng);
}

Tensor Linear::forward(const Tensor& input) {
  const std::size_t out = weight_.value.dim(0), in = weight_.value.dim(1);
  check_input(*this, input, in);
  input_ = input;
  Tensor y({input.dim(0), out});
  for (std::size_t r = 0; r < y.dim(0); ++r)
    std::copy(bias_.value.data(), bias_.value.data() + out, y.data() + r * out);
  matmul(input, false, weight_.value, true, y, 1.0f, 1.0f);
  return y;
}

Tensor Linear::backward(const Tensor& grad_output) {
  const std::size_t out = weight_.value.dim(0), batch = input_.dim(0);
  if (grad_output.rank() != 2 || grad_output.dim(0) != batch || grad_output.dim(1) != out)
    throw InvalidArgument(fmt::format("{}: gradient {} does not match the output [{}, {}]", name_,
                                      grad_output.shape_string(), batch, out));
  // dW += dy^T x, then db += column sums of dy: each is final for this pass once computed.
  matmul(grad_output, true, input_, false, weight_.grad, 1.0f, 1.0f);
  report_ready(weight_);
  float* __restrict db = bias_.grad.data();
  const float* __restrict dy = grad_output.data();
  for (std::size_t r = 0; r < batch; ++r)
    for (std::size_t j = 0; j < out; ++j) db[j] += dy[r * out + j];
  report_ready(bias_);
  Tensor dx({batch, weight_.value.dim(1)});
  matmul(grad_output, false, weight_.value, false, dx);
  return dx;
}

Tensor ReLU::forward(const Tensor& input) {
  output_ = Tensor(input.shape());
  const float* __restrict x = input.data();
  float* __restrict y = output_.data();
  for (std::size_t i = 0, n = input.numel(); i < n; ++i) y[i] = std::max(x[i], 0.0f);
  return output_;
}

Tensor ReLU::backward(const Tensor& grad_output) {
  if (grad_output.numel() != output_.numel())
    throw InvalidArgument(fmt::format("{}: gradient {} does not match the output {}", name_,
                                      grad_output.shape_string(), output_.shape_string()));
  Tensor dx(grad_output.shape());
  const float* __restrict y = output_.data();
  const float* __restrict g = grad_output.data();
  float* __restrict d = dx.data();
  for (std::size_t i = 0, n = dx.numel(); i < n; ++i) d[i] = y[i] > 0.0f ? g[i] : 0.0f;
  return dx;
}

Sequential& Sequential::add(std::unique_ptr<Module> module) {
  modules_.push_back(std::move(module));
  return *this;
}

Tensor Sequential::forward(const Tensor& input) {
  Tensor x = input;
  for (auto& m : modules_) {
    trace::Scope span("forward " + m->name(), "compute");
    x = m->forward(x);
  }
  return x;
}

Tensor Sequential::backward(const Tensor& grad_output) {
  Tensor g = grad_output;
  for (auto it = modules_.rbegin(); it != modules_.rend(); ++it) {
    trace::Scope span("backward " + (*it)->name(), "compute");
    g = (*it)->backward(g);
  }
  return g;
}

std::vector<Parameter*> Sequential::parameters() {
  std::vector<Parameter*> all;
  for (auto& m : modules_)
    for (Parameter* p : m->parameters()) all.push_back(p);
  return all;
}

Sequential make_mlp(const std::vector<std::size_t>& widths, std::uint64_t seed) {
  if (widths.size() < 2)
    throw InvalidArgument(
        fmt::format("make_mlp: need at least an input and an output width, got {}", widths.size()));
  Sequential model;
  for (std::size_t i = 0; i + 1 < widths.size(); ++i) {
    if (widths[i] == 0 || widths[i + 1] == 0)
      throw InvalidArgument(fmt::format("make_mlp: width {} is zero", widths[i] ? i + 1 : i));
    model.add(std::make_unique<Linear>(
        widths[i], widths[i + 1], seed * 0x9e3779b97f4a7c15ull + i + 1, fmt::format("fc{}", i)));
    if (i + 2 < widths.size()) model.add(std::make_unique<ReLU>(fmt::format("relu{}", i)));
  }
  return model;
}

float SoftmaxCrossEntropy::forward(const Tensor& logits, const std::vector<int>& labels) {
  if (logits.rank() != 2 || logits.dim(0) != labels.size())
    throw InvalidArgument(fmt::format("softmax_cross_entropy: logits {} for {} labels",
                                      logits.shape_string(), labels.size()));
  const std::size_t batch = logits.dim(0), classes = logits.dim(1);
  probabilities_ = Tensor(logits.shape());
  labels_ = labels;
  double loss = 0;
  std::size_t correct = 0;
  for (std::size_t r = 0; r < batch; ++r) {
    const int label = labels[r];
    if (label < 0 || static_cast<std::size_t>(label) >= classes)
      throw InvalidArgument(
          fmt::format("softmax_cross_entropy: label {} outside [0, {})", label, classes));
    const float* z = logits.data() + r * classes;
    float* p = probabilities_.data() + r * classes;
    const std::size_t arg = static_cast<std::size_t>(std::max_element(z, z + classes) - z);
    const float top = z[arg];
    double sum = 0;
    for (std::size_t j = 0; j < classes; ++j) sum += (p[j] = std::exp(z[j] - top));
    for (std::size_t j = 0; j < classes; ++j) p[j] = static_cast<float>(p[j] / sum);
    loss += std::log(sum) - (z[label] - top);  // -log softmax(z)[label]
    correct += arg == static_cast<std::size_t>(label);
  }
  accuracy_ = batch ? static_cast<double>(correct) / static_cast<double>(batch) : 0.0;
  return batch ? static_cast<float>(loss / static_cast<double>(batch)) : 0.0f;
}

Tensor SoftmaxCrossEntropy::backward(float scale) const {
  Tensor g = probabilities_.clone();
  const std::size_t batch = g.rank() ? g.dim(0) : 0;
  if (batch == 0) return g;
  const std::size_t classes = g.dim(1);
  for (std::size_t r = 0; r < batch; ++r)
    g[r * classes + static_cast<std::size_t>(labels_[r])] -= 1.0f;
  const float k = scale / static_cast<float>(batch);
  for (std::size_t i = 0; i < g.numel(); ++i) g[i] *= k;
  return g;
}

}  // namespace loom::ddp
