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
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "algorithms/algorithm_table.hpp"
#include "algorithms/selection.hpp"
#include "base/config.hpp"
#include "bench/compare/per_op.hpp"
#include "core/tuning_table.hpp"
#include "loom/loom.hpp"

namespace {

using loom::algorithms::Kind;

struct Args {
  std::vector<Kind> ops = {Kind::all_reduce};
  std::size_t min_bytes = 8, max_bytes = std::size_t{64} << 20;
  double factor = 2;
  int rounds = 3;
  int confirm = 5;
  double cell_ms = 20;
  double margin = 0.05;
  std::optional<std::string> file;
  bool dry_run = false;
};

[[noreturn]] void usage(int code) {
  std::fprintf(code == 0 ? stdout : stderr,
               "usage: loom-tune [--ops allreduce,reducescatter,allgather,broadcast,reduce] "
               "[-b 8] [-e 64M] [-f 2]\n"
               "                 [--rounds 3] [--confirm 5] [--ms 20] [--margin 0.05] "
               "[--file PATH] [--dry-run]\n"
               "Run under a launcher (loomrun --nproc-per-node N loom-tune). Sizes are a call's "
               "count times 4 bytes\n(f32; one rank's block for reducescatter and allgather), as "
               "LOOM_ALGO rules read them. The entry\ngoes to --file, else LOOM_TUNE_FILE, else "
               "~/.cache/loom/tune.txt.\n");
  std::exit(code);
}

std::optional<Kind> kind_named(const std::string& name) {
  for (Kind k :
       {Kind::all_reduce, Kind::reduce_scatter, Kind::all_gather, Kind::broadcast, Kind::reduce})
    if (loom::algorithms::rule_name(k) == name) return k;
  return std::nullopt;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "-h" || flag == "--help") usage(0);
    if (flag == "--dry-run") {
      a.dry_run = true;
      continue;
    }
    if (i + 1 >= argc) usage(2);
    const std::string value = argv[++i];
    auto size = [&] {
      auto v = loom::base::parse_size(value);
      if (!v) {
        std::fprintf(stderr, "loom-tune: %s '%s' is not a size\n", flag.c_str(), value.c_str());
        std::exit(2);
      }
      return *v;
    };
    auto number = [&](double lo, double hi) {
      char* end = nullptr;
      const double v = std::strtod(value.c_str(), &end);
      if (end == value.c_str() || *end != 0 || !(v >= lo && v <= hi)) {
        std::fprintf(stderr, "loom-tune: %s '%s' is not a number in [%g, %g]\n", flag.c_str(),
                     value.c_str(), lo, hi);
        std::exit(2);
      }
      return v;
    };
    if (flag == "--ops") {
      a.ops.clear();
      for (std::size_t from = 0; from <= value.size();) {
        const auto comma = std::min(value.find(',', from), value.size());
        const std::string name = value.substr(from, comma - from);
        const auto k = kind_named(name);
        if (!k) {
          std::fprintf(stderr,
                       "loom-tune: --ops: '%s' is not allreduce, reducescatter, allgather, "
                       "broadcast or reduce\n",
                       name.c_str());
          std::exit(2);
        }
        a.ops.push_back(*k);
        from = comma + 1;
      }
    } else if (flag == "-b") {
      a.min_bytes = size();
    } else if (flag == "-e") {
      a.max_bytes = size();
    } else if (flag == "-f") {
      a.factor = number(1.1, 1024);
    } else if (flag == "--rounds") {
      a.rounds = static_cast<int>(number(1, 100));
    } else if (flag == "--confirm") {
      a.confirm = static_cast<int>(number(0, 100));
    } else if (flag == "--ms") {
      a.cell_ms = number(0.1, 60000);
    } else if (flag == "--margin") {
      a.margin = number(0, 0.9);
    } else if (flag == "--file") {
      a.file = value;
    } else {
      usage(2);
    }
  }
  if (a.min_bytes < 4 || a.max_bytes < a.min_bytes) {
    std::fprintf(stderr, "loom-tune: need 4 <= -b <= -e\n");
    std::exit(2);
  }
  return a;
}

loom::Operation operation_of(Kind k) {
  return static_cast<loom::Operation>(k);
}

// "256K", "64M", or bytes.
std::string size_text(std::size_t bytes) {
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return fmt::format("{}M", bytes >> 20);
  if (bytes >= 1024 && bytes % 1024 == 0) return fmt::format("{}K", bytes >> 10);
  return fmt::format("{}", bytes);
}

struct Candidate {
  std::string algorithm;  // empty: the cost model
  std::size_t slice = 0;  // 0: the algorithm's own
  std::string rule(Kind k) const {
    if (algorithm.empty()) return {};
    if (slice == 0) return fmt::format("{}:{}", loom::algorithms::rule_name(k), algorithm);
    return fmt::format("{}:{}@{}", loom::algorithms::rule_name(k), algorithm, size_text(slice));
  }
  std::string name() const {
    if (algorithm.empty()) return "model";
    return slice ? fmt::format("{}@{}", algorithm, size_text(slice)) : algorithm;
  }
};

// The algorithms of `k` that run on plain host buffers, with each slice for those whose slice
// is free: powers of two from 16 KiB to the slot.
std::vector<Candidate> candidates_of(Kind k, std::size_t slot_bytes) {
  std::vector<Candidate> out{Candidate{}};
  for (const auto& a : loom::algorithms::algorithm_table()) {
    // The in-place rows need shared windows, which the table's rules never choose for.
    if (a.collective != k || a.traits.needs_windows) continue;
    if (!a.traits.any_slice) {
      out.push_back(Candidate{std::string(a.name), 0});
      continue;
    }
    for (std::size_t s = 16 << 10; s <= slot_bytes; s *= 2)
      out.push_back(Candidate{std::string(a.name), s});
  }
  return out;
}

class Timer {
 public:
  Timer(loom::Communicator& base, const Args& args) : base_(base), args_(args) {}

  // The median over calls of each call's slowest rank, in microseconds; nullopt when `comm`'s
  // rule does not take the call (the model would run it).
  std::optional<double> time(loom::Communicator& comm, const Candidate& c, Kind k,
                             std::size_t bytes) {
    const loom::Estimate e = comm.estimate(operation_of(k), bytes);
    if (!c.algorithm.empty() && !e.forced) return std::nullopt;
    const std::size_t count = bytes / 4;
    const auto n = static_cast<std::size_t>(comm.size());
    const std::size_t in_bytes = k == Kind::reduce_scatter ? n * bytes : bytes;
    const std::size_t out_bytes = k == Kind::all_gather ? n * bytes : bytes;
    if (in_.size() < in_bytes) in_.assign(in_bytes, 0);
    if (out_.size() < out_bytes) out_.assign(out_bytes, 0);
    auto call = [&] {
      using loom::DataType, loom::ReduceOp;
      switch (k) {
        case Kind::all_reduce:
          comm.all_reduce(in_.data(), out_.data(), count, DataType::f32, ReduceOp::sum);
          break;
        case Kind::reduce_scatter:
          comm.reduce_scatter(in_.data(), out_.data(), count, DataType::f32, ReduceOp::sum);
          break;
        case Kind::all_gather:
          comm.all_gather(in_.data(), out_.data(), count, DataType::f32);
          break;
        case Kind::broadcast:
          comm.broadcast(in_.data(), out_.data(), count, DataType::f32, 0);
          break;
        case Kind::reduce:
          comm.reduce(in_.data(), out_.data(), count, DataType::f32, ReduceOp::sum, 0);
          break;
        default:
          break;
      }
    };
    // Calls enough to fill the cell's time, from the slowest rank's first call (every rank
    // derives the same count from the same figure).
    double first = bench::time_each_call_us(1, 1, call)[0];
    base_.all_reduce(&first, 1, loom::DataType::f64, loom::ReduceOp::max);
    const int iters =
        static_cast<int>(std::clamp(args_.cell_ms * 1000.0 / std::max(first, 1.0), 3.0, 200.0));
    std::vector<double> mine = bench::time_each_call_us(1, iters, call);
    std::vector<double> all(mine.size() * n);
    base_.all_gather(mine.data(), all.data(), mine.size(), loom::DataType::f64);
    return bench::median_of_slowest(all, comm.size());
  }

 private:
  loom::Communicator& base_;
  const Args& args_;
  std::vector<float> in_, out_;
};

std::string today() {
  const std::time_t now = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M", std::localtime(&now));
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  try {
    // The table being made must not steer the model it is measured against.
    loom::Options options;
    options.tuning_file = "off";
    loom::Communicator base = loom::init(options);
    const int rank = base.rank(), n = base.size();
    const loom::base::Config config = loom::base::Config::resolve(loom::Options{}, n);
    const std::string path = args.file                    ? *args.file
                             : config.tuning_file.empty() ? loom::base::default_tuning_file()
                                                          : config.tuning_file;
    const std::string key = base.tuning_key();
    if (n < 2 || key.back() == ' ') {
      if (rank == 0)
        std::fprintf(stderr, "loom-tune: needs 2 or more ranks, as many on every host (%s)\n",
                     key.c_str());
      return 2;
    }
    std::vector<std::size_t> sizes;
    for (double s = static_cast<double>(args.min_bytes);
         s <= static_cast<double>(args.max_bytes) * 1.0001; s *= args.factor)
      sizes.push_back(std::max<std::size_t>(4, static_cast<std::size_t>(s) / 4 * 4));
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
    const std::size_t slot_bytes = config.buffer_bytes / static_cast<std::size_t>(config.slots);

    // rounds_of[op][candidate][size]: each round's figure (none: not a candidate there).
    std::map<Kind, std::vector<Candidate>> cands;
    std::map<Kind, std::vector<std::vector<std::vector<double>>>> rounds_of;
    for (Kind k : args.ops) {
      cands[k] = candidates_of(k, slot_bytes);
      rounds_of[k].assign(cands[k].size(), std::vector<std::vector<double>>(sizes.size()));
    }
    if (rank == 0)
      std::printf("# loom-tune: %d ranks, %s, %zu sizes %s-%s, %d round(s); table %s\n", n,
                  key.c_str(), sizes.size(), size_text(sizes.front()).c_str(),
                  size_text(sizes.back()).c_str(), args.rounds, path.c_str());
    Timer timer(base, args);
    const auto started = std::chrono::steady_clock::now();
    for (int round = 0; round < args.rounds; ++round) {
      for (Kind k : args.ops) {
        for (std::size_t c = 0; c < cands[k].size(); ++c) {
          loom::Options rule;
          rule.algorithm = cands[k][c].rule(k);
          std::optional<loom::Communicator> child = base.split(0, rank, rule);
          for (std::size_t s = 0; s < sizes.size(); ++s) {
            const auto us = timer.time(*child, cands[k][c], k, sizes[s]);
            if (us) rounds_of[k][c][s].push_back(*us);
          }
          child->destroy();
        }
      }
      if (rank == 0)
        std::fprintf(
            stderr, "loom-tune: round %d of %d done after %.1f s\n", round + 1, args.rounds,
            std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
    }

    // Per size, the fastest candidate where it beats the model by the margin; the rules cover
    // each run of sizes with one winner, from its first size to the next run's.
    std::vector<std::string> rules;
    std::string report;
    for (Kind k : args.ops) {
      const auto& cs = cands[k];
      // A candidate's figure at a size: the median of its rounds (NaN: not a candidate there).
      std::vector<std::vector<double>> best(cs.size(), std::vector<double>(sizes.size(), NAN));
      for (std::size_t c = 0; c < cs.size(); ++c)
        for (std::size_t s = 0; s < sizes.size(); ++s)
          if (!rounds_of[k][c][s].empty()) best[c][s] = bench::median(rounds_of[k][c][s]);
      std::vector<std::size_t> fastest(sizes.size(), 0), winner(sizes.size(), 0);
      for (std::size_t s = 0; s < sizes.size(); ++s) {
        const loom::Estimate e = base.estimate(operation_of(k), sizes[s]);
        for (std::size_t c = 1; c < cs.size(); ++c) {
          // The model's own choice, forced, is the model: a gap between them is noise.
          const bool models_choice =
              cs[c].algorithm == e.algorithm && (cs[c].slice == 0 || cs[c].slice == e.slice_bytes);
          if (!models_choice && !std::isnan(best[c][s]) && best[c][s] < best[fastest[s]][s])
            fastest[s] = c;
        }
        if (best[fastest[s]][s] < best[0][s] * (1.0 - args.margin)) winner[s] = fastest[s];
      }
      // The confirmation: each size's winner and the model again, in turn, in rounds of their
      // own; confirmed[c][s] holds those rounds' figures.
      std::vector<std::vector<std::vector<double>>> confirmed(
          cs.size(), std::vector<std::vector<double>>(sizes.size()));
      std::vector<std::size_t> contenders{0};
      for (std::size_t c : winner)
        if (c != 0 && std::find(contenders.begin(), contenders.end(), c) == contenders.end())
          contenders.push_back(c);
      for (int round = 0; contenders.size() > 1 && round < args.confirm; ++round)
        for (std::size_t c : contenders) {
          loom::Options rule;
          rule.algorithm = cs[c].rule(k);
          std::optional<loom::Communicator> child = base.split(0, rank, rule);
          for (std::size_t s = 0; s < sizes.size(); ++s) {
            if (winner[s] == 0 || (c != 0 && winner[s] != c)) continue;
            if (const auto us = timer.time(*child, cs[c], k, sizes[s]))
              confirmed[c][s].push_back(*us);
          }
          child->destroy();
        }
      report += fmt::format("{:>9} {:>22} {:>11} {:>22} {:>11} {:>7} {:>10}\n",
                            loom::algorithms::rule_name(k), "model's choice", "model us", "fastest",
                            "its us", "gain", "confirmed");
      for (std::size_t s = 0; s < sizes.size(); ++s) {
        const loom::Estimate e = base.estimate(operation_of(k), sizes[s]);
        std::string again;
        if (winner[s] != 0 && args.confirm > 0) {
          const double gain =
              bench::median(confirmed[0][s]) / bench::median(confirmed[winner[s]][s]);
          again = fmt::format("{:.2f}x", gain);
          if (!(gain > 1.0 / (1.0 - args.margin))) winner[s] = 0;
        }
        const double model = best[0][s], its = best[fastest[s]][s];
        report += fmt::format(
            "{:>9} {:>22} {:>11.1f} {:>22} {:>11.1f} {:>6.2f}x {:>10}{}\n", size_text(sizes[s]),
            e.slice_bytes ? fmt::format("{}@{}", e.algorithm, size_text(e.slice_bytes))
                          : e.algorithm,
            model, cs[fastest[s]].name(), its, model / its, again, winner[s] ? "  <- table" : "");
      }
      for (std::size_t s = 0; s < sizes.size();) {
        std::size_t end = s;
        while (end + 1 < sizes.size() && winner[end + 1] == winner[s]) ++end;
        if (winner[s] != 0) {
          const std::string from = s == 0 ? "" : size_text(sizes[s]);
          const std::string to = end + 1 == sizes.size() ? "" : size_text(sizes[end + 1]);
          rules.push_back(from.empty() && to.empty()
                              ? cs[winner[s]].rule(k)
                              : fmt::format("{}:{}-{}", cs[winner[s]].rule(k), from, to));
        }
        s = end + 1;
      }
    }
    std::string joined;
    for (const auto& r : rules) joined += fmt::format("{}{}", joined.empty() ? "" : ",", r);
    if (rank == 0) {
      std::printf("%s", report.c_str());
      std::printf("rules: %s\n",
                  joined.empty() ? "(none: the model is within the margin)" : joined.c_str());
      const auto space = key.find(' ');
      loom::core::TuningEntry entry{loom::core::this_machine(), key.substr(0, space),
                                    key.substr(space + 1), joined};
      if (args.dry_run) {
        std::printf("--dry-run: %s not written\n", path.c_str());
      } else if (path.empty()) {
        std::fprintf(stderr, "loom-tune: no table to write: set --file or LOOM_TUNE_FILE\n");
        return 2;
      } else {
        loom::core::write_tuning_entry(
            path, entry,
            fmt::format("{}: loom-tune, {} ranks, {}-{} x{}, {} round(s), {} to confirm, "
                        "margin {}",
                        today(), n, size_text(sizes.front()), size_text(sizes.back()), args.factor,
                        args.rounds, args.confirm, args.margin));
        std::printf("wrote the entry for %s, %d cores, %s, %s to %s\n", entry.machine.cpu.c_str(),
                    entry.machine.cores, entry.machine.simd.c_str(), key.c_str(), path.c_str());
      }
    }
    base.destroy();
    return 0;
  } catch (const loom::Error& e) {
    std::fprintf(stderr, "loom-tune: %s\n", e.what());
    return 1;
  }
}
