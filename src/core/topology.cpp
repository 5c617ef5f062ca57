#include "core/topology.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "base/config.hpp"
#include "base/process_memory.hpp"
#include "store/keys.hpp"

namespace loom::core {
namespace {

std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string namespace_id(const char* path) {
  char buf[128] = {0};
  ssize_t n = ::readlink(path, buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "";
}

}  // namespace

std::string local_host_id() {
  if (auto id = base::env_string("LOOM_HOST_ID")) return *id;
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  // The pid namespace too: pids are compared across ranks of one host (liveness, the launcher's
  // left-out list), which only works within one.
  return fmt::format("{}|{}|{}|{}|{}", host, read_first_line("/proc/sys/kernel/random/boot_id"),
                     namespace_id("/proc/self/ns/net"), namespace_id("/proc/self/ns/mnt"),
                     namespace_id("/proc/self/ns/pid"));
}

std::string pid_namespace() {
  const std::string ns = namespace_id("/proc/self/ns/pid");
  return ns.empty() ? "-" : ns;
}

bool Topology::any_host_oversubscribed() const {
  for (std::size_t r = 0; r < host_of_rank.size(); ++r)
    if (ranks_on_host_of(static_cast<int>(r)) > cores_of_rank[r]) return true;
  return false;
}

int Topology::ranks_per_core() const {
  int most = 1;
  for (std::size_t r = 0; r < host_of_rank.size(); ++r) {
    const int cores = std::max(1, cores_of_rank[r]);
    most = std::max(most, (ranks_on_host_of(static_cast<int>(r)) + cores - 1) / cores);
  }
  return most;
}

int Topology::fewest_cores() const {
  int fewest = 0;
  for (const int cores : cores_of_rank)
    if (cores > 0 && (fewest == 0 || cores < fewest)) fewest = cores;
  return fewest;
}

int Topology::ranks_on_host_of(int rank) const {
  int n = 0;
  for (const auto& h : host_of_rank) n += h == host_of_rank[rank];
  return n;
}

std::vector<std::vector<int>> Topology::ranks_by_host() const {
  std::vector<std::vector<int>> hosts;
  std::map<std::string, std::size_t> index;
  for (std::size_t r = 0; r < host_of_rank.size(); ++r) {
    auto [it, added] = index.emplace(host_of_rank[r], hosts.size());
    if (added) hosts.emplace_back();
    hosts[it->second].push_back(static_cast<int>(r));
  }
  return hosts;
}

std::string Topology::describe() const {
  std::map<std::string, std::vector<int>> by_host;
  for (std::size_t r = 0; r < host_of_rank.size(); ++r)
    by_host[host_of_rank[r]].push_back(static_cast<int>(r));
  std::vector<std::string> parts;
  for (const auto& [host, ranks] : by_host)
    parts.push_back(
        fmt::format("{} ranks {}", host.substr(0, host.find('|')), fmt::join(ranks, ",")));
  return fmt::format("{} host(s): {}", by_host.size(), fmt::join(parts, "; "));
}

Topology Topology::of_ranks(const std::vector<int>& ranks) const {
  Topology t;
  for (int r : ranks) {
    const auto i = static_cast<std::size_t>(r);
    t.host_of_rank.push_back(host_of_rank[i]);
    t.pid_of_rank.push_back(pid_of_rank[i]);
    t.worker_id_of_rank.push_back(worker_id_of_rank[i]);
    t.cores_of_rank.push_back(cores_of_rank[i]);
    t.rdma_of_rank.push_back(rdma_of_rank[i]);
    t.reads_peers_of_rank.push_back(reads_peers_of_rank[i]);
    t.rates_of_rank.push_back(rates_of_rank[i]);
    t.settings_of_rank.push_back(settings_of_rank[i]);
  }
  t.tuning_from = tuning_from;
  t.tuning = tuning;
  return t;
}

algorithms::MachineRates Topology::machine_rates() const {
  std::map<std::string, algorithms::MachineRates> best_of_host;
  for (std::size_t r = 0; r < host_of_rank.size(); ++r) {
    auto [it, added] = best_of_host.emplace(host_of_rank[r], rates_of_rank[r]);
    if (!added) it->second = algorithms::MachineRates::better(it->second, rates_of_rank[r]);
  }
  std::optional<algorithms::MachineRates> worst;
  for (const auto& [host, rates] : best_of_host)
    worst = worst ? algorithms::MachineRates::worse(*worst, rates) : rates;
  return worst.value_or(algorithms::MachineRates{});
}

void add_topology_record(Topology& t, int r, const std::string& v, const std::string& pid_ns) {
  auto nl = v.find('\n');
  if (nl == std::string::npos)
    throw StoreError(fmt::format("init: malformed topology record of rank {}", r));
  int pid = 0, cores = 0, reads_peers = 0;
  char port[128] = {0}, worker[128] = "-", their_ns[128] = "-";
  const int fields = std::sscanf(v.substr(0, nl).c_str(), "%d %d %127s %d %127s %127s", &pid,
                                 &cores, port, &reads_peers, worker, their_ns);
  if (fields < 4 || cores < 1 || pid < 0)
    throw StoreError(fmt::format("init: malformed topology record of rank {}", r));
  // A pid of another pid namespace names another process here (LOOM_HOST_ID may join
  // containers into one host): 0, which no liveness check reads.
  t.pid_of_rank.push_back(their_ns == pid_ns ? pid : 0);
  t.worker_id_of_rank.push_back(worker);
  t.cores_of_rank.push_back(cores);
  t.rdma_of_rank.push_back(port);
  t.reads_peers_of_rank.push_back(reads_peers == 1);
  const auto rates_line = v.find('\n', nl + 1);
  t.host_of_rank.push_back(v.substr(nl + 1, rates_line - (nl + 1)));
  const auto settings_line =
      rates_line == std::string::npos ? std::string::npos : v.find('\n', rates_line + 1);
  t.rates_of_rank.push_back(rates_line == std::string::npos
                                ? algorithms::MachineRates{}
                                : algorithms::MachineRates::decode(
                                      v.substr(rates_line + 1, settings_line - (rates_line + 1))));
  const auto tuning_line =
      settings_line == std::string::npos ? std::string::npos : v.find('\n', settings_line + 1);
  t.settings_of_rank.push_back(
      settings_line == std::string::npos
          ? std::string()
          : v.substr(settings_line + 1, tuning_line - (settings_line + 1)));
  if (r == 0 && tuning_line != std::string::npos) {
    // The table's path, then its entries for rank 0's machine, a line each.
    std::istringstream lines(v.substr(tuning_line + 1));
    std::getline(lines, t.tuning_from);
    for (std::string line; std::getline(lines, line);)
      if (auto e = TuningEntry::parse(line)) t.tuning.push_back(std::move(*e));
  }
}

void publish_topology_record(Store& store, int rank, const std::string& worker_id,
                             const std::string& rdma, const algorithms::MachineRates& rates,
                             const std::string& tuning_from, const std::string& settings) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  std::string record = fmt::format(
      "{} {} {} {} {} {}\n{}\n{}\n{}", ::getpid(), cores, rdma.empty() ? "-" : rdma,
      base::cross_memory_attach_available() ? 1 : 0, worker_id.empty() ? "-" : worker_id,
      pid_namespace(), local_host_id(), rates.encode(), settings);
  if (rank == 0 && !tuning_from.empty()) {
    // Only this machine's entries travel: the others can never match this job.
    const MachineKey here = this_machine();
    record += fmt::format("\n{}", tuning_from);
    for (const TuningEntry& e : read_tuning_table(tuning_from))
      if (e.machine == here) record += fmt::format("\n{}", e.line());
  }
  store.set(store::keys::topology(rank), record);
}

Topology exchange_topology(Store& store, int rank, int size, std::chrono::milliseconds timeout,
                           const std::string& worker_id, const std::string& rdma,
                           const algorithms::MachineRates& rates, const std::string& tuning_from,
                           const std::string& settings) {
  const std::string pid_ns = pid_namespace();
  publish_topology_record(store, rank, worker_id, rdma, rates, tuning_from, settings);
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(store::keys::topology(r));
  try {
    store.wait(keys, timeout);
  } catch (const TimeoutError&) {
    std::vector<int> missing;
    const auto present = store.check(keys);
    for (int r = 0; r < size; ++r)
      if (!present[static_cast<std::size_t>(r)]) missing.push_back(r);
    throw TimeoutError(fmt::format(
        "init: rank {} timed out after {} s waiting for rank(s) {} to join (world size {})", rank,
        static_cast<double>(timeout.count()) / 1000.0, fmt::join(missing, ", "), size));
  }
  Topology t;
  for (int r = 0; r < size; ++r)
    add_topology_record(t, r, store.get_string(store::keys::topology(r), timeout), pid_ns);
  return t;
}

}  // namespace loom::core
