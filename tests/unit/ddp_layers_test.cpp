// The trainer's building blocks on one process: layers against finite differences, optimizers
// against hand-computed steps.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "loom/ddp/layers.hpp"
#include "loom/ddp/optim.hpp"
#include "loom/loom.hpp"

namespace loom::ddp {
namespace {

Tensor random_tensor(std::vector<std::size_t> shape, std::mt19937& rng, float lo = -1,
                     float hi = 1) {
  Tensor t(std::move(shape));
  std::uniform_real_distribution<float> u(lo, hi);
  for (std::size_t i = 0; i < t.numel(); ++i) t[i] = u(rng);
  return t;
}

// L = sum(output * weights): dL/d(output) = weights, and L is cheap to evaluate in double.
double weighted_sum(const Tensor& y, const Tensor& w) {
  double s = 0;
  for (std::size_t i = 0; i < y.numel(); ++i) s += static_cast<double>(y[i]) * w[i];
  return s;
}

// Central differences of L with respect to every element of `x`, compared with `analytic`.
template <typename Loss>
void expect_matches_finite_differences(Tensor& x, const Tensor& analytic, Loss loss, float h,
                                       double tolerance, const char* what) {
  for (std::size_t i = 0; i < x.numel(); ++i) {
    const float saved = x[i];
    x[i] = saved + h;
    const double up = loss();
    x[i] = saved - h;
    const double down = loss();
    x[i] = saved;
    const double numeric = (up - down) / (2.0 * h);
    EXPECT_NEAR(analytic[i], numeric, tolerance * (1.0 + std::abs(numeric)))
        << what << " [" << i << "]";
  }
}

TEST(Layers, LinearBackwardMatchesFiniteDifferences) {
  std::mt19937 rng(1);
  Linear layer(5, 3, 42);
  Tensor x = random_tensor({4, 5}, rng);
  const Tensor w = random_tensor({4, 3}, rng);
  layer.forward(x);
  Tensor dx = layer.backward(w);
  auto loss = [&] { return weighted_sum(layer.forward(x), w); };
  expect_matches_finite_differences(x, dx, loss, 1e-2f, 1e-3, "dx");
  expect_matches_finite_differences(layer.weight().value, layer.weight().grad, loss, 1e-2f, 1e-3,
                                    "dW");
  expect_matches_finite_differences(layer.bias().value, layer.bias().grad, loss, 1e-2f, 1e-3, "db");
}

TEST(Layers, MlpWithCrossEntropyBackwardMatchesFiniteDifferences) {
  std::mt19937 rng(2);
  Sequential model = make_mlp({6, 8, 4}, 7);
  Tensor x = random_tensor({5, 6}, rng);
  const std::vector<int> labels{0, 3, 1, 2, 3};
  SoftmaxCrossEntropy criterion;
  criterion.forward(model.forward(x), labels);
  model.zero_grad();
  Tensor dx = model.backward(criterion.backward());
  auto loss = [&] {
    SoftmaxCrossEntropy c;
    return static_cast<double>(c.forward(model.forward(x), labels));
  };
  for (Parameter* p : model.parameters())
    expect_matches_finite_differences(p->value, p->grad, loss, 1e-3f, 2e-2, p->name.c_str());
  expect_matches_finite_differences(x, dx, loss, 1e-3f, 2e-2, "input");
}

TEST(Layers, ReluPassesGradientOnlyWherePositive) {
  ReLU relu;
  Tensor x({1, 4});
  x[0] = -1, x[1] = 2, x[2] = 0, x[3] = 3;
  Tensor y = relu.forward(x);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], 2.0f);
  Tensor g({1, 4});
  g.fill(5);
  Tensor dx = relu.backward(g);
  EXPECT_EQ(dx[0], 0.0f);
  EXPECT_EQ(dx[1], 5.0f);
  EXPECT_EQ(dx[2], 0.0f);
  EXPECT_EQ(dx[3], 5.0f);
}

TEST(Layers, GradientsAccumulateAndEachIsReportedReadyWhenComputed) {
  Sequential model = make_mlp({3, 4, 2}, 1);
  std::vector<std::string> order;
  for (Parameter* p : model.parameters())
    p->on_grad_ready = [&order](Parameter& q) { order.push_back(q.name); };
  Tensor x({2, 3});
  x.fill(1);
  Tensor g({2, 2});
  g.fill(1);
  model.forward(x);
  model.backward(g);
  // Backward runs the layers in reverse: the last layer's gradients are ready first.
  EXPECT_EQ(order, (std::vector<std::string>{"fc1.weight", "fc1.bias", "fc0.weight", "fc0.bias"}));
  const float once = model.parameters()[3]->grad[0];
  model.forward(x);
  model.backward(g);
  EXPECT_FLOAT_EQ(model.parameters()[3]->grad[0], 2 * once);
  model.zero_grad();
  EXPECT_EQ(model.parameters()[3]->grad[0], 0.0f);
}

TEST(Layers, InitialisationIsDeterministicBySeed) {
  Sequential a = make_mlp({10, 20, 5}, 3), b = make_mlp({10, 20, 5}, 3),
             c = make_mlp({10, 20, 5}, 4);
  auto pa = a.parameters(), pb = b.parameters(), pc = c.parameters();
  EXPECT_EQ(std::memcmp(pa[0]->value.data(), pb[0]->value.data(), 200 * sizeof(float)), 0);
  EXPECT_NE(std::memcmp(pa[0]->value.data(), pc[0]->value.data(), 200 * sizeof(float)), 0);
  for (std::size_t i = 0; i < pa[0]->value.numel(); ++i)
    EXPECT_LE(std::abs(pa[0]->value[i]), 1.0f / std::sqrt(10.0f));
}

TEST(Layers, BadShapesAreRejected) {
  Linear layer(4, 2, 1);
  EXPECT_THROW(layer.forward(Tensor({3, 5})), InvalidArgument);
  SoftmaxCrossEntropy c;
  EXPECT_THROW(c.forward(Tensor({2, 3}), {0}), InvalidArgument);
  EXPECT_THROW(c.forward(Tensor({1, 3}), {3}), InvalidArgument);
  EXPECT_THROW(make_mlp({4}, 1), InvalidArgument);
}

TEST(Optimizers, SgdWithMomentumAndWeightDecayFollowsTorch) {
  Parameter p{"p", Tensor({2}), Tensor({2}), nullptr};
  p.value[0] = 1.0f, p.value[1] = -2.0f;
  Sgd sgd({&p}, SgdOptions{0.1, 0.9, 0.01, false});
  // Step 1: g = grad + 0.01 p; buf = g; p -= 0.1 buf.
  p.grad[0] = 0.5f, p.grad[1] = 0.25f;
  double g0 = 0.5 + 0.01 * 1.0, g1 = 0.25 + 0.01 * -2.0;
  double b0 = g0, b1 = g1, p0 = 1.0 - 0.1 * b0, p1 = -2.0 - 0.1 * b1;
  sgd.step();
  EXPECT_NEAR(p.value[0], p0, 1e-6);
  EXPECT_NEAR(p.value[1], p1, 1e-6);
  // Step 2: buf = 0.9 buf + g.
  p.grad[0] = -1.0f, p.grad[1] = 2.0f;
  g0 = -1.0 + 0.01 * p0, g1 = 2.0 + 0.01 * p1;
  b0 = 0.9 * b0 + g0, b1 = 0.9 * b1 + g1;
  sgd.step();
  EXPECT_NEAR(p.value[0], p0 - 0.1 * b0, 1e-6);
  EXPECT_NEAR(p.value[1], p1 - 0.1 * b1, 1e-6);
  EXPECT_EQ(sgd.steps(), 2);
}

TEST(Optimizers, AdamWFollowsTorch) {
  Parameter p{"p", Tensor({1}), Tensor({1}), nullptr};
  p.value[0] = 0.5f;
  AdamW adam({&p}, AdamWOptions{0.01, 0.9, 0.999, 1e-8, 0.1});
  double value = 0.5, m = 0, v = 0;
  for (int t = 1; t <= 3; ++t) {
    const double g = t == 2 ? -0.3 : 0.2;
    p.grad[0] = static_cast<float>(g);
    value *= 1 - 0.01 * 0.1;
    m = 0.9 * m + 0.1 * g;
    v = 0.999 * v + 0.001 * g * g;
    const double mhat = m / (1 - std::pow(0.9, t)), vhat = v / (1 - std::pow(0.999, t));
    value -= 0.01 * mhat / (std::sqrt(vhat) + 1e-8);
    adam.step();
    EXPECT_NEAR(p.value[0], value, 1e-6) << "step " << t;
  }
}
}  // namespace
}  // namespace loom::ddp
