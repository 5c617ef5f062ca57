#include "core/tuning_table.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "base/logging.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "loom/loom.hpp"

namespace loom::core {
namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) break;
    std::string name = line.substr(colon + 1);
    const auto first = name.find_first_not_of(" \t");
    name = first == std::string::npos ? "" : name.substr(first);
    // Tabs separate the table's fields.
    for (char& c : name)
      if (c == '\t') c = ' ';
    return name;
  }
  return "unknown";
}

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> fields;
  std::size_t from = 0;
  for (;;) {
    const auto tab = line.find('\t', from);
    fields.push_back(line.substr(from, tab - from));
    if (tab == std::string::npos) return fields;
    from = tab + 1;
  }
}

bool same_key(const TuningEntry& a, const TuningEntry& b) {
  return a.machine == b.machine && a.transport == b.transport && a.shape == b.shape;
}

void make_folders(const std::string& path) {
  for (auto slash = path.find('/', 1); slash != std::string::npos;
       slash = path.find('/', slash + 1)) {
    const std::string folder = path.substr(0, slash);
    if (::mkdir(folder.c_str(), 0755) != 0 && errno != EEXIST)
      throw Error(
          fmt::format("tuning table: cannot make folder {}: {}", folder, std::strerror(errno)));
  }
}

}  // namespace

MachineKey this_machine() {
  return MachineKey{cpu_model(),
                    static_cast<int>(std::max(1u, std::thread::hardware_concurrency())),
                    kernels::simd_target()};
}

std::string TuningEntry::line() const {
  return fmt::format("{}\t{}\t{}\t{}\t{}\t{}", machine.cpu, machine.cores, machine.simd, transport,
                     shape, rules);
}

std::optional<TuningEntry> TuningEntry::parse(const std::string& line) {
  const auto f = split_tabs(line);
  if (f.size() != 6) return std::nullopt;
  int cores = 0;
  std::istringstream(f[1]) >> cores;
  if (cores < 1 || f[2].empty() || f[3].empty() || f[4].empty()) return std::nullopt;
  return TuningEntry{MachineKey{f[0], cores, f[2]}, f[3], f[4], f[5]};
}

std::vector<TuningEntry> read_tuning_table(const std::string& path) {
  std::vector<TuningEntry> entries;
  std::ifstream in(path);
  if (!in) return entries;
  int number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (line.empty() || line[0] == '#') continue;
    if (auto e = TuningEntry::parse(line))
      entries.push_back(std::move(*e));
    else
      base::log().warn("tuning table {}: line {} is not 6 tab-separated fields; skipped", path,
                       number);
  }
  return entries;
}

void write_tuning_entry(const std::string& path, const TuningEntry& entry,
                        const std::string& comment) {
  std::vector<std::string> kept;
  {
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("# Loom tuning table", 0) == 0) continue;  // the header, written anew
      if (!line.empty() && line[0] != '#')
        if (const auto e = TuningEntry::parse(line); e && same_key(*e, entry)) {
          // Its comment lines went just before it: drop those too.
          while (!kept.empty() && kept.back().rfind("#  ", 0) == 0) kept.pop_back();
          continue;
        }
      kept.push_back(line);
    }
  }
  make_folders(path);
  const std::string temporary = fmt::format("{}.{}.tmp", path, ::getpid());
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << "# Loom tuning table, written by loom-tune. Fields, tab-separated: cpu model, cores, "
           "kernel target, transport, ranks per host x hosts, LOOM_ALGO rules.\n";
    for (const auto& line : kept) out << line << '\n';
    if (!comment.empty()) {
      std::istringstream lines(comment);
      for (std::string line; std::getline(lines, line);) out << "#  " << line << '\n';
    }
    out << entry.line() << '\n';
    out.flush();
    if (!out)
      throw Error(
          fmt::format("tuning table: cannot write {}: {}", temporary, std::strerror(errno)));
  }
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temporary.c_str());
    throw Error(fmt::format("tuning table: cannot replace {}: {}", path, std::strerror(err)));
  }
}

std::string job_shape(const std::vector<std::vector<int>>& hosts) {
  if (hosts.empty()) return {};
  for (const auto& h : hosts)
    if (h.size() != hosts.front().size()) return {};
  return fmt::format("{}x{}", hosts.front().size(), hosts.size());
}

}  // namespace loom::core
