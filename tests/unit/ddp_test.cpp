// The trainer's building blocks on one process: layers against finite differences, optimizers
// against hand-computed steps, the sampler's sharding and the data loaders (the snapshots are
// tests/unit/snapshot_test.cpp's).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "loom/ddp/data.hpp"
#include "loom/ddp/layers.hpp"
#include "loom/ddp/optim.hpp"
#include "loom/loom.hpp"

namespace loom::ddp {
namespace {

namespace fs = std::filesystem;

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

TEST(Sampler, EveryIndexExactlyOncePerEpochAcrossRanks) {
  for (int replicas : {1, 2, 3, 4}) {
    const std::size_t size = 12 * 5;
    std::multiset<std::size_t> seen;
    for (int r = 0; r < replicas; ++r) {
      DistributedSampler s(size, replicas, r, true, 9);
      s.set_epoch(2);
      auto mine = s.indices();
      EXPECT_EQ(mine.size(), size / static_cast<std::size_t>(replicas));
      seen.insert(mine.begin(), mine.end());
    }
    ASSERT_EQ(seen.size(), size);
    for (std::size_t i = 0; i < size; ++i) EXPECT_EQ(seen.count(i), 1u) << i;
  }
}

TEST(Sampler, ShufflesDifferentlyEachEpochAndAlikeForTheSameSeedAndEpoch) {
  DistributedSampler a(100, 2, 1, true, 5), b(100, 2, 1, true, 5), c(100, 2, 1, true, 6);
  a.set_epoch(0), b.set_epoch(0), c.set_epoch(0);
  EXPECT_EQ(a.indices(), b.indices());
  EXPECT_NE(a.indices(), c.indices());
  const auto first = a.indices();
  a.set_epoch(1);
  EXPECT_NE(a.indices(), first);
  DistributedSampler ordered(10, 2, 1, false);
  EXPECT_EQ(ordered.indices(), (std::vector<std::size_t>{1, 3, 5, 7, 9}));
}

TEST(Sampler, PadsOrDropsTheRemainderAsTorchDoes) {
  // 10 samples over 3 ranks: padded to 12 with the first two of the order.
  std::multiset<std::size_t> seen;
  for (int r = 0; r < 3; ++r) {
    DistributedSampler s(10, 3, r, false);
    EXPECT_EQ(s.num_samples(), 4u);
    auto mine = s.indices();
    seen.insert(mine.begin(), mine.end());
  }
  EXPECT_EQ(seen.size(), 12u);
  EXPECT_EQ(seen.count(0), 2u);
  EXPECT_EQ(seen.count(1), 2u);
  EXPECT_EQ(seen.count(9), 1u);
  // drop_last: 3 each, the tail of the order dropped.
  DistributedSampler d(10, 3, 2, false, 0, true);
  EXPECT_EQ(d.indices(), (std::vector<std::size_t>{2, 5, 8}));
  EXPECT_THROW(DistributedSampler(10, 2, 2), InvalidArgument);
}

TEST(Sampler, ReshardingGoesOnWithTheRestOfTheEpochAmongTheNewRanks) {
  // 3 ranks trained on their first 4 samples each: places 0..11 of the epoch's order.
  const std::size_t size = 60, consumed = 12;
  std::vector<std::size_t> order;  // the epoch's order, as one replica sees it
  DistributedSampler whole(size, 1, 0, true, 9);
  whole.set_epoch(3);
  order = whole.indices();
  std::multiset<std::size_t> done;
  for (int r = 0; r < 3; ++r) {
    DistributedSampler s(size, 3, r, true, 9);
    s.set_epoch(3);
    const auto mine = s.indices();
    done.insert(mine.begin(), mine.begin() + 4);
  }
  EXPECT_EQ(done, std::multiset<std::size_t>(order.begin(), order.begin() + consumed));
  // Two survivors share out the other 48 exactly: 24 each, none trained on twice.
  std::multiset<std::size_t> rest;
  for (int r = 0; r < 2; ++r) {
    DistributedSampler s(size, 3, 2, true, 9);
    s.set_epoch(3);
    s.reshard(2, r, consumed);
    EXPECT_EQ(s.num_samples(), 24u);
    EXPECT_EQ(s.replicas(), 2);
    const auto mine = s.indices();
    rest.insert(mine.begin(), mine.end());
    EXPECT_EQ(mine.front(), order[consumed + static_cast<std::size_t>(r)]);
  }
  EXPECT_EQ(rest, std::multiset<std::size_t>(order.begin() + consumed, order.end()));
  // A new epoch starts from its beginning; resharding at 0 is a fresh sampler.
  DistributedSampler s(size, 3, 1, true, 9), fresh(size, 2, 1, true, 9);
  s.set_epoch(3);
  s.reshard(2, 1, consumed);
  s.set_epoch(4), fresh.set_epoch(4);
  EXPECT_EQ(s.indices(), fresh.indices());
  // Past the end: nothing left; a bad rank is refused and changes nothing.
  s.reshard(2, 1, size + 5);
  EXPECT_EQ(s.num_samples(), 0u);
  EXPECT_TRUE(s.indices().empty());
  EXPECT_THROW(s.reshard(2, 2, 0), InvalidArgument);
  EXPECT_EQ(s.replicas(), 2);
}

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("loom-ddp-test-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

using Data = TempDir;

TEST_F(Data, CsvWithAndWithoutHeader) {
  std::ofstream(path("a.csv")) << "label,x,y\n1,0.5,2\n0,-1,3e-1\n2,4,5\n";
  Dataset d = load_csv(path("a.csv"));
  EXPECT_EQ(d.size(), 3u);
  EXPECT_EQ(d.features(), 2u);
  EXPECT_EQ(d.classes(), 3u);
  EXPECT_EQ(d.label(1), 0);
  EXPECT_FLOAT_EQ(d.sample(1)[1], 0.3f);
  std::ofstream(path("b.csv")) << "0,1,1\r\n1,2,2\r\n";
  EXPECT_EQ(load_csv(path("b.csv")).size(), 2u);
  std::ofstream(path("bad.csv")) << "0,1,1\n1,2\n";
  EXPECT_THROW(load_csv(path("bad.csv")), InvalidArgument);
  std::ofstream(path("nan.csv")) << "0,1,1\n1,x,2\n";
  EXPECT_THROW(load_csv(path("nan.csv")), InvalidArgument);
  EXPECT_THROW(load_csv(path("missing.csv")), InvalidArgument);
}

void write_idx(const std::string& path, std::uint32_t magic, std::vector<std::uint32_t> dims,
               const std::vector<unsigned char>& data) {
  std::ofstream out(path, std::ios::binary);
  auto be = [&](std::uint32_t v) {
    const unsigned char b[4] = {static_cast<unsigned char>(v >> 24),
                                static_cast<unsigned char>(v >> 16),
                                static_cast<unsigned char>(v >> 8), static_cast<unsigned char>(v)};
    out.write(reinterpret_cast<const char*>(b), 4);
  };
  be(magic);
  for (auto d : dims) be(d);
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
}

TEST_F(Data, MnistIdxFiles) {
  std::vector<unsigned char> pixels(3 * 2 * 2);
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<unsigned char>(i * 20);
  write_idx(path("img"), 2051, {3, 2, 2}, pixels);
  write_idx(path("lbl"), 2049, {3}, {7, 0, 9});
  Dataset d = load_mnist(path("img"), path("lbl"));
  EXPECT_EQ(d.size(), 3u);
  EXPECT_EQ(d.features(), 4u);
  EXPECT_EQ(d.classes(), 10u);
  EXPECT_EQ(d.label(2), 9);
  EXPECT_FLOAT_EQ(d.sample(1)[3], 140.0f / 255.0f);
  write_idx(path("short"), 2051, {3, 2, 2}, std::vector<unsigned char>(5));
  EXPECT_THROW(load_mnist(path("short"), path("lbl")), InvalidArgument);
  EXPECT_THROW(load_mnist(path("lbl"), path("img")), InvalidArgument);
  write_idx(path("lbl2"), 2049, {2}, {1, 2});
  EXPECT_THROW(load_mnist(path("img"), path("lbl2")), InvalidArgument);
}

// 65536 images of 2^24 x 2^24 pixels: 16 + count * pixels wraps to exactly the 16-byte header.
TEST_F(Data, MnistHeaderWhoseSizeWrapsIsRefusedNamingTheFile) {
  write_idx(path("wrap-img"), 2051, {65536, 1u << 24, 1u << 24}, {});
  write_idx(path("wrap-lbl"), 2049, {65536}, std::vector<unsigned char>(65536));
  try {
    load_mnist(path("wrap-img"), path("wrap-lbl"));
    FAIL() << "a header whose sizes overflow was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(path("wrap-img")), std::string::npos) << e.what();
  }
}

TEST_F(Data, TeacherDatasetIsLearnableAndDeterministic) {
  Dataset a = make_teacher_dataset(512, 8, 4, 3), b = make_teacher_dataset(512, 8, 4, 3);
  EXPECT_EQ(std::memcmp(a.sample(100), b.sample(100), 8 * sizeof(float)), 0);
  std::set<int> labels;
  for (std::size_t i = 0; i < a.size(); ++i) labels.insert(a.label(i));
  EXPECT_GE(labels.size(), 3u) << "the teacher should use most classes";
  Sequential model = make_mlp({8, 32, 4}, 5);
  Sgd sgd(model.parameters(), SgdOptions{0.1, 0.9});
  SoftmaxCrossEntropy ce;
  std::vector<std::size_t> all(a.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  Tensor x;
  std::vector<int> y;
  float first = 0, last = 0;
  for (int epoch = 0; epoch < 20; ++epoch)
    for (std::size_t b0 = 0; b0 < all.size(); b0 += 64) {
      a.batch(all, b0, 64, x, y);
      last = ce.forward(model.forward(x), y);
      if (epoch == 0 && b0 == 0) first = last;
      model.backward(ce.backward());
      sgd.step();
      sgd.zero_grad();
    }
  EXPECT_LT(last, 0.6f * first) << "loss " << first << " -> " << last;
}

}  // namespace
}  // namespace loom::ddp
