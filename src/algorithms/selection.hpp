// Which algorithm runs a call: the cheapest row of the algorithm table (algorithm_table.hpp) that
// can take it on the cost model (cost_model.hpp), unless a rule (rules.hpp) names another: the
// user's (LOOM_ALGO) first, then the tuning table's. Dispatch (dispatch.hpp) runs the choice.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include "algorithms/algorithm_costs.hpp"
#include "algorithms/algorithm_table.hpp"
#include "algorithms/collective.hpp"
#include "algorithms/cost_model.hpp"
#include "algorithms/rules.hpp"

namespace loom::algorithms {

class Selector {
 public:
  // Parses the overrides: InvalidArgument naming the bad rule.
  explicit Selector(SelectionInputs inputs);

  struct Choice {
    const Algorithm* algorithm;
    std::size_t slice;
    double predicted_us;
    bool forced;  // a LOOM_ALGO rule named it
    bool tuned;   // a rule of the tuning table named it
    // Slices a round of the ring all-reduce carries per block (0: half the FIFO's slots;
    // Engine::round_slices).
    std::size_t round_slices = 0;
    // The blocks the single copy reads in place (Algorithm::Traits::reads_blocks): every one
    // where a rule names it or the call's one size chose it, else the model's (all_to_all_v).
    ReadRange reads;
    // The next cheapest row, where the model cannot price the two apart and the dispatch
    // measures both on the first calls of the size (trials.hpp); else null.
    const Algorithm* rival = nullptr;
  };
  // windows: the communicator has shared host windows (Communicator::alloc), so the algorithms
  // that read the peers' buffers in place may take a host call.
  Choice choose(Kind kind, std::size_t bytes, bool device, bool windows = false) const;
  // The choice of `algorithm` for the call, as a rule naming it would make it but for its slice
  // (a trial's rival, or its winner).
  Choice choice_of(const Algorithm& algorithm, std::size_t bytes, bool device) const;
  // Why `algorithm` cannot take the call (nullptr: it can): its own reason, or the windows.
  const char* unfit(const Algorithm& algorithm, std::size_t bytes, bool device, bool windows) const;
  const SelectionInputs& inputs() const { return inputs_; }
  // InvalidArgument, as the constructor raises it, when LOOM_ALGO rules `text` do not parse.
  static void check_rules(std::string_view text) { parse_rules(text, "configuration: LOOM_ALGO"); }

 private:
  // The first rule of `rules` for the call, where its algorithm can take it; else null.
  const Rule* rule_for(const std::vector<Rule>& rules, Kind kind, std::size_t bytes, bool device,
                       bool windows) const;
  // Whether a call of `kind` has its two cheapest rows measured against each other on its first
  // calls (Choice::rival) instead of the model's choice alone.
  bool measures_rival(Kind kind, bool device, bool windows) const;
  // The choice of `a` at `cost`, cut as the row cuts it (its slice and rounds).
  Choice cut(const Algorithm& a, double cost, std::size_t bytes, bool device) const;

  SelectionInputs inputs_;
  std::vector<Rule> rules_;        // LOOM_ALGO
  std::vector<Rule> tuned_rules_;  // the tuning table's
};

}  // namespace loom::algorithms
