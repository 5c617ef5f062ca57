#include "base/config.hpp"

#include "base/auth.hpp"

#include <cerrno>
#include <cstdlib>
#include <thread>

#include <fmt/format.h>

namespace loom::base {

std::optional<std::string> env_string(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

std::optional<long long> env_int(const char* name, long long lo, long long hi) {
  auto text = env_string(name);
  if (!text) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  long long value = std::strtoll(text->c_str(), &end, 10);
  if (errno != 0 || end == text->c_str() || *end != '\0' || value < lo || value > hi)
    throw InvalidArgument(
        fmt::format("configuration: {}='{}' is not an integer in [{}, {}]", name, *text, lo, hi));
  return value;
}

std::optional<std::size_t> parse_size(const std::string& text) {
  if (text.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || text[0] == '-') return std::nullopt;
  unsigned shift = 0;
  switch (*end) {
    case '\0':
      break;
    case 'k':
    case 'K':
      shift = 10;
      ++end;
      break;
    case 'm':
    case 'M':
      shift = 20;
      ++end;
      break;
    case 'g':
    case 'G':
      shift = 30;
      ++end;
      break;
    default:
      return std::nullopt;
  }
  if (*end == 'B' || *end == 'b') ++end;
  if (*end != '\0') return std::nullopt;
  if (shift && value > (~0ULL >> shift)) return std::nullopt;
  return static_cast<std::size_t>(value << shift);
}

namespace {

void resolve_timeout(Config& c, const Options& options) {
  if (options.timeout) {
    c.timeout = *options.timeout;
  } else if (auto s = env_int("LOOM_TIMEOUT", 1, 7 * 24 * 3600)) {
    c.timeout = std::chrono::seconds(*s);
  }
}

// What a rank needs to find its peers' key space and be let in, read as resolve() reads it: the
// secret, the launcher's attempt and name for it, the cores.
void resolve_identity(Config& c, const Options& options, int world_size) {
  c.link.secret = options.secret ? *options.secret : job_secret();
  // A launcher that restarts workers numbers its attempts; each gets key spaces of its own.
  if (auto n = env_int("LOOM_RESTART_COUNT", 0, 1 << 30))
    c.failure.restart_count = static_cast<int>(*n);
  else if (auto t = env_int("TORCHELASTIC_RESTART_COUNT", 0, 1 << 30))
    c.failure.restart_count = static_cast<int>(*t);
  if (auto id = env_string("LOOM_WORKER_ID");
      id && id->find_first_of(" \t\n") == std::string::npos && id->size() < 128)
    c.failure.worker_id = *id;
  c.pacing.cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  c.pacing.set_local_world_size(world_size);
}

}  // namespace

Config Config::for_joining(const Options& options, int world_size) {
  Config c;
  try {
    resolve_timeout(c, options);
  } catch (const InvalidArgument&) {  // the default: resolve() raised it as this rank's error
  }
  resolve_identity(c, options, world_size);
  return c;
}

Config Config::resolve(const Options& options, int world_size) {
  Config c;
  resolve_timeout(c, options);
  resolve_identity(c, options, world_size);
  if (options.socket_ifname)
    c.link.socket_ifname = *options.socket_ifname;
  else if (auto s = env_string("LOOM_SOCKET_IFNAME"))
    c.link.socket_ifname = *s;
  if (options.sockets_per_peer)
    c.link.sockets_per_peer = *options.sockets_per_peer;
  else if (auto n = env_int("LOOM_NSOCKS", 1, 64))
    c.link.sockets_per_peer = static_cast<int>(*n);
  if (options.slots)
    c.link.slots = *options.slots;
  else if (auto n = env_int("LOOM_SLOTS", 2, 64))
    c.link.slots = static_cast<int>(*n);
  if (options.buffer_bytes) {
    c.link.buffer_bytes = *options.buffer_bytes;
  } else if (auto s = env_string("LOOM_BUFFSIZE")) {
    auto bytes = parse_size(*s);
    if (!bytes)
      throw InvalidArgument(fmt::format("configuration: LOOM_BUFFSIZE='{}' is not a size", *s));
    c.link.buffer_bytes = *bytes;
  }
  if (auto s = env_string("LOOM_CUDA_BUFFSIZE")) {
    auto bytes = parse_size(*s);
    if (!bytes || *bytes < static_cast<std::size_t>(c.link.slots) * 4096)
      throw InvalidArgument(
          fmt::format("configuration: LOOM_CUDA_BUFFSIZE='{}' is not a size of at least {} "
                      "pages (one per slot)",
                      *s, c.link.slots));
    c.link.cuda_buffer_bytes = *bytes;
  }
  if (auto s = env_string("LOOM_SOCKBUF")) {
    auto bytes = parse_size(*s);
    if (!bytes)
      throw InvalidArgument(fmt::format("configuration: LOOM_SOCKBUF='{}' is not a size", *s));
    c.link.socket_buffer_bytes = *bytes;
  }
  if (options.transport)
    c.transport = *options.transport;
  else if (auto t = env_string("LOOM_TRANSPORT"))
    c.transport = *t;
  else if (env_string("LOOM_SHM_DISABLE").value_or("0") == "1")
    c.transport = "tcp";
  if (c.transport != "auto" && c.transport != "tcp" && c.transport != "shm")
    throw InvalidArgument(
        fmt::format("configuration: transport '{}' is not auto, tcp or shm", c.transport));
  if (options.algorithm)
    c.selection.algorithm = *options.algorithm;
  else if (auto s = env_string("LOOM_ALGO"))
    c.selection.algorithm = *s;
  if (options.tuning_file)
    c.selection.tuning_file = *options.tuning_file;
  else if (auto s = env_string("LOOM_TUNE_FILE"))
    c.selection.tuning_file = *s;
  else
    c.selection.tuning_file = default_tuning_file();
  if (c.selection.tuning_file == "off") c.selection.tuning_file.clear();
  if (auto s = env_int("LOOM_STALL_WARN", 1, 7 * 24 * 3600))
    c.failure.stall_warn = std::chrono::seconds(*s);
  if (auto s = env_int("LOOM_HEARTBEAT_TIMEOUT", 0, 7 * 24 * 3600))
    c.failure.heartbeat_timeout = std::chrono::seconds(*s);

  c.link.check_limits();

  c.failure.left_out_dir = env_string("LOOM_LEFT_OUT_DIR").value_or("");
  if (auto n = env_int("LOOM_MIN_NODES", 0, 1 << 20)) c.failure.min_nodes = static_cast<int>(*n);
  if (auto n = env_int("LOOM_CUDA_IPC", 0, 1)) c.link.cuda_ipc = *n == 1;
  if (auto n = env_int("LOOM_CUDA_DIRECT", 0, 1)) c.selection.cuda_direct = *n == 1;
  if (auto n = env_int("LOOM_TRIALS", 0, 1)) c.selection.trials = *n == 1;
  if (auto n = env_int("LOOM_PROBE_US", 0, 1000000))
    c.selection.probe_budget = std::chrono::microseconds(*n);
  if (auto n = env_int("LOOM_SPIN_US", 0, 1000000))
    c.pacing.spin_us = static_cast<int>(*n), c.pacing.spin_us_set = true;
  if (auto n = env_int("LOCAL_WORLD_SIZE", 1, 1 << 20)) {
    c.pacing.set_local_world_size(static_cast<int>(*n));
    c.pacing.local_world_size_given = true;
  }
  return c;
}

void LinkConfig::check_limits() const {
  if (sockets_per_peer < 1 || sockets_per_peer > 64)
    throw InvalidArgument(
        fmt::format("configuration: sockets per peer {} not in [1, 64]", sockets_per_peer));
  if (slots < 2 || slots > 64)
    throw InvalidArgument(fmt::format("configuration: slots {} not in [2, 64]", slots));
  if (slot_bytes() < 4096 || buffer_bytes > (1ull << 30))
    throw InvalidArgument(
        fmt::format("configuration: buffer of {} bytes over {} slots: each slot needs at least 4 "
                    "KiB, the buffer at most 1 GiB",
                    buffer_bytes, slots));
}

Config Config::for_child(const Options& options) const {
  auto refuse = [](const char* field) {
    return InvalidArgument(
        fmt::format("Options::{} cannot change in a child (it keeps its parent's)", field));
  };
  if (options.transport) throw refuse("transport");
  if (options.socket_ifname) throw refuse("socket_ifname");
  if (options.secret) throw refuse("secret");
  if (options.tuning_file) throw refuse("tuning_file");
  if (options.store_prefix != Options{}.store_prefix) throw refuse("store_prefix");
  Config c = *this;
  if (options.timeout) {
    if (options.timeout->count() <= 0)
      throw InvalidArgument(
          fmt::format("Options::timeout {} ms is not positive", options.timeout->count()));
    c.timeout = *options.timeout;
  }
  if (options.algorithm) c.selection.algorithm = *options.algorithm;
  if (options.sockets_per_peer) c.link.sockets_per_peer = *options.sockets_per_peer;
  if (options.slots) c.link.slots = *options.slots;
  if (options.buffer_bytes) c.link.buffer_bytes = *options.buffer_bytes;
  c.link.check_limits();
  return c;
}

std::string default_tuning_file() {
  if (auto cache = env_string("XDG_CACHE_HOME"); cache && !cache->empty())
    return *cache + "/loom/tune.txt";
  if (auto home = env_string("HOME"); home && !home->empty())
    return *home + "/.cache/loom/tune.txt";
  return {};
}

void Pacing::set_local_world_size(int ranks_on_host) {
  local_world_size = ranks_on_host;
  // Spinning only pays while every rank has a core; oversubscribed ranks yield and block sooner.
  oversubscribed = local_world_size > cores;
  background_oversubscribed = 2 * local_world_size > cores;
  if (!spin_us_set) spin_us = oversubscribed ? 20 : 200;
}

}  // namespace loom::base
