// Optimizers with PyTorch's update rules (torch.optim.SGD and AdamW), over a list of parameters.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/ddp/layers.hpp"

namespace loom::ddp {

class Optimizer {
 public:
  explicit Optimizer(std::vector<Parameter*> params) : params_(std::move(params)) {}
  virtual ~Optimizer() = default;
  virtual void step() = 0;
  void zero_grad();
  // The state a checkpoint must keep (momentum buffers, moments, step count), as tensors.
  virtual std::vector<Tensor*> state() = 0;
  std::int64_t steps() const { return steps_; }
  void set_steps(std::int64_t steps) { steps_ = steps; }
  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }

 protected:
  std::vector<Parameter*> params_;
  std::int64_t steps_ = 0;
  double lr_ = 0;
};

struct SgdOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

// g = grad + weight_decay * p; buf = momentum * buf + g (buf = g on the first step);
// p -= lr * (nesterov ? g + momentum * buf : buf).
class Sgd final : public Optimizer {
 public:
  Sgd(std::vector<Parameter*> params, SgdOptions options);
  void step() override;
  std::vector<Tensor*> state() override;

 private:
  SgdOptions options_;
  std::vector<Tensor> momentum_;
};

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

// p -= lr * weight_decay * p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps).
class AdamW final : public Optimizer {
 public:
  AdamW(std::vector<Parameter*> params, AdamWOptions options);
  void step() override;
  std::vector<Tensor*> state() override;

 private:
  AdamWOptions options_;
  std::vector<Tensor> m_, v_;
};

}  // namespace loom::ddp
