#include "algorithms/dispatch.hpp"

#include <sched.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "algorithms/algorithm_costs.hpp"
#include "algorithms/algorithm_table.hpp"
#include "algorithms/engine.hpp"
#include "algorithms/selection.hpp"
#include "base/logging.hpp"
#include "loom/trace.hpp"

namespace loom::algorithms {

namespace {

// Sizes by bit width: 0 for 0 bytes, k for 2^(k-1) up to 2^k - 1 bytes.
constexpr std::size_t kSizeClasses = 65;

std::size_t size_class(std::size_t bytes) {
  return bytes == 0 ? 0 : static_cast<std::size_t>(64 - __builtin_clzll(bytes));
}
std::size_t lowest_bytes(std::size_t size_class) {
  return size_class == 0 ? 0 : std::size_t{1} << (size_class - 1);
}
std::size_t highest_bytes(std::size_t size_class) {
  return size_class == 0 ? 0 : 2 * lowest_bytes(size_class) - 1;
}

// Whether this is the process's first choice of `algorithm` for a size of this class: each is
// logged once, so INFO shows what ran without flooding. A flag per row and size class rather
// than a locked set, since a loop of calls of changing sizes chooses on every call.
bool first_of_class(const Algorithm& algorithm, std::size_t bytes) {
  static const std::unique_ptr<std::atomic<bool>[]> seen(
      new std::atomic<bool>[algorithm_table().size() * kSizeClasses]());
  std::atomic<bool>& flag = seen[algorithm.index() * kSizeClasses + size_class(bytes)];
  return !flag.load(std::memory_order_relaxed) && !flag.exchange(true, std::memory_order_relaxed);
}

// How the choice moves its bytes: a slice the model chose, or whole slots where the row pipelines
// through them; nothing for the rows that size their own (no_slice: hierarchical sets each
// phase's slice itself, the direct rows and the single copy use no slots for the bulk).
std::string slicing(const Algorithm& algorithm, std::size_t slice) {
  if (slice != 0) return fmt::format(" in slices of {} KiB", slice >> 10);
  return algorithm.slice == no_slice ? "" : " in whole slots";
}

// The choice and what every other row of the operation would have cost.
void log_choice(const Selector& selector, const Collective& call, const Selector::Choice& c,
                std::size_t bytes, bool windows) {
  if (!first_of_class(*c.algorithm, bytes)) return;
  std::string table;
  const auto& in = selector.inputs();
  for (const Algorithm& a : algorithm_table()) {
    if (a.collective != call.kind) continue;
    const char* unfit = selector.unfit(a, bytes, call.device >= 0, windows);
    const double cost = a.cost(in, bytes, call.device >= 0);
    table += fmt::format("{}{} ", table.empty() ? "" : ", ", a.name);
    table += cost >= kNever ? "n/a" : fmt::format("{:.1f} us", cost);
    if (unfit) table += fmt::format(" ({})", unfit);
  }
  base::log().info("{}: {}{}{}{} for {} B over {}; model: {}", to_string(call.kind),
                   c.algorithm->name,
                   c.forced  ? " (LOOM_ALGO)"
                   : c.tuned ? " (tuning table)"
                             : "",
                   slicing(*c.algorithm, c.slice),
                   c.round_slices != 0 ? fmt::format(", {} a round", c.round_slices) : "", bytes,
                   transport::to_string(in.bottleneck_kind()), table);
}

}  // namespace

void Dispatcher::run(Engine& engine, const Collective& call) {
  const std::size_t bytes = call.bytes();
  const bool device = call.device >= 0;
  // Whether the peers' memory is mapped here: the direct rows' condition (device buffers through
  // CUDA IPC, host buffers in the shared windows).
  const bool windows = (device ? engine.peer_memory() : engine.host_windows()) != nullptr;
  // A reduction's plan is of its dtype and op too (its trial is); another kind's of its bytes.
  const DataType dtype = reduces(call.kind) ? call.dtype : DataType::u8;
  const ReduceOp op = reduces(call.kind) ? call.op : ReduceOp::sum;
  if (plan_.kind != call.kind || plan_.bytes != bytes || plan_.dtype != dtype || plan_.op != op ||
      plan_.device != device || plan_.windows != windows || plan_.algorithm == nullptr) {
    const Selector::Choice choice = engine.selector().choose(call.kind, bytes, device, windows);
    log_choice(engine.selector(), call, choice, bytes, windows);
    plan_ = Plan{call.kind,
                 bytes,
                 dtype,
                 op,
                 device,
                 windows,
                 choice.algorithm,
                 choice.slice,
                 choice.round_slices,
                 choice.predicted_us,
                 choice.reads,
                 choice.rival};
  }
  if (plan_.rival != nullptr) {
    const Trials::Trial::Warm warm =
        Trials::warm_calls(call.kind, bytes, engine.slots(), engine.selector().inputs().slot_bytes);
    if (Trials::Trial* trial = trials_.of({call.kind, bytes, call.dtype, call.op}, plan_.algorithm,
                                          plan_.rival, warm)) {
      if (trial->winner() == nullptr) {
        run_trial(engine, call, *trial);
        return;
      }
      plan_for(engine, *trial->winner());
    }
    plan_.rival = nullptr;  // judged, or past the sizes a communicator tries: the plan stands
  }
  run_timed(engine, call, false);
}

void Dispatcher::plan_for(const Engine& engine, const Algorithm& algorithm) {
  const Selector::Choice c = engine.selector().choice_of(algorithm, plan_.bytes, plan_.device);
  plan_.algorithm = c.algorithm;
  plan_.slice = c.slice;
  plan_.round_slices = c.round_slices;
  plan_.predicted_us = c.predicted_us;
  plan_.reads = c.reads;
}

void Dispatcher::run_trial(Engine& engine, const Collective& call, Trials::Trial& trial) {
  plan_for(engine, *trial.next());
  if (!trial.record(run_timed(engine, call, true))) return;
  const Trials::Judgement j = trial.decide(Trials::swap(engine, trial.times()));
  base::log().info(
      "{} of {} B: {} against {} on its first {} calls, each the slowest rank's time, medians "
      "of the last {} of each: {:.1f} us against {:.1f} us; {} from now on",
      to_string(call.kind), plan_.bytes, trial.choice()->name, trial.rival()->name, trial.calls(),
      Trials::kCounted, j.choice_us, j.rival_us, trial.winner()->name);
  if (trace::enabled()) {  // the verdict, as a span of no length after the trial's last call
    const Algorithm* loser = trial.winner() == trial.choice() ? trial.rival() : trial.choice();
    trace::Scope verdict(fmt::format("{} kept over {} for {} of {} B", trial.winner()->name,
                                     loser->name, to_string(call.kind), plan_.bytes),
                         "trial");
  }
  plan_for(engine, *trial.winner());
  plan_.rival = nullptr;
}

double Dispatcher::run_timed(Engine& engine, const Collective& call, bool timed) {
  engine.set_slicing(plan_.slice, plan_.round_slices);
  engine.set_reads(plan_.reads);
  const bool debug = base::log().should_log(spdlog::level::debug);
  if (!debug && !timed) {
    run_plan(engine, call);
    return 0;
  }
  engine.count_waits(debug);
  const int cpu = ::sched_getcpu();
  const auto started = std::chrono::steady_clock::now();
  {
    // A call that raises stops the count too: no clock is read in the uncounted calls after it.
    struct StopCounting {
      Engine& engine;
      ~StopCounting() { engine.count_waits(false); }
    } stop{engine};
    run_plan(engine, call);
  }
  const double took =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - started).count();
  if (debug) record_time(engine, call, took, ::sched_getcpu() != cpu);
  return took;
}

void Dispatcher::run_plan(Engine& engine, const Collective& call) {
  if (!trace::enabled()) return plan_.algorithm->run(engine, call);
  // Within the call's span (core/call_runner.cpp): the algorithm that ran it.
  trace::Scope span(std::string(plan_.algorithm->name), "algorithm");
  plan_.algorithm->run(engine, call);
}

void Dispatcher::record_time(const Engine& engine, const Collective& call, double took_us,
                             bool moved) {
  const std::size_t cls = size_class(plan_.bytes);
  ClassTimes& t = class_times_[plan_.algorithm->index() * kSizeClasses + cls];
  t.calls += 1;
  t.predicted_us += plan_.predicted_us;
  t.measured_us += took_us;
  t.fastest_us = t.calls == 1 ? took_us : std::min(t.fastest_us, took_us);
  const Engine::WaitStats& w = engine.wait_stats();
  t.waited_us += w.us, t.waits += w.waits, t.sleeps += w.sleeps, t.moved += moved ? 1 : 0;
  for (int k = 0; k < Engine::kWorkKinds; ++k) {
    t.work.us[k] += engine.work_stats().us[k];
    t.work.bytes[k] += engine.work_stats().bytes[k];
  }
  std::uint64_t power = 1;
  while (power * 10 <= t.calls) power *= 10;
  if (t.calls != power) return;
  const double calls = static_cast<double>(t.calls);
  // The work by where its bytes come from: time a call, and the rate (bytes moved a microsecond
  // is MB/s; divided by 1000, GB/s).
  std::string work;
  static constexpr const char* kWorkNames[Engine::kWorkKinds] = {"into slots", "out of slots",
                                                                 "peers' memory", "own memory"};
  for (int k = 0; k < Engine::kWorkKinds; ++k)
    if (t.work.bytes[k] > 0)
      work += fmt::format("{}{} {:.1f} us ({:.2f} GB/s)", work.empty() ? "" : ", ", kWorkNames[k],
                          t.work.us[k] / calls,
                          t.work.us[k] > 0 ? t.work.bytes[k] / t.work.us[k] / 1e3 : 0.0);
  // Of the time measured, how much this rank waited for its peers (a slow placement of the cores
  // shows there: the peer's slots arrive later) and how often it slept (each a wake-up).
  base::log().debug(
      "{} {} of {}-{} B: predicted {:.1f} us, measured {:.1f} us (fastest {:.1f}) on this rank, "
      "mean of {} call(s), of which waiting for peers {:.1f} us ({:.1f} waits, {:.1f} sleeps a "
      "call; {} call(s) ended on another CPU); copies and reductions: {}; cost model {}",
      to_string(call.kind), plan_.algorithm->name, lowest_bytes(cls), highest_bytes(cls),
      t.predicted_us / calls, t.measured_us / calls, t.fastest_us, t.calls, t.waited_us / calls,
      static_cast<double>(t.waits) / calls, static_cast<double>(t.sleeps) / calls, t.moved,
      work.empty() ? "none timed" : work, engine.selector().inputs().costs.source);
}

}  // namespace loom::algorithms
