#include "trainer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "loom/ddp/checkpoint.hpp"

namespace loom_train {

namespace {

std::string clock_text(double s) {
  const long t = std::lround(std::max(0.0, s));
  return fmt::format("{}:{:02}:{:02}", t / 3600, (t / 60) % 60, t % 60);
}

Dataset load_data(const Args& a) {
  if (a.data == "synthetic")
    return make_teacher_dataset(a.samples, a.layers.front(), a.layers.back(), a.seed);
  if (a.data.rfind("csv:", 0) == 0) return load_csv(a.data.substr(4));
  // mnist:IMAGES,LABELS (args.cpp checked the form)
  const std::string files = a.data.substr(6);
  const auto comma = files.find(',');
  return load_mnist(files.substr(0, comma), files.substr(comma + 1));
}

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(const Args& a, Module& model, double lr) {
  if (a.optimizer == "adamw")
    return std::make_unique<AdamW>(model.parameters(),
                                   AdamWOptions{lr, 0.9, 0.999, 1e-8, a.weight_decay});
  return std::make_unique<Sgd>(model.parameters(),
                               SgdOptions{lr, a.momentum, a.weight_decay, false});
}

Trainer::Trainer(const Args& args, loom::Communicator* comm)
    : a_(args),
      comm_(comm),
      rank_(comm ? comm->rank() : 0),
      world_(comm ? comm->size() : 1),
      lr_(args, world_),
      data_(load_data(args)),
      held_out_(args.eval_every ? std::max<std::size_t>(1, static_cast<std::size_t>(
                                                               static_cast<double>(data_.size()) *
                                                               args.eval_fraction))
                                : 0),
      model_(make_mlp(args.layers, args.seed)),
      optimizer_(make_optimizer(args, model_, lr_.at(world_))),
      sampler_(data_.size() - std::min(held_out_, data_.size()), world_, rank_, true, args.seed,
               false) {
  if (held_out_ >= data_.size())
    throw loom::InvalidArgument(
        fmt::format("loom-train: --eval-every holds out {} of {} samples, leaving none to train on",
                    held_out_, data_.size()));
  if (data_.features() != a_.layers.front() || data_.classes() > a_.layers.back())
    throw loom::InvalidArgument(fmt::format(
        "loom-train: the data has {} features and {} classes; --layers starts with {} and ends "
        "with {}",
        data_.features(), data_.classes(), a_.layers.front(), a_.layers.back()));
  if (comm_ && a_.ddp)
    ddp_ = std::make_unique<DistributedDataParallel>(
        model_, *comm_,
        DdpOptions{a_.bucket_cap_mb, a_.first_bucket_mb, a_.hook, a_.shared_buckets});
}

int Trainer::run() {
  if (!a_.snapshot.empty()) {
    // A job that saves claims the run's snapshots first: from then on no job that claimed before
    // (the other side of a split, one restarted while this lives on) writes there.
    std::uint64_t fence = 0;
    if (a_.save_every)
      fence = comm_ ? claim_snapshots(*comm_, a_.snapshot) : claim_snapshots(a_.snapshot);
    auto resumed = comm_ ? resume_from_newest(*comm_, a_.snapshot, model_, *optimizer_)
                         : resume_from_newest(a_.snapshot, model_, *optimizer_);
    if (resumed) state_ = *resumed;
    state_.fence = fence;
    optimizer_->set_lr(lr_.at(world_));  // for this run's batch, not the snapshot's
    // A version 2 snapshot counts the epoch's steps only, at the size it was taken at.
    if (resumed && state_.samples_in_epoch == 0 && state_.step_in_epoch > 0)
      state_.samples_in_epoch =
          state_.step_in_epoch * a_.batch_size * a_.accumulate * static_cast<std::size_t>(world_);
    if (resumed && rank_ == 0)
      std::printf("resumed at epoch %llu, step %llu\n",
                  static_cast<unsigned long long>(state_.epoch + 1),
                  static_cast<unsigned long long>(state_.global_step));
  }
  state_.seed = a_.seed;
  describe();
  start_ = Clock::now();
  bool done = reached_the_end();
  while (!done && state_.epoch < a_.epochs) {
    try {
      done = run_epoch();
    } catch (const loom::PeerError& e) {
      go_on_without_the_lost(e);
    } catch (const loom::TimeoutError& e) {  // a frozen rank: shrink leaves it out
      go_on_without_the_lost(e);
    }
  }
  if (!a_.snapshot.empty() && a_.save_every && rank_ == 0 && steps_done_here_ > 0)
    save_snapshot(a_.snapshot, model_, *optimizer_, state_);
  if (!a_.save_params.empty() && rank_ == 0) save_params();
  summary();
  return 0;
}

// The rest of the epoch in progress (from state_); true once --steps is reached.
bool Trainer::run_epoch() {
  const std::size_t micro = a_.batch_size;
  sampler_.set_epoch(state_.epoch);
  sampler_.reshard(world_, rank_, state_.samples_in_epoch);
  const auto indices = sampler_.indices();
  const std::size_t batches = (indices.size() + micro - 1) / micro;
  const std::size_t steps = steps_over(indices.size());
  double loss_sum = 0, acc_sum = 0;
  std::size_t loss_count = 0;
  bool done = false;
  for (std::size_t step = 0; step < steps; ++step) {
    const std::size_t first = step * a_.accumulate;
    const std::size_t last = std::min(batches, first + a_.accumulate);
    auto [loss, acc] = train_step(indices, first, last, micro);
    loss_sum += loss, acc_sum += acc, ++loss_count;
    ++state_.global_step, ++steps_done_here_, ++state_.step_in_epoch;
    // Every rank trained on as many places of the order as this one.
    const std::size_t trained =
        (std::min(indices.size(), last * micro) - first * micro) * static_cast<std::size_t>(world_);
    state_.samples_in_epoch += trained;
    samples_done_here_ += trained;
    if (steps_taken_ > a_.warmup_steps) times_.samples += trained;
    if (step + 1 == steps) ++state_.epoch, state_.step_in_epoch = 0, state_.samples_in_epoch = 0;
    if (a_.save_every && !a_.snapshot.empty() && state_.global_step % a_.save_every == 0 &&
        rank_ == 0)
      save_snapshot(a_.snapshot, model_, *optimizer_, state_);
    if (a_.eval_every && state_.global_step % a_.eval_every == 0) evaluate();
    if (reached_the_end()) {
      done = true;
      break;
    }
  }
  if (loss_count == 0) return done;
  // Every rank's batches count: the sums and counts of all ranks, not rank 0's alone.
  double totals[3] = {loss_sum, acc_sum, static_cast<double>(loss_count)};
  if (comm_) comm_->all_reduce(totals, 3, loom::DataType::f64, loom::ReduceOp::sum);
  epoch_loss_.push_back(totals[0] / totals[2]);
  const auto warning =
      loss_watch_.add(epoch_loss_.back(), optimizer_->lr(), global_batch(a_, world_));
  if (warning && rank_ == 0) std::fprintf(stderr, "loom-train: %s\n", warning->c_str());
  const double elapsed = seconds(Clock::now() - start_);
  const double rate = static_cast<double>(samples_done_here_) / std::max(elapsed, 1e-9);
  const std::size_t whole_epoch = steps_per_epoch();
  std::size_t steps_left =
      (a_.epochs - std::min<std::size_t>(a_.epochs, state_.epoch)) * whole_epoch -
      std::min<std::size_t>(state_.step_in_epoch, whole_epoch);
  if (a_.max_steps)
    steps_left = std::min<std::size_t>(
        steps_left, a_.max_steps - std::min<std::size_t>(a_.max_steps, state_.global_step));
  const double eta = static_cast<double>(steps_left) * elapsed /
                     std::max(static_cast<double>(steps_done_here_), 1.0);
  if (rank_ == 0)
    std::printf("epoch %zu/%zu  step %llu  loss %.4f  acc %.3f  %.0f samples/s  ETA %s\n",
                static_cast<std::size_t>(state_.step_in_epoch ? state_.epoch + 1 : state_.epoch),
                a_.epochs, static_cast<unsigned long long>(state_.global_step), epoch_loss_.back(),
                totals[1] / totals[2], rate, clock_text(eta).c_str());
  std::fflush(stdout);
  return done;
}

// --on-failure shrink: the survivors make a communicator of themselves, agree on where they
// are (one may have finished the step the lost rank broke off, another not), and go on from
// there with the rest of the epoch shared out among them. A rank lost while they do (a second
// failure inside the recovery) makes them shrink again from the newest communicator, up to
// once per rank there was.
void Trainer::go_on_without_the_lost(const loom::Error& failure) {
  if (!a_.shrink_on_failure || !comm_) throw;  // the failure being handled, as it was
  const int before = world_, rank_before = rank_;
  const double lr_before = lr_.at(before);
  std::fprintf(stderr, "loom-train: rank %d: %s; shrinking (--on-failure shrink)\n", rank_,
               failure.what());
  for (int tries = 1;; ++tries) {
    bool shrunk = false;
    try {
      recover_once(shrunk);
      break;
    } catch (const loom::Error& again) {
      // Before the shrink stood: the store is gone, or this rank was left out or is below the
      // job's minimum; none is mended by another try. After it: a member was lost meanwhile.
      const bool lost_meanwhile =
          again.kind() == loom::ErrorKind::peer || again.kind() == loom::ErrorKind::timeout;
      if (!shrunk || !lost_meanwhile || tries >= before) throw;
      std::fprintf(stderr, "loom-train: rank %d: %s; shrinking again (--on-failure shrink)\n",
                   rank_, again.what());
    }
  }
  ++shrinks_;
  if (rank_ == 0)
    std::printf(
        "loom-train: going on with %d of %d ranks (this was rank %d) from step %llu, epoch "
        "%llu with %llu of its samples done: effective batch %zu (was %zu), lr %.6g (was "
        "%.6g)\n",
        world_, before, rank_before, static_cast<unsigned long long>(state_.global_step),
        static_cast<unsigned long long>(state_.epoch + 1),
        static_cast<unsigned long long>(state_.samples_in_epoch), global_batch(a_, world_),
        global_batch(a_, before), optimizer_->lr(), lr_before);
  std::fflush(stdout);
}

// One shrink from the current communicator, then the survivors agree and the DDP moves over;
// `shrunk` is set once the new communicator stands.
void Trainer::recover_once(bool& shrunk) {
  loom::Communicator survivors = comm_->shrink(std::chrono::milliseconds(
      static_cast<long long>(a_.shrink_timeout_s * 1000)));  // the store must answer
  shrunk = true;
  comm_->abort();
  // The failed one goes now if it was a shrink's: the DDP's buckets own their memory.
  owned_comm_ = std::move(survivors);
  comm_ = &*owned_comm_;
  rank_ = comm_->rank(), world_ = comm_->size();
  optimizer_->zero_grad();
  state_ = adopt_rank0_state(*comm_, model_, *optimizer_, state_);
  optimizer_->set_lr(lr_.at(world_));  // --lr-scale-on-shrink: with the global batch
  // The survivors are a job of their own: should the lost ranks go on as another (a split), the
  // one that claimed last writes the snapshots and the other stops at its next save.
  if (!a_.snapshot.empty() && a_.save_every) state_.fence = claim_snapshots(*comm_, a_.snapshot);
  if (ddp_) ddp_->continue_on(*comm_);
}

// Loss and accuracy over the held-out samples (the last held_out_ of the data), each rank
// taking every world-th one; rank 0 prints them.
void Trainer::evaluate() {
  const std::size_t first = data_.size() - held_out_;
  std::vector<std::size_t> mine;
  for (std::size_t i = first + static_cast<std::size_t>(rank_); i < data_.size();
       i += static_cast<std::size_t>(world_))
    mine.push_back(i);
  double totals[3] = {0, 0, 0};  // loss x samples, correct, samples
  Tensor x;
  std::vector<int> labels;
  for (std::size_t begin = 0; begin < mine.size(); begin += a_.batch_size) {
    const std::size_t n = std::min(a_.batch_size, mine.size() - begin);
    data_.batch(mine, begin, n, x, labels);
    totals[0] +=
        static_cast<double>(criterion_.forward(model_.forward(x), labels)) * static_cast<double>(n);
    totals[1] += criterion_.accuracy() * static_cast<double>(n);
    totals[2] += static_cast<double>(n);
  }
  if (comm_) comm_->all_reduce(totals, 3, loom::DataType::f64, loom::ReduceOp::sum);
  if (rank_ == 0)
    std::printf("eval  step %llu  loss %.4f  acc %.3f  (%zu held-out samples)\n",
                static_cast<unsigned long long>(state_.global_step), totals[0] / totals[2],
                totals[1] / totals[2], held_out_);
  std::fflush(stdout);
}

// One optimizer step over micro-batches [first, last); returns mean loss and accuracy.
std::pair<double, double> Trainer::train_step(const std::vector<std::size_t>& indices,
                                              std::size_t first, std::size_t last,
                                              std::size_t micro) {
  const auto t0 = Clock::now();
  double loss = 0, acc = 0;
  const float scale = 1.0f / static_cast<float>(last - first);
  for (std::size_t b = first; b < last; ++b) {
    const auto td = Clock::now();
    const std::size_t begin = b * micro, count = std::min(micro, indices.size() - begin);
    data_.batch(indices, begin, count, x_, labels_);
    times_.data += seconds(Clock::now() - td);
    const bool sync = b + 1 == last;
    std::optional<DistributedDataParallel::NoSync> no_sync;
    if (ddp_ && !sync) no_sync.emplace(*ddp_);
    const auto tf = Clock::now();
    Tensor logits = model_.forward(x_);
    loss += criterion_.forward(logits, labels_);
    acc += criterion_.accuracy();
    const auto tb = Clock::now();
    times_.forward += seconds(tb - tf);
    Tensor grad = criterion_.backward(scale);
    if (ddp_) {
      ddp_->backward(grad);
      const auto te = Clock::now();
      times_.backward += seconds(te - tb);
      ddp_->finalize();  // under no_sync this only ends the pass
      times_.exposed += seconds(Clock::now() - te);
    } else {
      model_.backward(grad);
      times_.backward += seconds(Clock::now() - tb);
    }
  }
  const auto to = Clock::now();
  optimizer_->step();
  optimizer_->zero_grad();
  const auto t1 = Clock::now();
  times_.optimizer += seconds(t1 - to);
  times_.total += seconds(t1 - t0);
  ++times_.steps;
  if (++steps_taken_ <= a_.warmup_steps) times_ = StepTimes{};  // warm-up: not timed
  return {loss * scale, acc * scale};
}

}  // namespace loom_train
