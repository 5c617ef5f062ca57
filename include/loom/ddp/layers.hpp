// Layers with explicit forward and backward passes (no autograd), the softmax cross-entropy
// loss, and the MLP that loom-train trains.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "loom/ddp/tensor.hpp"

namespace loom::ddp {

// A trainable tensor and its gradient. Backward passes add to `grad` (so gradients of several
// passes accumulate until zero_grad) and call `on_grad_ready`, if set, the moment this pass's
// contribution is in: DistributedDataParallel sets it to start a bucket's all-reduce early.
struct Parameter {
  std::string name;
  Tensor value;
  Tensor grad;
  std::function<void(Parameter&)> on_grad_ready;
};

class Module {
 public:
  virtual ~Module() = default;
  virtual std::string name() const = 0;
  // Input [batch, features]; the input is kept until backward.
  virtual Tensor forward(const Tensor& input) = 0;
  // dL/d(output) -> dL/d(input); adds to each parameter's gradient and reports it ready.
  virtual Tensor backward(const Tensor& grad_output) = 0;
  // In the order they are used by forward.
  virtual std::vector<Parameter*> parameters() { return {}; }
  void zero_grad();
};

// y = x W^T + b, W [out, in]. Initialised as PyTorch does (uniform in +-1/sqrt(in)), from a seed.
class Linear final : public Module {
 public:
  Linear(std::size_t in, std::size_t out, std::uint64_t seed, std::string name = "linear");
  std::string name() const override { return name_; }
  Tensor forward(const Tensor& input) override;
  Tensor backward(const Tensor& grad_output) override;
  std::vector<Parameter*> parameters() override { return {&weight_, &bias_}; }
  Parameter& weight() { return weight_; }
  Parameter& bias() { return bias_; }

 private:
  std::string name_;
  Parameter weight_, bias_;
  Tensor input_;
};

class ReLU final : public Module {
 public:
  explicit ReLU(std::string name = "relu") : name_(std::move(name)) {}
  std::string name() const override { return name_; }
  Tensor forward(const Tensor& input) override;
  Tensor backward(const Tensor& grad_output) override;

 private:
  std::string name_;
  Tensor output_;
};

// Modules applied in order; backward runs them in reverse.
class Sequential final : public Module {
 public:
  std::string name() const override { return "sequential"; }
  Sequential& add(std::unique_ptr<Module> module);
  Tensor forward(const Tensor& input) override;
  Tensor backward(const Tensor& grad_output) override;
  std::vector<Parameter*> parameters() override;
  std::size_t size() const { return modules_.size(); }
  Module& at(std::size_t i) { return *modules_.at(i); }

 private:
  std::vector<std::unique_ptr<Module>> modules_;
};

// widths = {784, 1024, 10}: Linear(784, 1024), ReLU, Linear(1024, 10). Layer i's seed derives
// from `seed`, so every process builds the same model.
Sequential make_mlp(const std::vector<std::size_t>& widths, std::uint64_t seed);

// Mean softmax cross-entropy over a batch of logits [batch, classes] and class labels.
class SoftmaxCrossEntropy {
 public:
  float forward(const Tensor& logits, const std::vector<int>& labels);
  // dL/d(logits) of the last forward, times `scale` (1/k to accumulate k micro-batches as one).
  Tensor backward(float scale = 1.0f) const;
  // Fraction of the last forward's rows whose largest logit is the label.
  double accuracy() const { return accuracy_; }

 private:
  Tensor probabilities_;
  std::vector<int> labels_;
  double accuracy_ = 0;
};

}  // namespace loom::ddp
