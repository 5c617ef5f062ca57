// loom-tune's command line: the operations and sizes to tune, and how each is timed and judged.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "loom/loom.hpp"

namespace tune {

// The operations, as the rules name them (loom::algorithms::rule_name).
using Kind = loom::Operation;

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

// Exits with code 2 and a message naming the option on bad input; 0 after --help.
Args parse(int argc, char** argv);

}  // namespace tune
