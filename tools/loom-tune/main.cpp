// loom-tune: measures, on this machine and in this job's shape, which algorithm and slice runs
// each collective fastest at each size, and writes the result as a tuning table entry that later
// jobs of the same machine, transport and shape load (LOOM_TUNE_FILE).
//
// Each candidate (an algorithm, with each slice where its slice is free, and the cost model
// itself) runs on a child communicator split with that LOOM_ALGO rule. Rounds go over every
// candidate in turn, so a slow spell of the machine hits them alike; a size's figure for a
// candidate is its median round. A round is timed as every comparison in bench/compare is: each
// rank times every call, a call's time is its slowest rank's, the median over calls. The fastest
// candidate at a size then runs against the model again, in turn, in rounds of their own (the
// confirmation): the fastest of many noisy figures looks better than it is. The table names a
// candidate for a size only where it beats the model by the margin in both; elsewhere the model
// chooses.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "algorithms/rules.hpp"
#include "args.hpp"
#include "base/config.hpp"
#include "bench/compare/per_op.hpp"
#include "candidates.hpp"
#include "core/tuning_table.hpp"
#include "loom/loom.hpp"

namespace tune {
namespace {

// Figures by candidate and size: each round's, or one per candidate and size.
using Rounds = std::vector<std::vector<std::vector<double>>>;
using Figures = std::vector<std::vector<double>>;

std::string today() {
  const std::time_t now = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M", std::localtime(&now));
  return text;
}

// The sizes of the sweep: -b to -e by -f, in whole f32 elements.
std::vector<std::size_t> sweep(const Args& args) {
  std::vector<std::size_t> sizes;
  for (double s = static_cast<double>(args.min_bytes);
       s <= static_cast<double>(args.max_bytes) * 1.0001; s *= args.factor)
    sizes.push_back(std::max<std::size_t>(4, static_cast<std::size_t>(s) / 4 * 4));
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  return sizes;
}

class Tuner {
 public:
  Tuner(loom::Communicator& base, const Args& args, std::size_t slot_bytes)
      : base_(base), args_(args), sizes_(sweep(args)), timer_(base, args) {
    for (Kind k : args.ops) cands_[k] = candidates_of(k, slot_bytes);
  }
  const std::vector<std::size_t>& sizes() const { return sizes_; }

  // args.rounds passes, each over every candidate of every operation in turn: their figures.
  std::map<Kind, Rounds> measure() {
    std::map<Kind, Rounds> rounds_of;
    for (Kind k : args_.ops)
      rounds_of[k].assign(cands_[k].size(), std::vector<std::vector<double>>(sizes_.size()));
    const auto started = std::chrono::steady_clock::now();
    for (int round = 0; round < args_.rounds; ++round) {
      for (Kind k : args_.ops)
        for (std::size_t c = 0; c < cands_[k].size(); ++c)
          time_sizes(
              k, c, [](std::size_t) { return true; }, rounds_of[k][c]);
      if (base_.rank() == 0)
        std::fprintf(
            stderr, "loom-tune: round %d of %d done after %.1f s\n", round + 1, args_.rounds,
            std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
    }
    return rounds_of;
  }

  // The rules for `k` from its rounds, appended to `rules`, and its lines of the report. Per
  // size, the fastest candidate where it beats the model by the margin, and still does against
  // it in the confirmation; the rules cover each run of sizes with one winner, from its first
  // size to the next run's.
  void judge(Kind k, const Rounds& rounds, std::vector<std::string>& rules, std::string& report) {
    const std::vector<Candidate>& cs = cands_[k];
    // A candidate's figure at a size: the median of its rounds (NaN: not a candidate there).
    Figures best(cs.size(), std::vector<double>(sizes_.size(), NAN));
    for (std::size_t c = 0; c < cs.size(); ++c)
      for (std::size_t s = 0; s < sizes_.size(); ++s)
        if (!rounds[c][s].empty()) best[c][s] = bench::median(rounds[c][s]);
    std::vector<std::size_t> fastest(sizes_.size(), 0), winner(sizes_.size(), 0);
    for (std::size_t s = 0; s < sizes_.size(); ++s) {
      fastest[s] = fastest_at(k, best, s);
      if (best[fastest[s]][s] < best[0][s] * (1.0 - args_.margin)) winner[s] = fastest[s];
    }
    const Rounds confirmed = confirm(k, winner);
    report += fmt::format("{:>9} {:>22} {:>11} {:>22} {:>11} {:>7} {:>10}\n",
                          loom::algorithms::rule_name(k), "model's choice", "model us", "fastest",
                          "its us", "gain", "confirmed");
    for (std::size_t s = 0; s < sizes_.size(); ++s) {
      const loom::Estimate e = base_.estimate(operation_of(k), sizes_[s]);
      std::string again;
      if (winner[s] != 0 && args_.confirm > 0) {
        const double gain = bench::median(confirmed[0][s]) / bench::median(confirmed[winner[s]][s]);
        again = fmt::format("{:.2f}x", gain);
        if (!(gain > 1.0 / (1.0 - args_.margin))) winner[s] = 0;
      }
      const double model = best[0][s], its = best[fastest[s]][s];
      report += fmt::format(
          "{:>9} {:>22} {:>11.1f} {:>22} {:>11.1f} {:>6.2f}x {:>10}{}\n", size_text(sizes_[s]),
          e.slice_bytes ? fmt::format("{}@{}", e.algorithm, size_text(e.slice_bytes)) : e.algorithm,
          model, cs[fastest[s]].name(), its, model / its, again, winner[s] ? "  <- table" : "");
    }
    add_rules(k, winner, rules);
  }

 private:
  // Times candidate `c` of `k` on a child communicator split with its rule, at each size
  // `wanted` names, adding each figure to `figures[size]`.
  template <typename Wanted>
  void time_sizes(Kind k, std::size_t c, Wanted wanted, std::vector<std::vector<double>>& figures) {
    loom::Options rule;
    rule.algorithm = cands_[k][c].rule(k);
    std::optional<loom::Communicator> child = base_.split(0, base_.rank(), rule);
    for (std::size_t s = 0; s < sizes_.size(); ++s) {
      if (!wanted(s)) continue;
      if (const auto us = timer_.time(*child, cands_[k][c], k, sizes_[s]))
        figures[s].push_back(*us);
    }
    child->destroy();
  }

  // The fastest candidate at size `s` (0: the model). The model's own choice, forced, is the
  // model: a gap between them is noise.
  std::size_t fastest_at(Kind k, const Figures& best, std::size_t s) {
    const std::vector<Candidate>& cs = cands_[k];
    const loom::Estimate e = base_.estimate(operation_of(k), sizes_[s]);
    std::size_t fastest = 0;
    for (std::size_t c = 1; c < cs.size(); ++c) {
      const bool models_choice =
          cs[c].algorithm == e.algorithm && (cs[c].slice == 0 || cs[c].slice == e.slice_bytes);
      if (!models_choice && !std::isnan(best[c][s]) && best[c][s] < best[fastest][s]) fastest = c;
    }
    return fastest;
  }

  // The confirmation: each size's winner and the model again, in turn, in rounds of their own.
  Rounds confirm(Kind k, const std::vector<std::size_t>& winner) {
    Rounds confirmed(cands_[k].size(), std::vector<std::vector<double>>(sizes_.size()));
    std::vector<std::size_t> contenders{0};
    for (std::size_t c : winner)
      if (c != 0 && std::find(contenders.begin(), contenders.end(), c) == contenders.end())
        contenders.push_back(c);
    for (int round = 0; contenders.size() > 1 && round < args_.confirm; ++round)
      for (std::size_t c : contenders)
        time_sizes(
            k, c, [&](std::size_t s) { return winner[s] != 0 && (c == 0 || winner[s] == c); },
            confirmed[c]);
    return confirmed;
  }

  void add_rules(Kind k, const std::vector<std::size_t>& winner, std::vector<std::string>& rules) {
    const std::vector<Candidate>& cs = cands_[k];
    for (std::size_t s = 0; s < sizes_.size();) {
      std::size_t end = s;
      while (end + 1 < sizes_.size() && winner[end + 1] == winner[s]) ++end;
      if (winner[s] != 0) {
        const std::string from = s == 0 ? "" : size_text(sizes_[s]);
        const std::string to = end + 1 == sizes_.size() ? "" : size_text(sizes_[end + 1]);
        rules.push_back(from.empty() && to.empty()
                            ? cs[winner[s]].rule(k)
                            : fmt::format("{}:{}-{}", cs[winner[s]].rule(k), from, to));
      }
      s = end + 1;
    }
  }

  loom::Communicator& base_;
  const Args& args_;
  const std::vector<std::size_t> sizes_;
  Timer timer_;
  std::map<Kind, std::vector<Candidate>> cands_;
};

// Rank 0's report, and the entry written to `path` (or not: --dry-run); the exit code.
int write_entry(const Args& args, int ranks, const std::string& key, const std::string& path,
                const std::vector<std::size_t>& sizes, const std::string& report,
                const std::string& rules) {
  std::printf("%s", report.c_str());
  std::printf("rules: %s\n",
              rules.empty() ? "(none: the model is within the margin)" : rules.c_str());
  const auto space = key.find(' ');
  loom::core::TuningEntry entry{loom::core::this_machine(), key.substr(0, space),
                                key.substr(space + 1), rules};
  if (args.dry_run) {
    std::printf("--dry-run: %s not written\n", path.c_str());
    return 0;
  }
  if (path.empty()) {
    std::fprintf(stderr, "loom-tune: no table to write: set --file or LOOM_TUNE_FILE\n");
    return 2;
  }
  loom::core::write_tuning_entry(
      path, entry,
      fmt::format("{}: loom-tune, {} ranks, {}-{} x{}, {} round(s), {} to confirm, margin {}",
                  today(), ranks, size_text(sizes.front()), size_text(sizes.back()), args.factor,
                  args.rounds, args.confirm, args.margin));
  std::printf("wrote the entry for %s, %d cores, %s, %s to %s\n", entry.machine.cpu.c_str(),
              entry.machine.cores, entry.machine.simd.c_str(), key.c_str(), path.c_str());
  return 0;
}

int run(const Args& args, const loom::Options& options) {
  loom::Communicator base = loom::init(options);
  const int rank = base.rank(), n = base.size();
  const loom::base::Config config = loom::base::Config::resolve(loom::Options{}, n);
  const std::string path = args.file ? *args.file
                           : config.selection.tuning_file.empty()
                               ? loom::base::default_tuning_file()
                               : config.selection.tuning_file;
  const std::string key = base.tuning_key();
  if (n < 2 || key.back() == ' ') {
    if (rank == 0)
      std::fprintf(stderr, "loom-tune: needs 2 or more ranks, as many on every host (%s)\n",
                   key.c_str());
    return 2;
  }
  Tuner tuner(base, args, config.link.slot_bytes());
  const std::vector<std::size_t>& sizes = tuner.sizes();
  if (rank == 0)
    std::printf("# loom-tune: %d ranks, %s, %zu sizes %s-%s, %d round(s); table %s\n", n,
                key.c_str(), sizes.size(), size_text(sizes.front()).c_str(),
                size_text(sizes.back()).c_str(), args.rounds, path.c_str());
  const std::map<Kind, Rounds> rounds_of = tuner.measure();
  std::vector<std::string> rules;
  std::string report;
  for (Kind k : args.ops) tuner.judge(k, rounds_of.at(k), rules, report);
  std::string joined;
  for (const auto& r : rules) joined += fmt::format("{}{}", joined.empty() ? "" : ",", r);
  const int code = rank == 0 ? write_entry(args, n, key, path, sizes, report, joined) : 0;
  if (code != 0) return code;
  base.destroy();
  return 0;
}

}  // namespace
}  // namespace tune

int main(int argc, char** argv) {
  const tune::Args args = tune::parse(argc, argv);
  // The table being made must not steer the model it is measured against.
  loom::Options options;
  options.tuning_file = "off";
  try {
    return tune::run(args, options);
  } catch (const loom::Error& e) {
    std::fprintf(stderr, "loom-tune: %s\n", e.what());
    return 1;
  }
}
