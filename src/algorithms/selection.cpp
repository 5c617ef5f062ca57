#include "algorithms/selection.hpp"

#include <algorithm>
#include <utility>

#include "base/logging.hpp"

namespace loom::algorithms {

Selector::Selector(SelectionInputs inputs) : inputs_(std::move(inputs)) {
  rules_ = parse_rules(inputs_.overrides, "configuration: LOOM_ALGO");
  // A table a later version wrote, or one edited by hand, may not parse: the model chooses.
  try {
    tuned_rules_ = parse_rules(inputs_.tuned, "tuning table " + inputs_.tuned_from);
  } catch (const InvalidArgument& e) {
    base::log().warn("{}; the cost model chooses instead", e.what());
    tuned_rules_.clear();
  }
}

const char* Selector::unfit(const Algorithm& a, std::size_t bytes, bool device,
                            bool windows) const {
  // The in-place algorithms need the windows, and a rank whose call is outside them falls back
  // to the choice without them.
  if (const char* why = a.unfit(inputs_, bytes, device)) return why;
  if (a.traits.needs_windows && !windows)
    return device ? "the peers' device memory is not mapped" : "no shared windows";
  return nullptr;
}

const Rule* Selector::rule_for(const std::vector<Rule>& rules, Kind kind, std::size_t bytes,
                               bool device, bool windows) const {
  // A named algorithm that cannot take this call leaves it to the model.
  for (const Rule& rule : rules)
    if (rule.collective == kind && bytes >= rule.from && bytes < rule.to)
      return unfit(*rule.algorithm, bytes, device, windows) == nullptr ? &rule : nullptr;
  return nullptr;
}

Selector::Choice Selector::choose(Kind kind, std::size_t bytes, bool device, bool windows) const {
  // The cheapest row and the next cheapest (the first of equal costs), from one pass.
  const Algorithm *best = nullptr, *runner_up = nullptr;
  double best_cost = kNever, runner_up_cost = kNever;
  for (const Algorithm& a : algorithm_table()) {
    if (a.collective != kind || unfit(a, bytes, device, windows) != nullptr) continue;
    const double cost = a.cost(inputs_, bytes, device);
    if (best == nullptr || cost < best_cost) {
      runner_up = best, runner_up_cost = best_cost;
      best = &a, best_cost = cost;
    } else if (runner_up == nullptr || cost < runner_up_cost) {
      runner_up = &a, runner_up_cost = cost;
    }
  }
  // A rule names the algorithm for a range of sizes: the user's (LOOM_ALGO) first, then the
  // tuning table's, which was measured on host buffers outside the windows.
  const Rule* rule = rule_for(rules_, kind, bytes, device, windows);
  const bool forced = rule != nullptr;
  const bool tuned = !forced && !device && !windows &&
                     (rule = rule_for(tuned_rules_, kind, bytes, device, windows)) != nullptr;
  if (rule != nullptr) best = rule->algorithm, best_cost = best->cost(inputs_, bytes, device);
  Choice choice = cut(*best, best_cost, bytes, device);
  choice.forced = forced, choice.tuned = tuned;
  // A rule's slice replaces a pipelining choice, never "whole slots" (0: small or device calls),
  // and its rounds are the FIFO's.
  if (rule != nullptr && rule->slice != 0 && choice.slice != 0)
    choice.slice = std::min(rule->slice, inputs_.slot_bytes), choice.round_slices = 0;
  if (best->traits.reads_blocks && rule == nullptr && kind == Kind::all_to_all_v)
    choice.reads = single_copy_reads(inputs_);
  if (rule == nullptr && measures_rival(kind, device, windows)) choice.rival = runner_up;
  return choice;
}

Selector::Choice Selector::choice_of(const Algorithm& a, std::size_t bytes, bool device) const {
  return cut(a, a.cost(inputs_, bytes, device), bytes, device);
}

Selector::Choice Selector::cut(const Algorithm& a, double cost, std::size_t bytes,
                               bool device) const {
  const std::size_t round_slices =
      a.traits.round_slices ? a.traits.round_slices(inputs_, bytes, device) : 0;
  return Choice{&a, a.slice(inputs_, bytes, device), cost, false, false, round_slices, ReadRange{}};
}

// The all-to-all on one host over shared memory, where ranks outnumber its cores: pairwise's
// steps need both partners on the CPU at once, and on 4 ranks on 2 cores the model priced it at
// 0.17-0.28x what it took, the single copy at 1.3-2.4x, and chose the slower of the two at 1-2
// MiB a rank (docs/tuning.md, "Measured on the first calls"). No figure the probe takes at
// init, while the ranks start up on the same cores, prices it steadily, so the dispatch measures
// both there. Host buffers outside the windows (where the direct row takes the call) only.
//
// The all-reduce across hosts: the links between hosts are not probed at init, so the model
// prices them at its defaults, and cannot tell a 1 Gbit/s link from a 10 Gbit/s one, nor hosts
// with cores of their own from hosts sharing them. On the one-machine test bed (2 nodes x 2
// ranks, 64 MiB) it chose hierarchical at both rates: right at 1 Gbit/s (the flat ring 1.34x
// slower), 1.17x slower than the ring at 10 Gbit/s (docs/results/nodes-2026-12-05). The
// dispatch measures its two cheapest rows there instead. Host buffers only.
bool Selector::measures_rival(Kind kind, bool device, bool windows) const {
  if (!inputs_.trials || device || windows || inputs_.size < 2) return false;
  if (kind == Kind::all_reduce) return !inputs_.one_host();
  return kind == Kind::all_to_all && inputs_.oversubscribed() && inputs_.one_host() &&
         inputs_.local == transport::TransportKind::shm;
}

}  // namespace loom::algorithms
