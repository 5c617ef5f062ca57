// loom-train: trains an MLP data-parallel on Loom (DistributedDataParallel), or alone with
// --no-ddp, and reports throughput, where the step time goes and the scaling efficiency.
//   loomrun --nproc-per-node 2 loom-train --layers 784,1024,1024,1024,10 --epochs 2
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "loom/ddp/checkpoint.hpp"
#include "loom/ddp/data.hpp"
#include "loom/ddp/ddp.hpp"
#include "loom/ddp/layers.hpp"
#include "loom/ddp/optim.hpp"
#include "loom/loom.hpp"
#include "loom/trace.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using namespace loom::ddp;

struct Args {
  std::vector<std::size_t> layers{784, 1024, 1024, 1024, 10};
  std::size_t batch_size = 64;
  std::size_t epochs = 3;
  std::size_t max_steps = 0;  // 0: whole epochs
  double lr = 0.05;
  double momentum = 0.9;
  double weight_decay = 0.0;
  std::string optimizer = "sgd";
  double bucket_cap_mb = 25.0;
  double first_bucket_mb = 1.0;
  CommHook hook = CommHook::none;
  bool shared_buckets = true;
  bool ddp = true;
  std::size_t accumulate = 1;
  std::string snapshot;
  std::size_t save_every = 0;
  std::string data = "synthetic";
  std::size_t samples = 16384;
  std::uint64_t seed = 1;
  std::size_t calibrate_steps = 10;
  std::size_t warmup_steps = 2;
  std::string save_params;
  std::size_t eval_every = 0;  // 0: no validation
  double eval_fraction = 0.1;
  bool shrink_on_failure = false;  // else a lost rank ends the run (for loomrun to restart)
  double shrink_timeout_s = 30;
};

[[noreturn]] void usage(int code) {
  std::fprintf(
      code ? stderr : stdout, "%s",
      "usage: loom-train [options]   (under loomrun for data-parallel training)\n"
      "  --layers W0,W1,...,Wn   MLP widths: inputs, hidden layers, classes\n"
      "                          (default 784,1024,1024,1024,10)\n"
      "  --batch-size N          samples per rank per step (default 64)\n"
      "  --epochs N              passes over the data (default 3)\n"
      "  --steps N               stop after N optimizer steps in all\n"
      "  --lr X                  learning rate (default 0.05 for sgd, use ~1e-3 for adamw)\n"
      "  --momentum X            SGD momentum (default 0.9)\n"
      "  --weight-decay X        (default 0)\n"
      "  --optimizer sgd|adamw   (default sgd)\n"
      "  --bucket-cap-mb X       gradient bucket size in MiB (default 25)\n"
      "  --first-bucket-mb X     size of the first bucket (default 1)\n"
      "  --comm-hook none|fp16|bf16  gradient compression on the wire (default none)\n"
      "  --private-buckets       buckets in memory of this process, not the communicator's\n"
      "                          shared windows (Communicator::alloc)\n"
      "  --accumulate K          gradient accumulation: K micro-batches per step, the\n"
      "                          first K-1 under no_sync (default 1)\n"
      "  --no-ddp                one process, no communication\n"
      "  --snapshot DIR          resume from the newest valid snapshot in DIR...\n"
      "  --save-every N          ...and write one every N steps (rank 0)\n"
      "  --data SOURCE           synthetic (default), csv:PATH, mnist:IMAGES,LABELS\n"
      "  --samples N             size of the synthetic set (default 16384)\n"
      "  --seed N                initialisation, data and shuffling (default 1)\n"
      "  --calibrate-steps N     steps rank 0 times alone, without communication, to\n"
      "                          report scaling efficiency (default 10, 0: skip)\n"
      "  --warmup-steps N        steps left out of the timing summary (default 2)\n"
      "  --save-params FILE      write the final parameters (raw float32) to FILE\n"
      "  --eval-every N          every N steps, loss and accuracy on a held-out split (the\n"
      "                          last --eval-fraction of the data, never trained on)\n"
      "  --eval-fraction X       the share held out with --eval-every (default 0.1)\n"
      "  --on-failure exit|shrink  when a rank is lost: exit (default: loomrun restarts the\n"
      "                          workers from the last snapshot), or shrink: the others go on\n"
      "                          from the current step without it (the data is shared out again,\n"
      "                          the effective batch shrinks). Default: $LOOM_ON_FAILURE, which\n"
      "                          loomrun --on-failure sets, else exit\n"
      "  --shrink-timeout S      how long survivors wait for each other to shrink (default 30)\n"
      "Loss and accuracy are averaged over every rank's batches.\n");
  std::exit(code);
}

std::vector<std::size_t> parse_widths(const std::string& text) {
  std::vector<std::size_t> widths;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = text.find(',', start);
    const std::string part =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    char* end = nullptr;
    const unsigned long long v = std::strtoull(part.c_str(), &end, 10);
    if (part.empty() || *end != '\0' || v == 0) {
      std::fprintf(stderr, "loom-train: --layers: '%s' is not a list of positive widths\n",
                   text.c_str());
      usage(2);
    }
    widths.push_back(v);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (widths.size() < 2) {
    std::fprintf(stderr, "loom-train: --layers needs at least inputs and classes\n");
    usage(2);
  }
  return widths;
}

bool on_failure(const std::string& v, const char* source) {
  if (v == "exit" || v == "restart") return false;
  if (v == "shrink") return true;
  std::fprintf(stderr, "loom-train: %s: '%s' is not exit or shrink\n", source, v.c_str());
  usage(2);
}

Args parse(int argc, char** argv) {
  Args a;
  if (const char* v = std::getenv("LOOM_ON_FAILURE"); v && *v)
    a.shrink_on_failure = on_failure(v, "LOOM_ON_FAILURE");
  auto value = [&](int& i) -> std::string {
    if (i + 1 >= argc) {
      std::fprintf(stderr, "loom-train: %s needs a value\n", argv[i]);
      usage(2);
    }
    return argv[++i];
  };
  auto number = [&](int& i) {
    const std::string flag = argv[i], v = value(i);
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || !std::isfinite(x) || x < 0) {
      std::fprintf(stderr, "loom-train: %s: '%s' is not a non-negative number\n", flag.c_str(),
                   v.c_str());
      usage(2);
    }
    return x;
  };
  auto count = [&](int& i) {
    const double x = number(i);
    if (x != std::floor(x)) {
      std::fprintf(stderr, "loom-train: %s needs a whole number\n", argv[i - 1]);
      usage(2);
    }
    return static_cast<std::size_t>(x);
  };
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (f == "-h" || f == "--help")
      usage(0);
    else if (f == "--layers")
      a.layers = parse_widths(value(i));
    else if (f == "--batch-size")
      a.batch_size = count(i);
    else if (f == "--epochs")
      a.epochs = count(i);
    else if (f == "--steps")
      a.max_steps = count(i);
    else if (f == "--lr")
      a.lr = number(i);
    else if (f == "--momentum")
      a.momentum = number(i);
    else if (f == "--weight-decay")
      a.weight_decay = number(i);
    else if (f == "--optimizer")
      a.optimizer = value(i);
    else if (f == "--bucket-cap-mb")
      a.bucket_cap_mb = number(i);
    else if (f == "--first-bucket-mb")
      a.first_bucket_mb = number(i);
    else if (f == "--comm-hook") {
      const std::string h = value(i);
      if (h == "none")
        a.hook = CommHook::none;
      else if (h == "fp16")
        a.hook = CommHook::fp16;
      else if (h == "bf16")
        a.hook = CommHook::bf16;
      else {
        std::fprintf(stderr, "loom-train: --comm-hook: '%s' is not none, fp16 or bf16\n",
                     h.c_str());
        usage(2);
      }
    } else if (f == "--private-buckets")
      a.shared_buckets = false;
    else if (f == "--accumulate")
      a.accumulate = std::max<std::size_t>(1, count(i));
    else if (f == "--no-ddp")
      a.ddp = false;
    else if (f == "--snapshot")
      a.snapshot = value(i);
    else if (f == "--save-every")
      a.save_every = count(i);
    else if (f == "--data")
      a.data = value(i);
    else if (f == "--samples")
      a.samples = count(i);
    else if (f == "--seed")
      a.seed = count(i);
    else if (f == "--calibrate-steps")
      a.calibrate_steps = count(i);
    else if (f == "--warmup-steps")
      a.warmup_steps = count(i);
    else if (f == "--save-params")
      a.save_params = value(i);
    else if (f == "--eval-every")
      a.eval_every = count(i);
    else if (f == "--eval-fraction")
      a.eval_fraction = number(i);
    else if (f == "--on-failure")
      a.shrink_on_failure = on_failure(value(i), "--on-failure");
    else if (f == "--shrink-timeout")
      a.shrink_timeout_s = number(i);
    else {
      std::fprintf(stderr, "loom-train: unknown option %s\n", f.c_str());
      usage(2);
    }
  }
  if (a.optimizer != "sgd" && a.optimizer != "adamw") {
    std::fprintf(stderr, "loom-train: --optimizer: '%s' is not sgd or adamw\n",
                 a.optimizer.c_str());
    usage(2);
  }
  if (a.eval_fraction <= 0 || a.eval_fraction >= 1) {
    std::fprintf(stderr, "loom-train: --eval-fraction must be above 0 and below 1\n");
    usage(2);
  }
  if (a.batch_size == 0) {
    std::fprintf(stderr, "loom-train: --batch-size must be at least 1\n");
    usage(2);
  }
  return a;
}

Dataset load_data(const Args& a) {
  if (a.data == "synthetic")
    return make_teacher_dataset(a.samples, a.layers.front(), a.layers.back(), a.seed);
  if (a.data.rfind("csv:", 0) == 0) return load_csv(a.data.substr(4));
  if (a.data.rfind("mnist:", 0) == 0) {
    const std::string files = a.data.substr(6);
    const auto comma = files.find(',');
    if (comma == std::string::npos) {
      std::fprintf(stderr, "loom-train: --data mnist:IMAGES,LABELS needs both files\n");
      usage(2);
    }
    return load_mnist(files.substr(0, comma), files.substr(comma + 1));
  }
  std::fprintf(stderr,
               "loom-train: --data: '%s' is not synthetic, csv:PATH or mnist:IMAGES,LABELS\n",
               a.data.c_str());
  usage(2);
}

std::unique_ptr<Optimizer> make_optimizer(const Args& a, Module& model) {
  if (a.optimizer == "adamw")
    return std::make_unique<AdamW>(model.parameters(),
                                   AdamWOptions{a.lr, 0.9, 0.999, 1e-8, a.weight_decay});
  return std::make_unique<Sgd>(model.parameters(),
                               SgdOptions{a.lr, a.momentum, a.weight_decay, false});
}

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

std::string clock_text(double s) {
  const long t = std::lround(std::max(0.0, s));
  return fmt::format("{}:{:02}:{:02}", t / 3600, (t / 60) % 60, t % 60);
}

// Time spent in each part of a step, summed over the steps timed.
struct StepTimes {
  double forward = 0, backward = 0, exposed = 0, optimizer = 0, data = 0, total = 0;
  std::size_t steps = 0;
  std::size_t samples = 0;  // over all ranks (their number may fall with --on-failure shrink)
};

class Trainer {
 public:
  Trainer(const Args& args, loom::Communicator* comm)
      : a_(args),
        comm_(comm),
        rank_(comm ? comm->rank() : 0),
        world_(comm ? comm->size() : 1),
        data_(load_data(args)),
        held_out_(args.eval_every ? std::max<std::size_t>(1, static_cast<std::size_t>(
                                                                 static_cast<double>(data_.size()) *
                                                                 args.eval_fraction))
                                  : 0),
        model_(make_mlp(args.layers, args.seed)),
        optimizer_(make_optimizer(args, model_)),
        sampler_(data_.size() - std::min(held_out_, data_.size()), world_, rank_, true, args.seed,
                 false) {
    if (held_out_ >= data_.size())
      throw loom::InvalidArgument(fmt::format(
          "loom-train: --eval-every holds out {} of {} samples, leaving none to train on",
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

  int run() {
    if (!a_.snapshot.empty()) {
      auto resumed = comm_ ? resume_from_newest(*comm_, a_.snapshot, model_, *optimizer_)
                           : resume_from_newest(a_.snapshot, model_, *optimizer_);
      if (resumed) state_ = *resumed;
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
  bool run_epoch() {
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
      const std::size_t trained = (std::min(indices.size(), last * micro) - first * micro) *
                                  static_cast<std::size_t>(world_);
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
                  a_.epochs, static_cast<unsigned long long>(state_.global_step),
                  epoch_loss_.back(), totals[1] / totals[2], rate, clock_text(eta).c_str());
    std::fflush(stdout);
    return done;
  }

  // --on-failure shrink: the survivors make a communicator of themselves, agree on where they
  // are (one may have finished the step the lost rank broke off, another not), and go on from
  // there with the rest of the epoch shared out among them.
  void go_on_without_the_lost(const loom::Error& failure) {
    if (!a_.shrink_on_failure || !comm_) throw;  // the failure being handled, as it was
    const int before = world_, rank_before = rank_;
    std::fprintf(stderr, "loom-train: rank %d: %s; shrinking (--on-failure shrink)\n", rank_,
                 failure.what());
    loom::Communicator survivors = comm_->shrink(std::chrono::milliseconds(
        static_cast<long long>(a_.shrink_timeout_s * 1000)));  // the store must answer: else
                                                               // this throws and the run ends
    comm_->abort();
    // The failed one, if it was already a shrink's, lives until the DDP has left it: the
    // buckets lie in its memory (DdpOptions::shared_buckets) until continue_on.
    if (owned_comm_) retired_comm_.emplace(std::move(*owned_comm_));
    owned_comm_.emplace(std::move(survivors));
    comm_ = &*owned_comm_;
    rank_ = comm_->rank(), world_ = comm_->size();
    optimizer_->zero_grad();
    state_ = adopt_rank0_state(*comm_, model_, *optimizer_, state_);
    if (ddp_) ddp_->continue_on(*comm_);
    retired_comm_.reset();
    ++shrinks_;
    if (rank_ == 0)
      std::printf(
          "loom-train: going on with %d of %d ranks (this was rank %d) from step %llu, epoch "
          "%llu with %llu of its samples done: effective batch %zu (was %zu)\n",
          world_, before, rank_before, static_cast<unsigned long long>(state_.global_step),
          static_cast<unsigned long long>(state_.epoch + 1),
          static_cast<unsigned long long>(state_.samples_in_epoch),
          a_.batch_size * a_.accumulate * static_cast<std::size_t>(world_),
          a_.batch_size * a_.accumulate * static_cast<std::size_t>(before));
    std::fflush(stdout);
  }

  void describe() {
    if (rank_ != 0) return;
    std::size_t params = 0;
    for (Parameter* p : model_.parameters()) params += p->value.numel();
    std::printf(
        "loom-train: MLP %s (%.2f M parameters), %zu samples, %d rank(s) x batch %zu%s, %s, %s\n",
        fmt::format("{}", fmt::join(a_.layers, "-")).c_str(), static_cast<double>(params) / 1e6,
        data_.size(), world_, a_.batch_size,
        a_.accumulate > 1 ? fmt::format(" x {} accumulated", a_.accumulate).c_str() : "",
        a_.optimizer.c_str(),
        ddp_ ? fmt::format("DDP: {} bucket(s), comm hook {}", ddp_->buckets().size(),
                           to_string(a_.hook))
                   .c_str()
             : "no communication");
    std::fflush(stdout);
  }

  // Loss and accuracy over the held-out samples (the last held_out_ of the data), each rank
  // taking every world-th one; rank 0 prints them.
  void evaluate() {
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
      totals[0] += static_cast<double>(criterion_.forward(model_.forward(x), labels)) *
                   static_cast<double>(n);
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
  std::pair<double, double> train_step(const std::vector<std::size_t>& indices, std::size_t first,
                                       std::size_t last, std::size_t micro) {
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

  // Steps on rank 0 alone with no communication (the others wait), for scaling efficiency.
  double calibrate_samples_per_s() {
    if (!comm_ || !ddp_ || a_.calibrate_steps == 0) return 0;
    double rate = 0;
    if (rank_ == 0) {
      Sequential model = make_mlp(a_.layers, a_.seed);
      auto optimizer = make_optimizer(a_, model);
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

  void save_params() {
    std::ofstream out(a_.save_params, std::ios::binary);
    for (Parameter* p : model_.parameters())
      out.write(reinterpret_cast<const char*>(p->value.data()),
                static_cast<std::streamsize>(p->value.numel() * sizeof(float)));
    if (!out) throw loom::Error(fmt::format("loom-train: cannot write {}", a_.save_params));
  }

  void summary() {
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

  Args a_;
  loom::Communicator* comm_;
  std::optional<loom::Communicator> owned_comm_;  // the survivors', after a shrink
  // A failed one of a shrink's while the DDP leaves it (declared before ddp_: it goes after it,
  // should that fail).
  std::optional<loom::Communicator> retired_comm_;
  int rank_, world_;
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

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  try {
    if (!args.ddp) return Trainer(args, nullptr).run();
    loom::Communicator comm = loom::init();
    return Trainer(args, &comm).run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom-train: %s\n", e.what());
    return 1;
  }
}
