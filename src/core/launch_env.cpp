#include "core/launch_env.hpp"

#include <openssl/evp.h>
#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "base/config.hpp"
#include "loom/loom.hpp"

namespace loom::core {

namespace {

constexpr int kDefaultPort = 29500;  // torchrun's

std::optional<long long> parse_int(std::string_view s) {
  long long v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

class Reader {
 public:
  Reader(const EnvLookup& lookup, std::string_view launcher)
      : lookup_(lookup), launcher_(launcher) {}
  bool has(const char* name) const { return lookup_(name).has_value(); }
  std::optional<std::string> string(const char* name) const { return lookup_(name); }
  std::optional<int> integer(const char* name, long long lo, long long hi) const {
    auto s = lookup_(name);
    if (!s) return std::nullopt;
    auto v = parse_int(*s);
    if (!v || *v < lo || *v > hi)
      throw InvalidArgument(fmt::format("init: {} sets {}='{}', not an integer in [{}, {}]",
                                        launcher_, name, *s, lo, hi));
    return static_cast<int>(*v);
  }
  int required(const char* name, long long lo, long long hi) const {
    auto v = integer(name, lo, hi);
    if (!v)
      throw InvalidArgument(
          fmt::format("init: environment variable {} is not set ({} launch)", name, launcher_));
    return *v;
  }

 private:
  const EnvLookup& lookup_;
  std::string_view launcher_;
};

constexpr long long kMaxRanks = 1 << 24;

// MASTER_ADDR/MASTER_PORT or LOOM_INIT_METHOD; `default_addr` where the launcher implies one.
void read_rendezvous(const Reader& env, LaunchEnv& out, std::optional<std::string> default_addr,
                     std::optional<int> default_port) {
  if (auto method = env.string("LOOM_INIT_METHOD"); method && *method != "env://") {
    out.init_method = *method;
    return;
  }
  out.init_method = "env://";
  auto addr = env.string("MASTER_ADDR");
  if (!addr) addr = default_addr;
  if (!addr)
    throw InvalidArgument(
        fmt::format("init: launched by {}, but MASTER_ADDR is not set (set MASTER_ADDR, or "
                    "LOOM_INIT_METHOD=file:///shared/path or tcp://host:port)",
                    out.launcher));
  out.master_addr = *addr;
  auto port = env.integer("MASTER_PORT", 1, 65535);
  out.master_port = port ? *port : default_port.value_or(kDefaultPort);
}

}  // namespace

std::string LaunchEnv::describe() const {
  std::string at = init_method == "env://"
                       ? fmt::format("store {}:{}{}", master_addr, master_port,
                                     store_hosted_by_launcher ? " (hosted by loomrun)" : "")
                       : init_method;
  return fmt::format("launched by {}: rank {}/{}, local rank {}/{}{}; {}", launcher, rank,
                     world_size, local_rank, local_world_size,
                     node_rank >= 0 ? fmt::format(", node {}", node_rank) : "", at);
}

std::vector<std::string> expand_slurm_hostlist(std::string_view list) {
  auto bad = [&](std::string_view why) {
    return InvalidArgument(fmt::format("init: Slurm host list '{}': {}", list, why));
  };
  // Split at commas outside brackets.
  std::vector<std::string_view> items;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= list.size(); ++i) {
    if (i == list.size() || (list[i] == ',' && depth == 0)) {
      if (i > start) items.push_back(list.substr(start, i - start));
      start = i + 1;
    } else if (list[i] == '[') {
      if (++depth > 1) throw bad("nested brackets");
    } else if (list[i] == ']') {
      if (--depth < 0) throw bad("']' without '['");
    }
  }
  if (depth != 0) throw bad("'[' without ']'");

  std::vector<std::string> hosts;
  // Expands the first bracket group of `name`, recursing for the rest.
  std::function<void(std::string_view, std::string)> expand = [&](std::string_view rest,
                                                                  std::string prefix) {
    auto open = rest.find('[');
    if (open == std::string_view::npos) {
      hosts.push_back(prefix + std::string(rest));
      return;
    }
    auto close = rest.find(']', open);
    std::string head = prefix + std::string(rest.substr(0, open));
    std::string_view ranges = rest.substr(open + 1, close - open - 1);
    std::string_view tail = rest.substr(close + 1);
    if (ranges.empty()) throw bad("empty brackets");
    std::size_t from = 0;
    while (from <= ranges.size()) {
      auto comma = ranges.find(',', from);
      std::string_view range = ranges.substr(
          from, comma == std::string_view::npos ? std::string_view::npos : comma - from);
      auto dash = range.find('-');
      std::string_view lo_text = range.substr(0, dash);
      std::string_view hi_text = dash == std::string_view::npos ? lo_text : range.substr(dash + 1);
      auto lo = parse_int(lo_text), hi = parse_int(hi_text);
      if (!lo || !hi || *lo < 0 || *hi < *lo) throw bad(fmt::format("bad range '{}'", range));
      if (*hi - *lo > 1000000) throw bad(fmt::format("range '{}' is too long", range));
      const std::size_t width = lo_text.size();  // "01-10": keep two digits
      for (long long v = *lo; v <= *hi; ++v) expand(tail, head + fmt::format("{:0{}}", v, width));
      if (comma == std::string_view::npos) break;
      from = comma + 1;
    }
  };
  for (auto item : items) expand(item, "");
  if (hosts.empty()) throw bad("no hosts");
  return hosts;
}

int slurm_store_port(std::string_view job_id, std::string_view step_id, unsigned uid) {
  const std::string text = fmt::format("loom store port/{}/{}/{}", job_id, step_id, uid);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_Digest(text.data(), text.size(), digest, &length, EVP_sha256(), nullptr) != 1 ||
      length < sizeof(std::uint64_t))
    throw Error("init: SHA-256 of the Slurm job id failed");
  std::uint64_t hash = 0;
  std::memcpy(&hash, digest, sizeof(hash));
  return kSlurmPortLow + static_cast<int>(hash % (kSlurmPortHigh - kSlurmPortLow + 1));
}

std::vector<int> expand_slurm_tasks_per_node(std::string_view list) {
  std::vector<int> counts;
  std::size_t from = 0;
  while (from < list.size()) {
    auto comma = list.find(',', from);
    std::string_view item =
        list.substr(from, comma == std::string_view::npos ? list.npos : comma - from);
    std::string_view count_text = item, repeat_text = "1";
    if (auto paren = item.find("(x"); paren != std::string_view::npos) {
      if (item.back() != ')')
        throw InvalidArgument(fmt::format("init: Slurm task counts '{}': bad '{}'", list, item));
      count_text = item.substr(0, paren);
      repeat_text = item.substr(paren + 2, item.size() - paren - 3);
    }
    auto count = parse_int(count_text), repeat = parse_int(repeat_text);
    if (!count || !repeat || *count < 0 || *repeat < 1 || *repeat > kMaxRanks)
      throw InvalidArgument(fmt::format("init: Slurm task counts '{}': bad '{}'", list, item));
    counts.insert(counts.end(), static_cast<std::size_t>(*repeat), static_cast<int>(*count));
    if (comma == std::string_view::npos) break;
    from = comma + 1;
  }
  return counts;
}

LaunchEnv detect_launch_env(const EnvLookup& lookup) {
  LaunchEnv out;
  if (lookup("RANK") || lookup("WORLD_SIZE")) {
    const bool loomrun = lookup("LOOM_STORE_HOSTED").has_value();
    out.launcher = loomrun ? "loomrun" : "env";
    Reader env(lookup, loomrun ? "loomrun" : "torchrun-style environment");
    out.rank = env.required("RANK", 0, kMaxRanks - 1);
    out.world_size = env.required("WORLD_SIZE", 1, kMaxRanks);
    out.local_rank = env.integer("LOCAL_RANK", 0, kMaxRanks - 1).value_or(out.rank);
    out.local_world_size = env.integer("LOCAL_WORLD_SIZE", 1, kMaxRanks).value_or(out.world_size);
    out.node_rank = env.integer("NODE_RANK", 0, kMaxRanks - 1)
                        .value_or(env.integer("GROUP_RANK", 0, kMaxRanks - 1).value_or(-1));
    out.store_hosted_by_launcher = loomrun;
    if (auto run = lookup("TORCHELASTIC_RUN_ID"); run && !run->empty() && *run != "none")
      out.job = *run;
    read_rendezvous(env, out, std::nullopt, std::nullopt);
  } else if (lookup("OMPI_COMM_WORLD_RANK")) {
    out.launcher = "openmpi";
    Reader env(lookup, "Open MPI");
    out.rank = env.required("OMPI_COMM_WORLD_RANK", 0, kMaxRanks - 1);
    out.world_size = env.required("OMPI_COMM_WORLD_SIZE", 1, kMaxRanks);
    out.local_rank = env.integer("OMPI_COMM_WORLD_LOCAL_RANK", 0, kMaxRanks - 1).value_or(0);
    out.local_world_size = env.integer("OMPI_COMM_WORLD_LOCAL_SIZE", 1, kMaxRanks).value_or(1);
    // (OMPI_COMM_WORLD_NODE_RANK is a rank within the node, not the node's index.)
    read_rendezvous(env, out, std::nullopt, std::nullopt);
  } else if (lookup("SLURM_PROCID")) {
    out.launcher = "slurm";
    Reader env(lookup, "Slurm");
    out.rank = env.required("SLURM_PROCID", 0, kMaxRanks - 1);
    out.world_size = env.required("SLURM_NTASKS", 1, kMaxRanks);
    out.local_rank = env.integer("SLURM_LOCALID", 0, kMaxRanks - 1).value_or(0);
    out.node_rank = env.integer("SLURM_NODEID", 0, kMaxRanks - 1).value_or(-1);
    auto per_node = env.string("SLURM_STEP_TASKS_PER_NODE");
    if (!per_node) per_node = env.string("SLURM_TASKS_PER_NODE");
    if (per_node) {
      auto counts = expand_slurm_tasks_per_node(*per_node);
      if (out.node_rank >= 0 && static_cast<std::size_t>(out.node_rank) < counts.size())
        out.local_world_size = counts[static_cast<std::size_t>(out.node_rank)];
    }
    // The master is the step's first node; the port follows the job, the step and the user, so
    // that two steps of one job (or two jobs sharing a node) do not meet in one store.
    std::optional<std::string> first;
    auto nodes = env.string("SLURM_STEP_NODELIST");
    if (!nodes) nodes = env.string("SLURM_JOB_NODELIST");
    if (!nodes) nodes = env.string("SLURM_NODELIST");
    if (nodes) first = expand_slurm_hostlist(*nodes).front();
    std::optional<int> port;
    if (auto job = env.integer("SLURM_JOB_ID", 0, 2147483647)) {
      const std::string step = env.string("SLURM_STEP_ID").value_or("");
      port = slurm_store_port(std::to_string(*job), step, ::getuid());
      out.job = fmt::format("slurm-{}.{}", *job, step.empty() ? "-" : step);
    }
    read_rendezvous(env, out, first, port);
  } else {
    throw InvalidArgument(
        "init: no launcher environment found: start with loomrun, srun or mpirun, or set RANK, "
        "WORLD_SIZE, MASTER_ADDR and MASTER_PORT");
  }
  if (out.rank >= out.world_size)
    throw InvalidArgument(fmt::format("init: {} gives rank {} but a world of {} rank(s)",
                                      out.launcher, out.rank, out.world_size));
  return out;
}

LaunchEnv detect_launch_env() {
  return detect_launch_env([](const char* name) { return base::env_string(name); });
}

}  // namespace loom::core
