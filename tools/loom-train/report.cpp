// What loom-train reports: the run it starts, the summary at its end (throughput, where the
// step time goes, scaling efficiency against one process, the loss curve), and the parameters.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "trainer.hpp"

namespace loom_train {

void Trainer::describe() {
  if (rank_ != 0) return;
  std::size_t params = 0;
  for (Parameter* p : model_.parameters()) params += p->value.numel();
  std::printf(
      "loom-train: MLP %s (%.2f M parameters), %zu samples, %d rank(s) x batch %zu%s, %s, %s\n",
      fmt::format("{}", fmt::join(a_.layers, "-")).c_str(), static_cast<double>(params) / 1e6,
      data_.size(), world_, a_.batch_size,
      a_.accumulate > 1 ? fmt::format(" x {} accumulated", a_.accumulate).c_str() : "",
      fmt::format("{} {}", a_.optimizer, lr_.describe(world_)).c_str(),
      ddp_ ? fmt::format("DDP: {} bucket(s), comm hook {}", ddp_->buckets().size(),
                         to_string(a_.hook))
                 .c_str()
           : "no communication");
  std::fflush(stdout);
}

// Steps on rank 0 alone with no communication (the others wait), for scaling efficiency.
double Trainer::calibrate_samples_per_s() {
  if (!comm_ || !ddp_ || a_.calibrate_steps == 0) return 0;
  double rate = 0;
  if (rank_ == 0) {
    Sequential model = make_mlp(a_.layers, a_.seed);
    auto optimizer = make_optimizer(a_, model, lr_.at(world_));
    SoftmaxCrossEntropy criterion;
    const auto indices = sampler_.indices();
    Tensor x;
    std::vector<int> labels;
    const std::size_t n = std::min(a_.batch_size, indices.size());
    auto step = [&] {
      data_.batch(indices, 0, n, x, labels);
      criterion.forward(model.forward(x), labels);
      model.backward(criterion.backward());
      optimizer->step();
      optimizer->zero_grad();
    };
    step();  // warm-up
    const auto t0 = Clock::now();
    for (std::size_t i = 0; i < a_.calibrate_steps; ++i) step();
    rate = static_cast<double>(a_.calibrate_steps * n) / seconds(Clock::now() - t0);
  }
  comm_->broadcast(&rate, 1, loom::DataType::f64, 0);
  return rate;
}

void Trainer::save_params() {
  std::ofstream out(a_.save_params, std::ios::binary);
  for (Parameter* p : model_.parameters())
    out.write(reinterpret_cast<const char*>(p->value.data()),
              static_cast<std::streamsize>(p->value.numel() * sizeof(float)));
  if (!out) throw loom::Error(fmt::format("loom-train: cannot write {}", a_.save_params));
}

void Trainer::summary() {
  // Every rank's step times, averaged; throughput from the slowest rank.
  double mine[6] = {times_.forward,   times_.backward, times_.exposed,
                    times_.optimizer, times_.data,     times_.total};
  if (comm_) comm_->all_reduce(mine, 6, loom::DataType::f64, loom::ReduceOp::avg);
  double slowest = times_.total;
  if (comm_) comm_->all_reduce(&slowest, 1, loom::DataType::f64, loom::ReduceOp::max);
  const double single = calibrate_samples_per_s();
  if (rank_ != 0 || times_.steps == 0) return;
  const double steps = static_cast<double>(times_.steps);
  const double rate = static_cast<double>(times_.samples) / std::max(slowest, 1e-9);
  auto ms = [&](double s) { return 1e3 * s / steps; };
  std::printf("summary: %.0f samples/s (%d rank(s) x batch %zu, %zu steps)\n", rate, world_,
              a_.batch_size * a_.accumulate, times_.steps);
  if (shrinks_)
    std::printf("shrunk %d time(s) after lost ranks: the run ended with %d rank(s)\n", shrinks_,
                world_);
  std::printf(
      "step time (ms, mean over ranks): forward %.2f, backward %.2f, exposed communication "
      "%.2f, optimizer %.2f, data %.2f, total %.2f\n",
      ms(mine[0]), ms(mine[1]), ms(mine[2]), ms(mine[3]), ms(mine[4]), ms(mine[5]));
  if (single > 0)
    std::printf(
        "scaling efficiency: %.1f%% of %d x %.0f samples/s (one process, same batch, no "
        "communication)\n",
        100.0 * rate / (world_ * single), world_, single);
  if (!epoch_loss_.empty()) {
    std::string curve;
    for (double l : epoch_loss_) curve += fmt::format("{}{:.4f}", curve.empty() ? "" : " ", l);
    std::printf("loss per epoch: %s\n", curve.c_str());
  }
  std::fflush(stdout);
}

}  // namespace loom_train
