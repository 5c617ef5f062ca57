// Training data: datasets held in memory (a synthetic teacher-labelled set, CSV and MNIST IDX
// files), batches gathered from them, and the distributed sampler that shards them over ranks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/ddp/tensor.hpp"

namespace loom::ddp {

class Dataset {
 public:
  Dataset(std::size_t features, std::size_t classes) : features_(features), classes_(classes) {}
  std::size_t size() const { return labels_.size(); }
  std::size_t features() const { return features_; }
  std::size_t classes() const { return classes_; }
  const float* sample(std::size_t i) const { return inputs_.data() + i * features_; }
  int label(std::size_t i) const { return labels_[i]; }
  // Appends one sample (features() values and a label below classes()).
  void add(const float* x, int label);

  // Samples indices[begin, begin + count) as a batch: x [count, features], labels.
  void batch(const std::vector<std::size_t>& indices, std::size_t begin, std::size_t count,
             Tensor& x, std::vector<int>& labels) const;

 private:
  std::size_t features_, classes_;
  std::vector<float> inputs_;
  std::vector<int> labels_;
};

// `samples` inputs with standard-normal-like features, labelled by a fixed random teacher
// network (features -> 64 -> classes, ReLU) drawn from `seed`: a task an MLP can learn, so the
// loss really falls. Every process generates the same set.
Dataset make_teacher_dataset(std::size_t samples, std::size_t features, std::size_t classes,
                             std::uint64_t seed);
// Rows "label,x1,...,xn"; a first row that is not numeric is taken as a header. Classes are
// max label + 1.
Dataset load_csv(const std::string& path);
// The MNIST IDX files (images: magic 2051, count, rows, cols, bytes; labels: magic 2049,
// count, bytes); pixels scaled to [0, 1].
Dataset load_mnist(const std::string& images_path, const std::string& labels_path);

// torch.utils.data.DistributedSampler: this rank's share of a dataset of `size` samples, in an
// order shuffled by (seed + epoch). Without drop_last the shares are padded with the first
// indices to equal length; with it, the tail that does not divide evenly is dropped.
class DistributedSampler {
 public:
  DistributedSampler(std::size_t size, int replicas, int rank, bool shuffle = true,
                     std::uint64_t seed = 0, bool drop_last = false);
  // A new epoch starts at the beginning of its order.
  void set_epoch(std::uint64_t epoch);
  std::uint64_t epoch() const { return epoch_; }
  std::size_t num_samples() const { return num_samples_; }  // per rank
  std::vector<std::size_t> indices() const;

  // Shares out what is left of this epoch among `replicas` (after a rank was lost, or a restart
  // at another size): the epoch's order is the same, its first `consumed` places are taken as
  // done (every rank's batches so far), and the rest is split as a fresh epoch would be.
  void reshard(int replicas, int rank, std::size_t consumed);
  int replicas() const { return replicas_; }
  int rank() const { return rank_; }

 private:
  void share_out();

  std::size_t size_;
  int replicas_, rank_;
  bool shuffle_;
  std::uint64_t seed_;
  bool drop_last_;
  std::uint64_t epoch_ = 0;
  std::size_t consumed_ = 0;  // places of this epoch's order already done
  std::size_t num_samples_ = 0, total_size_ = 0;
};

}  // namespace loom::ddp
