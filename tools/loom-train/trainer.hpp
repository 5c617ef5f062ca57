// One training run of loom-train: data, model, optimizer and DDP over a communicator (or alone),
// the epochs, recovery from a lost rank, snapshots and the report.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "args.hpp"
#include "loom/ddp/checkpoint.hpp"
#include "loom/ddp/data.hpp"
#include "loom/ddp/ddp.hpp"
#include "loom/ddp/layers.hpp"
#include "loom/ddp/optim.hpp"
#include "loom/loom.hpp"
#include "schedule.hpp"

namespace loom_train {

using Clock = std::chrono::steady_clock;
using namespace loom::ddp;

inline double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// The optimizer --optimizer names, over the model's parameters.
std::unique_ptr<Optimizer> make_optimizer(const Args& a, Module& model, double lr);

// Time spent in each part of a step, summed over the steps timed.
struct StepTimes {
  double forward = 0, backward = 0, exposed = 0, optimizer = 0, data = 0, total = 0;
  std::size_t steps = 0;
  std::size_t samples = 0;  // over all ranks (their number may fall with --on-failure shrink)
};

class Trainer {
 public:
  Trainer(const Args& args, loom::Communicator* comm);
  int run();

 private:
  bool reached_the_end() const { return a_.max_steps && state_.global_step >= a_.max_steps; }

  // Optimizer steps over `samples` of this rank's (micro-batches of --batch-size, --accumulate
  // of them a step).
  std::size_t steps_over(std::size_t samples) const {
    const std::size_t batches = (samples + a_.batch_size - 1) / a_.batch_size;
    return (batches + a_.accumulate - 1) / a_.accumulate;
  }

  // Optimizer steps of a whole epoch at the current number of ranks.
  std::size_t steps_per_epoch() const {
    DistributedSampler whole = sampler_;
    whole.reshard(world_, rank_, 0);
    return steps_over(whole.num_samples());
  }

  // The rest of the epoch in progress (from state_); true once --steps is reached.
  bool run_epoch();

  // --on-failure shrink: the survivors make a communicator of themselves, agree on where they
  // are (one may have finished the step the lost rank broke off, another not), and go on from
  // there with the rest of the epoch shared out among them.
  void go_on_without_the_lost(const loom::Error& failure);
  void recover_once(bool& shrunk);

  void describe();

  // Loss and accuracy over the held-out samples (the last held_out_ of the data), each rank
  // taking every world-th one; rank 0 prints them.
  void evaluate();

  // One optimizer step over micro-batches [first, last); returns mean loss and accuracy.
  std::pair<double, double> train_step(const std::vector<std::size_t>& indices, std::size_t first,
                                       std::size_t last, std::size_t micro);

  // Steps on rank 0 alone with no communication (the others wait), for scaling efficiency.
  double calibrate_samples_per_s();

  void save_params();

  void summary();

  Args a_;
  loom::Communicator* comm_;
  std::optional<loom::Communicator> owned_comm_;  // the survivors', after a shrink
  int rank_, world_;
  LearningRate lr_;
  RisingLossWatch loss_watch_;
  Dataset data_;
  std::size_t held_out_;  // the last samples of data_, for --eval-every only
  Sequential model_;
  std::unique_ptr<Optimizer> optimizer_;
  DistributedSampler sampler_;
  std::unique_ptr<DistributedDataParallel> ddp_;
  SoftmaxCrossEntropy criterion_;
  TrainingState state_;
  StepTimes times_;
  std::size_t steps_taken_ = 0;
  std::size_t steps_done_here_ = 0, samples_done_here_ = 0;
  std::vector<double> epoch_loss_;
  Clock::time_point start_;
  int shrinks_ = 0;
  Tensor x_;
  std::vector<int> labels_;
};

}  // namespace loom_train
