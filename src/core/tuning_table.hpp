// The tuning table: what loom-tune measured best on a machine, as LOOM_ALGO rules, for later
// jobs to load. A text file, one entry per line, tab-separated fields:
//
//   cpu model   cores   kernel target   transport   ranks per host x hosts   rules
//
// "#" starts a comment line. An entry serves the jobs whose rank 0 runs on a machine of that
// CPU model, core count and kernel target, over that transport ("shm", "tcp", or "shm+tcp"
// across hosts), in that shape ("4x1"). Rank 0 reads the table and hands its machine's entries
// to every rank in its topology record, so every rank chooses alike.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace loom::core {

struct MachineKey {
  std::string cpu;   // /proc/cpuinfo's model name
  int cores = 0;     // processors online
  std::string simd;  // the reduction kernels' target ("AVX3_ZEN4", "AVX2", ...)
  bool operator==(const MachineKey&) const = default;
};
MachineKey this_machine();

struct TuningEntry {
  MachineKey machine;
  std::string transport;  // "shm", "tcp", "shm+tcp"
  std::string shape;      // "4x1": ranks per host x hosts
  std::string rules;      // LOOM_ALGO syntax
  // The entry's line in the file, newline excluded.
  std::string line() const;
  // The entry a line() wrote; nullopt for any other line (not 6 tab-separated fields, cores not
  // a positive number, an empty kernel target, transport or shape).
  static std::optional<TuningEntry> parse(const std::string& line);
};

// The entries of the table at `path`; none when it does not exist. Lines that do not parse are
// skipped with a warning.
std::vector<TuningEntry> read_tuning_table(const std::string& path);

// Adds `entry` to the table at `path`, replacing the one with the same machine, transport and
// shape; makes the file and its folder where missing. Written whole and renamed into place, so a
// job starting meanwhile reads the old table or the new one. Raises Error naming the path.
void write_tuning_entry(const std::string& path, const TuningEntry& entry,
                        const std::string& comment = {});

// "4x1" for hosts of 4 ranks each, one host; empty when hosts run different numbers of ranks.
std::string job_shape(const std::vector<std::vector<int>>& hosts);

}  // namespace loom::core
