// loom-train's learning rate: fitted to the global batch by default, scaled with the number of
// ranks after a shrink; and the watch on the epoch loss that warns when it keeps rising.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "args.hpp"

namespace loom_train {

// SGD's default: this much per kReferenceBatch samples of the global batch (linear scaling).
// Measured on the synthetic data: 0.01 at a global batch of 32 falls to a loss of 0.0000 over
// 60 epochs, where 0.05 diverges after about 6 epochs; the same ratio converges alike from a
// global batch of 32 to 1024.
constexpr double kSgdLrPerReference = 0.01;
constexpr std::size_t kReferenceBatch = 32;
// AdamW's update does not grow with the batch as SGD's does: one rate for any batch.
constexpr double kAdamWLr = 1e-3;

class LearningRate {
 public:
  // `world`: the number of ranks the run starts with.
  LearningRate(const Args& args, int world);
  // The rate at `world` ranks: the start's, scaled by world / the start's where the args say
  // so (--lr-scale-on-shrink, the default).
  double at(int world) const;
  // "lr 0.02 (0.01 per 32 samples of the global batch of 64)", "lr 0.05 (--lr)", ...
  std::string describe(int world) const;

 private:
  double start_;
  int world_;
  bool scale_;
  std::string source_;
};

// The global batch at `world` ranks: samples per optimizer step over all ranks.
std::size_t global_batch(const Args& args, int world);

// Warns once per streak when the epoch loss has risen kRisingEpochs times in a row.
class RisingLossWatch {
 public:
  static constexpr std::size_t kRisingEpochs = 3;
  // The warning to print after this epoch's loss, if any.
  std::optional<std::string> add(double loss, double lr, std::size_t batch);

 private:
  std::vector<double> losses_;
  std::size_t rises_ = 0;
};

}  // namespace loom_train
