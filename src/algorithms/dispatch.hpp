// Runs each call with the algorithm its communicator's selector chooses (selection.hpp), and
// keeps what that needs across calls: the last plan, since a loop of calls of one kind and size
// decides once (the inputs are fixed per communicator); the trials of the sizes where the model
// cannot price its two cheapest rows apart (trials.hpp); and, while DEBUG logging is on, the
// model's predictions against this rank's clock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>

#include "algorithms/algorithm_costs.hpp"
#include "algorithms/collective.hpp"
#include "algorithms/engine.hpp"
#include "algorithms/trials.hpp"

namespace loom::algorithms {

struct Algorithm;

class Dispatcher {
 public:
  // Chooses (or reuses the last plan), cuts the call's slices on the engine, and runs it.
  void run(Engine& engine, const Collective& call);

 private:
  // The last decision.
  struct Plan {
    Kind kind = Kind::barrier;
    std::size_t bytes = 0;
    DataType dtype = DataType::u8;  // a reduction's (its trial is its dtype's and op's); else u8
    ReduceOp op = ReduceOp::sum;    // a reduction's; else sum
    bool device = false;
    bool windows = false;
    const Algorithm* algorithm = nullptr;  // none yet
    std::size_t slice = 0;
    std::size_t round_slices = 0;
    double predicted_us = 0;
    ReadRange reads;
    const Algorithm* rival = nullptr;  // measured against `algorithm` (Trials) until judged
  };
  // The model against this rank's clock, per call class (algorithm, power-of-two size class).
  struct ClassTimes {
    std::uint64_t calls = 0;
    double predicted_us = 0;  // sums
    double measured_us = 0;
    double fastest_us = 0;
    double waited_us = 0;  // sums: the waits for peers (Engine::WaitStats)
    std::uint64_t waits = 0;
    std::uint64_t sleeps = 0;
    std::uint64_t moved = 0;  // calls that ended on another CPU than they began on
    Engine::WorkStats work;   // sums: the copies and reductions, by where their bytes come from
  };
  // At DEBUG, each call class's predicted time against this rank's measured one, at its 1st,
  // 10th, 100th, ... call: where the model is wrong, and by how much.
  void record_time(const Engine& engine, const Collective& call, double took_us, bool moved);
  // Runs the plan's call (timed where DEBUG logging is on or `timed`: a trial's call); returns
  // its time on this rank in microseconds, or 0 untimed.
  double run_timed(Engine& engine, const Collective& call, bool timed);
  // The plan's algorithm on the call; with LOOM_TRACE, in a span named after the algorithm.
  void run_plan(Engine& engine, const Collective& call);
  // A call whose plan has a rival: the trial's turn, its time, and at its last call the swap of
  // every rank's times and the winner, which the plan keeps from then on.
  void run_trial(Engine& engine, const Collective& call, Trials::Trial& trial);
  // The plan's algorithm and its cuts become `algorithm`'s.
  void plan_for(const Engine& engine, const Algorithm& algorithm);

  Plan plan_;
  Trials trials_;
  std::unordered_map<std::size_t, ClassTimes> class_times_;
};

}  // namespace loom::algorithms
