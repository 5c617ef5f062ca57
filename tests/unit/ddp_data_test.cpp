// The trainer's data on one process: the sampler's sharding and the data loaders.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include "loom/ddp/data.hpp"
#include "loom/ddp/layers.hpp"
#include "loom/ddp/optim.hpp"
#include "loom/loom.hpp"
#include "temp_dir.hpp"

namespace loom::ddp {
namespace {

namespace fs = std::filesystem;

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
