#include "args.hpp"

#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>

#include "algorithms/rules.hpp"
#include "base/config.hpp"
#include "tools/cli/cli.hpp"

namespace tune {
namespace {

[[noreturn]] void bad(const std::string& why) {
  loom::cli::bad("loom-tune", why);
}

std::optional<Kind> kind_named(const std::string& name) {
  for (Kind k :
       {Kind::all_reduce, Kind::reduce_scatter, Kind::all_gather, Kind::broadcast, Kind::reduce})
    if (loom::algorithms::rule_name(k) == name) return k;
  return std::nullopt;
}

std::vector<Kind> parse_ops(const std::string& value) {
  std::vector<Kind> ops;
  for (std::size_t from = 0; from <= value.size();) {
    const auto comma = std::min(value.find(',', from), value.size());
    const std::string name = value.substr(from, comma - from);
    const auto k = kind_named(name);
    if (!k)
      bad(fmt::format("--ops: '{}' is not allreduce, reducescatter, allgather, broadcast or reduce",
                      name));
    ops.push_back(*k);
    from = comma + 1;
  }
  return ops;
}

std::size_t size_of(const std::string& flag, const std::string& value) {
  const auto v = loom::base::parse_size(value);
  if (!v) bad(fmt::format("{} '{}' is not a size", flag, value));
  return *v;
}

double number(const std::string& flag, const std::string& value, double lo, double hi) {
  char* end = nullptr;
  const double v = std::strtod(value.c_str(), &end);
  if (end == value.c_str() || *end != 0 || !(v >= lo && v <= hi))
    bad(fmt::format("{} '{}' is not a number in [{:g}, {:g}]", flag, value, lo, hi));
  return v;
}

}  // namespace

Args parse(int argc, char** argv) {
  Args a;
  CLI::App app("", "loom-tune");
  loom::cli::set_up(
      app, "usage: loom-tune [options]   (under a launcher: loomrun --nproc-per-node N loom-tune)",
      "Sizes are a call's count times 4 bytes (f32; one rank's block for reducescatter and\n"
      "allgather), as LOOM_ALGO rules read them. The entry goes to --file, else LOOM_TUNE_FILE,\n"
      "else ~/.cache/loom/tune.txt.");
  loom::cli::option(app, "--ops", "LIST",
                    "operations to tune, of allreduce, reducescatter, allgather, broadcast,\n"
                    "reduce (default allreduce)",
                    [&](const std::string& v) { a.ops = parse_ops(v); });
  loom::cli::option(app, "-b", "SIZE", "smallest size (default 8)",
                    [&](const std::string& v) { a.min_bytes = size_of("-b", v); });
  loom::cli::option(app, "-e", "SIZE", "largest size (default 64M)",
                    [&](const std::string& v) { a.max_bytes = size_of("-e", v); });
  loom::cli::option(app, "-f", "FACTOR", "multiply the size by FACTOR each step (default 2)",
                    [&](const std::string& v) { a.factor = number("-f", v, 1.1, 1024); });
  loom::cli::option(
      app, "--rounds", "N", "passes over every candidate, in turn (default 3)",
      [&](const std::string& v) { a.rounds = static_cast<int>(number("--rounds", v, 1, 100)); });
  loom::cli::option(
      app, "--confirm", "N", "rounds of each size's winner against the model again (default 5)",
      [&](const std::string& v) { a.confirm = static_cast<int>(number("--confirm", v, 0, 100)); });
  loom::cli::option(app, "--ms", "MS", "time each size gets per candidate and round (default 20)",
                    [&](const std::string& v) { a.cell_ms = number("--ms", v, 0.1, 60000); });
  loom::cli::option(app, "--margin", "M",
                    "a candidate must beat the model by this share to be written (default 0.05)",
                    [&](const std::string& v) { a.margin = number("--margin", v, 0, 0.9); });
  loom::cli::option(app, "--file", "PATH", "the tuning table to write",
                    [&](const std::string& v) { a.file = v; });
  app.add_flag("--dry-run", a.dry_run, "print the rules, write nothing");
  loom::cli::parse(app, argc, argv);
  if (a.min_bytes < 4 || a.max_bytes < a.min_bytes) bad("need 4 <= -b <= -e");
  return a;
}

}  // namespace tune
