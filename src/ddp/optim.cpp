#include "loom/ddp/optim.hpp"

#include <cmath>

#include "loom/trace.hpp"

namespace loom::ddp {

void Optimizer::zero_grad() {
  for (Parameter* p : params_) p->grad.zero();
}

Sgd::Sgd(std::vector<Parameter*> params, SgdOptions options)
    : Optimizer(std::move(params)), options_(options) {
  lr_ = options.lr;
  if (options_.momentum != 0)
    for (Parameter* p : params_) momentum_.emplace_back(p->value.shape());
}

namespace {
// The update loops, with the per-step choices hoisted out so that the compiler vectorises them.
void sgd_plain(float* __restrict p, const float* __restrict grad, std::size_t n, float lr,
               float wd) {
  for (std::size_t i = 0; i < n; ++i) p[i] -= lr * (grad[i] + wd * p[i]);
}
// One pass over the memory: the buffer is read and written once, the parameter once.
template <bool kFirst, bool kNesterov>
void sgd_momentum(float* __restrict p, const float* __restrict grad, float* __restrict buf,
                  std::size_t n, float lr, float wd, float mu) {
  for (std::size_t i = 0; i < n; ++i) {
    const float g = grad[i] + wd * p[i];
    const float b = kFirst ? g : mu * buf[i] + g;
    buf[i] = b;
    p[i] -= lr * (kNesterov ? g + mu * b : b);
  }
}
}  // namespace

void Sgd::step() {
  trace::Scope span("optimizer step", "compute");
  const float lr = static_cast<float>(lr_), mu = static_cast<float>(options_.momentum),
              wd = static_cast<float>(options_.weight_decay);
  for (std::size_t k = 0; k < params_.size(); ++k) {
    Parameter& param = *params_[k];
    if (mu == 0)
      sgd_plain(param.value.data(), param.grad.data(), param.value.numel(), lr, wd);
    else
      (steps_ == 0 ? (options_.nesterov ? sgd_momentum<true, true> : sgd_momentum<true, false>)
                   : (options_.nesterov ? sgd_momentum<false, true> : sgd_momentum<false, false>))(
          param.value.data(), param.grad.data(), momentum_[k].data(), param.value.numel(), lr, wd,
          mu);
  }
  ++steps_;
}

std::vector<Tensor*> Sgd::state() {
  std::vector<Tensor*> s;
  for (Tensor& t : momentum_) s.push_back(&t);
  return s;
}

AdamW::AdamW(std::vector<Parameter*> params, AdamWOptions options)
    : Optimizer(std::move(params)), options_(options) {
  lr_ = options.lr;
  for (Parameter* p : params_) {
    m_.emplace_back(p->value.shape());
    v_.emplace_back(p->value.shape());
  }
}

void AdamW::step() {
  trace::Scope span("optimizer step", "compute");
  ++steps_;
  const double t = static_cast<double>(steps_);
  const float lr = static_cast<float>(lr_), b1 = static_cast<float>(options_.beta1),
              b2 = static_cast<float>(options_.beta2), eps = static_cast<float>(options_.eps);
  const float decay = static_cast<float>(1.0 - lr_ * options_.weight_decay);
  const float correction1 = static_cast<float>(1.0 - std::pow(options_.beta1, t));
  const float root_correction2 = static_cast<float>(std::sqrt(1.0 - std::pow(options_.beta2, t)));
  const float step_size = lr / correction1;
  for (std::size_t k = 0; k < params_.size(); ++k) {
    float* p = params_[k]->value.data();
    const float* g = params_[k]->grad.data();
    float* m = m_[k].data();
    float* v = v_[k].data();
    for (std::size_t i = 0, n = params_[k]->value.numel(); i < n; ++i) {
      p[i] *= decay;
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      p[i] -= step_size * m[i] / (std::sqrt(v[i]) / root_correction2 + eps);
    }
  }
}

std::vector<Tensor*> AdamW::state() {
  std::vector<Tensor*> s;
  for (Tensor& t : m_) s.push_back(&t);
  for (Tensor& t : v_) s.push_back(&t);
  return s;
}

}  // namespace loom::ddp
