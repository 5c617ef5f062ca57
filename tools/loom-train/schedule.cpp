#include "schedule.hpp"

#include <fmt/format.h>

namespace loom_train {

std::size_t global_batch(const Args& args, int world) {
  return args.batch_size * args.accumulate * static_cast<std::size_t>(world);
}

LearningRate::LearningRate(const Args& args, int world)
    : world_(world), scale_(args.lr_scale_on_shrink) {
  if (args.lr) {
    start_ = *args.lr;
    source_ = "--lr";
  } else if (args.optimizer == "adamw") {
    start_ = kAdamWLr;
    source_ = "adamw's default";
  } else {
    const std::size_t batch = global_batch(args, world);
    start_ = kSgdLrPerReference * static_cast<double>(batch) / static_cast<double>(kReferenceBatch);
    source_ = fmt::format("{} per {} samples of the global batch of {}", kSgdLrPerReference,
                          kReferenceBatch, batch);
  }
}

double LearningRate::at(int world) const {
  if (!scale_ || world == world_) return start_;
  return start_ * static_cast<double>(world) / static_cast<double>(world_);
}

std::string LearningRate::describe(int world) const {
  if (!scale_ || world == world_) return fmt::format("lr {:.6g} ({})", start_, source_);
  return fmt::format("lr {:.6g} ({:.6g} at {} ranks, scaled to {})", at(world), start_, world_,
                     world);
}

std::optional<std::string> RisingLossWatch::add(double loss, double lr, std::size_t batch) {
  const bool rose = !losses_.empty() && loss > losses_.back();
  losses_.push_back(loss);
  rises_ = rose ? rises_ + 1 : 0;
  if (rises_ != kRisingEpochs) return std::nullopt;
  std::string curve;
  for (std::size_t i = losses_.size() - kRisingEpochs - 1; i < losses_.size(); ++i)
    curve += fmt::format("{}{:.4f}", curve.empty() ? "" : " -> ", losses_[i]);
  return fmt::format(
      "warning: the epoch loss rose {} epochs in a row ({}): the learning rate {:.6g} may be "
      "too high for the global batch of {} (see --lr in --help)",
      kRisingEpochs, curve, lr, batch);
}

}  // namespace loom_train
