#include "loom/ddp/data.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include <fmt/format.h>

#include "loom/ddp/layers.hpp"
#include "loom/loom.hpp"

namespace loom::ddp {

void Dataset::add(const float* x, int label) {
  if (label < 0 || static_cast<std::size_t>(label) >= classes_)
    throw InvalidArgument(fmt::format("dataset: label {} outside [0, {})", label, classes_));
  inputs_.insert(inputs_.end(), x, x + features_);
  labels_.push_back(label);
}

void Dataset::batch(const std::vector<std::size_t>& indices, std::size_t begin, std::size_t count,
                    Tensor& x, std::vector<int>& labels) const {
  if (begin + count > indices.size())
    throw InvalidArgument(fmt::format("dataset: batch [{}, {}) past {} indices", begin,
                                      begin + count, indices.size()));
  if (x.rank() != 2 || x.dim(0) != count || x.dim(1) != features_) x = Tensor({count, features_});
  labels.resize(count);
  for (std::size_t k = 0; k < count; ++k) {
    const std::size_t i = indices[begin + k];
    if (i >= size()) throw InvalidArgument(fmt::format("dataset: index {} of {}", i, size()));
    std::memcpy(x.data() + k * features_, sample(i), features_ * sizeof(float));
    labels[k] = labels_[i];
  }
}

Dataset make_teacher_dataset(std::size_t samples, std::size_t features, std::size_t classes,
                             std::uint64_t seed) {
  Sequential teacher = make_mlp({features, 64, classes}, seed ^ 0x7eac4e5ull);
  Dataset data(features, classes);
  std::mt19937_64 rng(seed);
  // Irwin-Hall: the sum of 4 uniforms, centred and scaled to unit variance; cheap and portable.
  auto normal = [&rng] {
    std::uint64_t r = rng();
    double s = 0;
    for (int k = 0; k < 4; ++k, r >>= 16) s += static_cast<double>(r & 0xffff) / 65536.0;
    return static_cast<float>((s - 2.0) * std::sqrt(3.0));
  };
  constexpr std::size_t kChunk = 256;  // label through the teacher in batches
  Tensor x({kChunk, features});
  for (std::size_t start = 0; start < samples; start += kChunk) {
    const std::size_t n = std::min(kChunk, samples - start);
    if (n != kChunk) x = Tensor({n, features});
    for (std::size_t i = 0; i < x.numel(); ++i) x[i] = normal();
    Tensor logits = teacher.forward(x);
    for (std::size_t r = 0; r < n; ++r) {
      const float* z = logits.data() + r * classes;
      data.add(x.data() + r * features, static_cast<int>(std::max_element(z, z + classes) - z));
    }
  }
  return data;
}

Dataset load_csv(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InvalidArgument(fmt::format("load_csv: cannot open {}", path));
  std::vector<std::vector<float>> rows;
  std::vector<int> labels;
  std::string line;
  std::size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    std::vector<float> values;
    std::stringstream fields(line);
    std::string field;
    bool numeric = true;
    while (std::getline(fields, field, ',')) {
      char* end = nullptr;
      const float v = std::strtof(field.c_str(), &end);
      if (end == field.c_str() || *end != '\0') numeric = false;
      values.push_back(v);
    }
    if (!numeric) {
      if (line_no == 1 && rows.empty()) continue;  // header
      throw InvalidArgument(fmt::format("load_csv: {} line {}: not a number", path, line_no));
    }
    if (values.size() < 2)
      throw InvalidArgument(
          fmt::format("load_csv: {} line {}: need a label and features", path, line_no));
    if (!rows.empty() && values.size() - 1 != rows.front().size())
      throw InvalidArgument(fmt::format("load_csv: {} line {}: {} features, earlier rows have {}",
                                        path, line_no, values.size() - 1, rows.front().size()));
    const float label = values.front();
    if (label < 0 || label != std::floor(label))
      throw InvalidArgument(fmt::format("load_csv: {} line {}: label {} is not a class number",
                                        path, line_no, label));
    labels.push_back(static_cast<int>(label));
    rows.emplace_back(values.begin() + 1, values.end());
  }
  if (rows.empty()) throw InvalidArgument(fmt::format("load_csv: {} has no samples", path));
  Dataset data(rows.front().size(),
               static_cast<std::size_t>(*std::max_element(labels.begin(), labels.end())) + 1);
  for (std::size_t i = 0; i < rows.size(); ++i) data.add(rows[i].data(), labels[i]);
  return data;
}

namespace {

std::vector<unsigned char> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InvalidArgument(fmt::format("load_mnist: cannot open {}", path));
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(in), {});
}

std::uint32_t big_endian(const std::vector<unsigned char>& b, std::size_t at) {
  return static_cast<std::uint32_t>(b[at]) << 24 | static_cast<std::uint32_t>(b[at + 1]) << 16 |
         static_cast<std::uint32_t>(b[at + 2]) << 8 | b[at + 3];
}

}  // namespace

Dataset load_mnist(const std::string& images_path, const std::string& labels_path) {
  const auto images = read_file(images_path);
  const auto labels = read_file(labels_path);
  if (images.size() < 16 || big_endian(images, 0) != 2051)
    throw InvalidArgument(
        fmt::format("load_mnist: {} is not an IDX image file (magic 2051)", images_path));
  if (labels.size() < 8 || big_endian(labels, 0) != 2049)
    throw InvalidArgument(
        fmt::format("load_mnist: {} is not an IDX label file (magic 2049)", labels_path));
  const std::size_t count = big_endian(images, 4), rows = big_endian(images, 8),
                    cols = big_endian(images, 12);
  if (big_endian(labels, 4) != count)
    throw InvalidArgument(
        fmt::format("load_mnist: {} images but {} labels", count, big_endian(labels, 4)));
  // The sizes come from the file: each product is checked, so a crafted header cannot wrap.
  std::size_t pixels = 0, image_bytes = 0;
  if (__builtin_mul_overflow(rows, cols, &pixels) ||
      __builtin_mul_overflow(count, pixels, &image_bytes) || image_bytes > images.size() - 16)
    throw InvalidArgument(
        fmt::format("load_mnist: {} declares {} images of {}x{} pixels, more than its {} bytes",
                    images_path, count, rows, cols, images.size()));
  if (pixels == 0 || images.size() - 16 != image_bytes || labels.size() - 8 != count)
    throw InvalidArgument(
        fmt::format("load_mnist: {} or {} is truncated or has trailing bytes ({} images of {}x{})",
                    images_path, labels_path, count, rows, cols));
  const int classes = count ? *std::max_element(labels.begin() + 8, labels.end()) + 1 : 1;
  Dataset data(pixels, static_cast<std::size_t>(std::max(classes, 10)));
  std::vector<float> x(pixels);
  for (std::size_t i = 0; i < count; ++i) {
    for (std::size_t p = 0; p < pixels; ++p) x[p] = images[16 + i * pixels + p] / 255.0f;
    data.add(x.data(), labels[8 + i]);
  }
  return data;
}

DistributedSampler::DistributedSampler(std::size_t size, int replicas, int rank, bool shuffle,
                                       std::uint64_t seed, bool drop_last)
    : size_(size),
      replicas_(replicas),
      rank_(rank),
      shuffle_(shuffle),
      seed_(seed),
      drop_last_(drop_last) {
  reshard(replicas, rank, 0);
}

void DistributedSampler::set_epoch(std::uint64_t epoch) {
  epoch_ = epoch;
  consumed_ = 0;
  share_out();
}

void DistributedSampler::reshard(int replicas, int rank, std::size_t consumed) {
  if (replicas < 1 || rank < 0 || rank >= replicas)
    throw InvalidArgument(
        fmt::format("DistributedSampler: rank {} of {} replicas", rank, replicas));
  replicas_ = replicas, rank_ = rank, consumed_ = std::min(consumed, size_);
  share_out();
}

void DistributedSampler::share_out() {
  const std::size_t r = static_cast<std::size_t>(replicas_), left = size_ - consumed_;
  num_samples_ = drop_last_ && left % r != 0 ? (left - left % r) / r : (left + r - 1) / r;
  total_size_ = num_samples_ * r;
}

std::vector<std::size_t> DistributedSampler::indices() const {
  std::vector<std::size_t> order(size_);
  for (std::size_t i = 0; i < size_; ++i) order[i] = i;
  if (shuffle_) {
    // Fisher-Yates with unbiased bounded draws: the same order on every platform.
    std::mt19937_64 rng(seed_ + epoch_);
    for (std::size_t i = size_; i > 1; --i) {
      const std::uint64_t bound = i, limit = UINT64_MAX - UINT64_MAX % bound;
      std::uint64_t r;
      do r = rng();
      while (r >= limit);
      std::swap(order[i - 1], order[r % bound]);
    }
  }
  order.erase(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(consumed_));
  if (order.empty()) return {};
  for (std::size_t i = 0; order.size() < total_size_; ++i) order.push_back(order[i]);  // padding
  order.resize(total_size_);
  std::vector<std::size_t> mine;
  mine.reserve(num_samples_);
  for (std::size_t i = static_cast<std::size_t>(rank_); i < total_size_;
       i += static_cast<std::size_t>(replicas_))
    mine.push_back(order[i]);
  return mine;
}

}  // namespace loom::ddp
