#include "rendezvous.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "base/local_address.hpp"
#include "node_line.hpp"
#include "store/keys.hpp"

namespace loomrun {
namespace keys = loom::store::keys;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

constexpr auto kHeartbeatEvery = 1s;
constexpr auto kProbeEvery = 1s;    // poll()'s probes of the store's host
constexpr auto kProbeTimeout = 3s;  // a store that accepts no connection this long is lost
// How long an agent at the lost host's address may take to notice the loss and serve the store:
// a probe's interval and timeout to notice, against the other node's own noticing as early as a
// probe's timeout, and the hosting, with a second of each to spare on a loaded host (7 s split
// the store in two under load: the other node took over beside the sibling).
constexpr auto kSiblingWait = 2 * kProbeTimeout + 2 * kProbeEvery + 2 * kHeartbeatEvery;

loom::Bytes bytes(const std::string& s) {
  return loom::Bytes(s.begin(), s.end());
}
std::string text(const loom::Bytes& b) {
  return std::string(b.begin(), b.end());
}
// The value of key after setting it to `value` unless it had one: the first writer wins.
std::string settle(loom::Store& store, const std::string& key, const std::string& value) {
  return text(store.compare_set(key, {}, bytes(value)));
}
bool exists(loom::Store& store, const std::string& key) {
  return store.check({key}).at(0);
}
long long to_int(const std::string& s, const std::string& what) {
  try {
    return std::stoll(s);
  } catch (const std::exception&) {
    throw RendezvousError(fmt::format("rendezvous: {} is '{}', not a number", what, s));
  }
}

// The address this host uses to reach `host` (a UDP socket's source after connect: no packet).
std::string address_facing(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), "9", &hints, &found) != 0 || found == nullptr)
    throw RendezvousError(fmt::format("rendezvous: cannot resolve the endpoint host '{}'", host));
  std::string result;
  const int fd = ::socket(found->ai_family, SOCK_DGRAM, 0);
  sockaddr_storage local{};
  socklen_t len = sizeof(local);
  if (fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
    char buf[INET6_ADDRSTRLEN] = {};
    const void* a =
        local.ss_family == AF_INET
            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr)
            : &reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr;
    if (::inet_ntop(local.ss_family, a, buf, sizeof(buf))) result = buf;
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(found);
  if (result.empty())
    throw RendezvousError(
        fmt::format("rendezvous: no route to the endpoint host '{}' (give --local-addr)", host));
  return result;
}

std::string this_hostname() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "?";
  return name;
}

}  // namespace

int Round::world_size() const {
  return std::accumulate(members.begin(), members.end(), 0,
                         [](int sum, const Member& m) { return sum + m.nproc; });
}
int Round::first_rank() const {
  int first = 0;
  for (int g = 0; g < group_rank; ++g) first += members[static_cast<std::size_t>(g)].nproc;
  return first;
}

Rendezvous::Rendezvous(RendezvousConfig config)
    : config_(std::move(config)), hostname_(this_hostname()) {
  local_addr_ =
      config_.local_addr.empty() ? address_facing(config_.endpoint_host) : config_.local_addr;
  connect_initial();
}

Rendezvous::~Rendezvous() = default;

// A store that no longer accepts connections is lost: a call on it would first try to reconnect
// for the store client's minute.
void Rendezvous::require_store_reachable() const {
  if (server_) return;
  try {
    loom::TcpStore probe(store_host_, static_cast<std::uint16_t>(store_port_), kProbeTimeout);
  } catch (const loom::Error&) {
    throw StoreLost{};
  }
}

void Rendezvous::stop_if_requested(const char* waiting_for) const {
  if (config_.stop_requested && config_.stop_requested())
    throw RendezvousStopped(fmt::format("stopped while waiting for {}", waiting_for));
}

template <typename F>
auto Rendezvous::guarded(F&& f) -> decltype(f(std::declval<loom::Store&>())) {
  if (!store_) throw StoreLost{};
  try {
    return f(*store_);
  } catch (const loom::Error&) {
    throw StoreLost{};
  }
}

bool Rendezvous::try_host(const std::string& addr, int port) {
  try {
    server_ = std::make_unique<loom::StoreServer>(addr, static_cast<std::uint16_t>(port));
  } catch (const std::exception&) {
    return false;  // another agent of this host serves it, or the port is taken
  }
  store_host_ = addr;
  store_port_ = server_->port();
  store_ = std::make_shared<loom::TcpStore>(addr, static_cast<std::uint16_t>(store_port_),
                                            config_.read_timeout);
  seed();
  return true;
}

bool Rendezvous::try_join(const std::string& addr, int port, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  try {
    // Connecting in tries of a second at most, so that a stop is seen between them; a request
    // to a host that went silent gives up after read_timeout (torchrun's meaning of it), not the
    // client's minute.
    std::shared_ptr<loom::TcpStore> store;
    while (!store) {
      stop_if_requested("the rendezvous store to answer");
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      try {
        store =
            std::make_shared<loom::TcpStore>(addr, static_cast<std::uint16_t>(port),
                                             std::clamp<std::chrono::milliseconds>(left, 1ms, 1s),
                                             std::nullopt, config_.read_timeout);
      } catch (const loom::Error&) {
        if (Clock::now() >= deadline) throw;
      }
    }
    // A store taken over is usable once its new host has written what it knows.
    while (!exists(*store, keys::rendezvous_seeded(config_.run_id))) {
      stop_if_requested("the rendezvous store to be ready");
      if (Clock::now() > deadline) return false;
      std::this_thread::sleep_for(config_.poll_interval);
    }
    // Calls go on a connection whose refused reconnection fails at once: a host that dies between
    // poll()'s probes is then lost at the next call, not after read_timeout of retries (the other
    // nodes would take the store over without this one).
    store_ = store->clone_bounded(config_.read_timeout);
  } catch (const loom::Error&) {
    return false;
  }
  store_host_ = addr;
  store_port_ = port;
  return true;
}

void Rendezvous::seed() {
  const std::string& run = config_.run_id;
  if (last_round_ > 0) {  // taking over: the round that lost the store ended in a failure
    settle(*store_, keys::rendezvous_outcome(run, last_round_),
           "failed: the rendezvous store was lost");
    settle(*store_, keys::rendezvous_restarts(run, last_round_ + 1),
           std::to_string(last_restarts_ + 1));
    settle(*store_, keys::rendezvous_round(run), std::to_string(last_round_ + 1));
  }
  store_->set(keys::rendezvous_seeded(run), std::string("1"));
}

void Rendezvous::connect_initial() {
  const std::string& host = config_.endpoint_host;
  if ((config_.endpoint_port == 0 || loom::base::is_local_address(host).value_or(false)) &&
      try_host(host, config_.endpoint_port))
    return;
  const auto deadline = Clock::now() + config_.join_timeout;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left <= 0ms) break;
    if (try_join(host, config_.endpoint_port, std::min(left, config_.read_timeout))) return;
    std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(left, 1s));
  }
  throw RendezvousError(
      fmt::format("rendezvous: no store answered at {}:{} within join_timeout ({} s)", host,
                  config_.endpoint_port, config_.join_timeout.count() / 1000));
}

void Rendezvous::take_over() {
  const std::string lost = fmt::format("{}:{}", store_host_, store_port_);
  const std::string lost_host = store_host_;
  store_.reset();
  const int port = store_port_;
  while (!successors_.empty()) {
    stop_if_requested("a node to take the lost rendezvous store over");
    const std::string next = successors_.front();
    successors_.erase(successors_.begin());
    // At the lost host's address (or this node's own, where hosting failed) another agent serves
    // the store once it notices the loss, or nobody does: the whole machine is gone. Waiting the
    // read timeout there would delay every takeover after it.
    const auto wait = next == lost_host || next == local_addr_
                          ? std::min<std::chrono::milliseconds>(config_.read_timeout, kSiblingWait)
                          : config_.read_timeout;
    if (next == local_addr_) {
      if (try_host(next, port)) {
        std::fprintf(stderr,
                     "loomrun: the rendezvous store at %s is lost; this node (%s) "
                     "took it over on port %d\n",
                     lost.c_str(), next.c_str(), port);
        return;
      }
      // Another agent at this address may have taken it first: join it there.
    }
    if (try_join(next, port, wait)) {
      std::fprintf(stderr, "loomrun: the rendezvous store at %s is lost; %s:%d took it over\n",
                   lost.c_str(), next.c_str(), port);
      return;
    }
  }
  throw RendezvousError(
      fmt::format("rendezvous: the store at {} is lost and no surviving node took it over", lost));
}

std::int64_t Rendezvous::current_round() {
  return guarded([&](loom::Store& s) {
    return to_int(settle(s, keys::rendezvous_round(config_.run_id), "1"), "the round");
  });
}

std::string Rendezvous::info_line() const {
  return format_node(
      NodeLine{Member{local_addr_, config_.nproc, hostname_}, last_round_, last_group_rank_});
}

Round Rendezvous::next_round(int max_restarts) {
  const auto deadline = Clock::now() + config_.join_timeout;
  for (;;) {
    stop_if_requested("a round to take this node in");
    if (Clock::now() > deadline)
      throw RendezvousError(fmt::format(
          "rendezvous: no round of run '{}' took this node in within join_timeout ({} s; "
          "--nnodes {}:{})",
          config_.run_id, config_.join_timeout.count() / 1000, config_.min_nodes,
          config_.max_nodes));
    try {
      if (store_) require_store_reachable();
      std::int64_t round = current_round();
      if (last_round_ >= round) {
        guarded([&](loom::Store& s) {
          s.compare_set(keys::rendezvous_round(config_.run_id), bytes(std::to_string(round)),
                        bytes(std::to_string(last_round_ + 1)));
        });
        round = last_round_ + 1;
      }
      if (auto joined = join_round(round, max_restarts)) return *joined;
    } catch (const StoreLost&) {
      take_over();
    }
  }
}

// Waits for round `round` to close and returns its size: any node may close it, the first to do
// so decides the size.
int Rendezvous::wait_until_closed(std::int64_t round) {
  const std::string& run = config_.run_id;
  std::optional<Clock::time_point> enough_since;
  const auto deadline = Clock::now() + config_.join_timeout;
  for (;;) {
    const auto closed_key = keys::rendezvous_closed(run, round);
    if (guarded([&](loom::Store& s) { return exists(s, closed_key); })) {
      return static_cast<int>(to_int(
          guarded([&](loom::Store& s) { return text(s.get(closed_key, config_.read_timeout)); }),
          "the round's size"));
    }
    // While the previous round runs, nodes that arrive wait for its members.
    const bool may_close = round == 1 || guarded([&](loom::Store& s) {
                             return exists(s, keys::rendezvous_outcome(run, round - 1));
                           });
    const auto count =
        guarded([&](loom::Store& s) { return s.add(keys::rendezvous_joined(run, round), 0); });
    if (may_close && count >= config_.min_nodes) {
      if (!enough_since) enough_since = Clock::now();
      if (count >= config_.max_nodes || Clock::now() - *enough_since >= config_.last_call_timeout)
        guarded([&](loom::Store& s) {
          settle(s, closed_key, std::to_string(std::min<long long>(count, config_.max_nodes)));
        });
    } else if (Clock::now() > deadline) {
      throw RendezvousError(fmt::format(
          "rendezvous: round {} of run '{}' did not close within join_timeout ({} of {}:{} nodes "
          "joined)",
          round, run, count, config_.min_nodes, config_.max_nodes));
    }
    stop_if_requested("the round to close");
    std::this_thread::sleep_for(config_.poll_interval);
  }
}

std::optional<Round> Rendezvous::join_round(std::int64_t round, int max_restarts) {
  const std::string& run = config_.run_id;
  const bool continuing = last_round_ > 0 && last_round_ == round - 1;
  // The members of the previous round settle this one's restart count before joining it: a
  // failure counts, letting waiting nodes in does not.
  if (continuing) {
    const std::string outcome = guarded([&](loom::Store& s) {
      return settle(s, keys::rendezvous_outcome(run, round - 1),
                    last_failed_ ? "failed" : "membership: nodes waiting");
    });
    const int restarts = last_restarts_ + (outcome.rfind("failed", 0) == 0 ? 1 : 0);
    guarded([&](loom::Store& s) {
      settle(s, keys::rendezvous_restarts(run, round), std::to_string(restarts));
    });
  } else if (round == 1) {
    guarded([&](loom::Store& s) { settle(s, keys::rendezvous_restarts(run, 1), "0"); });
  }
  auto restarts_of_round = [&] {
    const auto until = Clock::now() + config_.read_timeout;
    for (;;) {
      const auto key = keys::rendezvous_restarts(run, round);
      if (guarded([&](loom::Store& s) { return exists(s, key); }))
        return static_cast<int>(
            to_int(guarded([&](loom::Store& s) { return text(s.get(key, config_.read_timeout)); }),
                   "the restart count"));
      if (Clock::now() > until)
        throw RendezvousError(fmt::format(
            "rendezvous: round {} of run '{}' has no restart count: no node of the previous "
            "round is left",
            round, run));
      stop_if_requested("the round's restart count");
      std::this_thread::sleep_for(config_.poll_interval);
    }
  };
  if (continuing && restarts_of_round() > max_restarts)
    throw RendezvousError(fmt::format("restarts spent ({})", max_restarts));

  const int arrival = static_cast<int>(
      guarded([&](loom::Store& s) { return s.add(keys::rendezvous_joined(run, round), 1); }) - 1);
  guarded([&](loom::Store& s) { s.set(keys::rendezvous_node(run, round, arrival), info_line()); });

  const int closed = wait_until_closed(round);
  if (arrival >= closed) {  // too late for this round: wait for the next
    guarded([&](loom::Store& s) {
      s.compare_set(keys::rendezvous_round(run), bytes(std::to_string(round)),
                    bytes(std::to_string(round + 1)));
    });
    return std::nullopt;
  }

  std::vector<NodeLine> nodes;
  for (int i = 0; i < closed; ++i)
    nodes.push_back(parse_node(guarded([&](loom::Store& s) {
      return text(s.get(keys::rendezvous_node(run, round, i), config_.read_timeout));
    })));
  // Nodes keep their order from the previous round; newcomers follow in order of arrival.
  std::vector<int> order(static_cast<std::size_t>(closed));
  std::iota(order.begin(), order.end(), 0);
  auto previous_rank = [&](int i) {
    const NodeLine& n = nodes[static_cast<std::size_t>(i)];
    return n.previous_round == round - 1 ? n.previous_group_rank : -1;
  };
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    const int pa = previous_rank(a), pb = previous_rank(b);
    if ((pa < 0) != (pb < 0)) return pa >= 0;
    return pa < pb;
  });
  Round r;
  r.number = round;
  r.restart_count = restarts_of_round();
  if (r.restart_count > max_restarts)
    throw RendezvousError(fmt::format("restarts spent ({})", max_restarts));
  for (std::size_t g = 0; g < order.size(); ++g) {
    r.members.push_back(nodes[static_cast<std::size_t>(order[g])].member);
    if (order[g] == arrival) r.group_rank = static_cast<int>(g);
  }
  // The store's successors: the members' addresses in group-rank order. The present host's is
  // left out unless another member shares it (agents of one machine): one of those takes the
  // store over at the same endpoint, where newcomers will look for it.
  const auto at_host = std::count_if(r.members.begin(), r.members.end(),
                                     [&](const Member& m) { return m.addr == store_host_; });
  successors_.clear();
  for (const Member& m : r.members)
    if ((m.addr != store_host_ || at_host > 1) &&
        std::find(successors_.begin(), successors_.end(), m.addr) == successors_.end())
      successors_.push_back(m.addr);
  last_round_ = round;
  last_restarts_ = r.restart_count;
  last_group_rank_ = r.group_rank;
  last_failed_ = false;
  beats_.assign(r.members.size(), -1);
  beat_changed_.assign(r.members.size(), Clock::now());
  next_beat_ = Clock::now();
  return r;
}

void Rendezvous::publish_master(const Round& round, const std::string& addr, int port) {
  try {
    guarded([&](loom::Store& s) {
      s.set(keys::rendezvous_master(config_.run_id, round.number),
            fmt::format("{} {}", addr, port));
    });
  } catch (const StoreLost&) {
    last_failed_ = true;  // the workers cannot meet; poll reports the loss
  }
}

std::pair<std::string, int> Rendezvous::master(const Round& round) {
  try {
    const std::string line = guarded([&](loom::Store& s) {
      return text(
          s.get(keys::rendezvous_master(config_.run_id, round.number), config_.read_timeout));
    });
    std::istringstream in(line);
    std::pair<std::string, int> at;
    in >> at.first >> at.second;
    if (in) return at;
  } catch (const StoreLost&) {
  }
  return {"", 0};
}

RoundEnd Rendezvous::poll(const Round& round) {
  const std::string& run = config_.run_id;
  try {
    const auto now = Clock::now();
    // Once a second at most, and the probe first. The store's host may be gone, which a new
    // connection tells within seconds (each is a connection and an authentication: at every
    // --monitor-interval, 10 a second per node, hundreds of nodes would fill the server's
    // admission). A call on the store's own connection made between probes would, once the host
    // is gone, try to reconnect for the read timeout (30 s) before the loss is seen: the other
    // nodes then took the store over without this one.
    if (now < next_probe_) return RoundEnd::running;
    next_probe_ = now + kProbeEvery;
    require_store_reachable();
    if (now >= next_beat_) {
      next_beat_ = now + kHeartbeatEvery;
      guarded([&](loom::Store& s) {
        s.add(keys::rendezvous_heartbeat(run, round.number, round.group_rank), 1);
      });
      for (int g = 0; g < round.group_world_size(); ++g) {
        if (g == round.group_rank) continue;
        if (heartbeat_stopped(round, g, now)) {
          const Member& m = round.members[static_cast<std::size_t>(g)];
          record_failure(
              round, fmt::format("node {} ({}, {}) sent no heartbeat for {} s", g, m.host, m.addr,
                                 config_.keep_alive_timeout.count() / 1000));
          return RoundEnd::failed;
        }
      }
    }
    const auto outcome_key = keys::rendezvous_outcome(run, round.number);
    auto present = guarded([&](loom::Store& s) {
      return s.check({outcome_key, keys::rendezvous_joined(run, round.number + 1)});
    });
    if (!present.at(0) && present.at(1) && round.group_world_size() < config_.max_nodes) {
      guarded([&](loom::Store& s) { settle(s, outcome_key, "membership: nodes waiting"); });
      present[0] = true;
    }
    if (!present.at(0)) return RoundEnd::running;
    const std::string outcome =
        guarded([&](loom::Store& s) { return text(s.get(outcome_key, config_.read_timeout)); });
    last_failed_ = outcome.rfind("failed", 0) == 0;
    return last_failed_ ? RoundEnd::failed : RoundEnd::membership;
  } catch (const StoreLost&) {
    last_failed_ = true;
    return RoundEnd::store_lost;
  }
}

bool Rendezvous::heartbeat_stopped(const Round& round, int g, Clock::time_point now) {
  const auto beat = guarded([&](loom::Store& s) {
    return s.add(keys::rendezvous_heartbeat(config_.run_id, round.number, g), 0);
  });
  auto& seen = beats_[static_cast<std::size_t>(g)];
  auto& changed = beat_changed_[static_cast<std::size_t>(g)];
  if (beat != seen) {
    seen = beat;
    changed = now;
    return false;
  }
  return now - changed > config_.keep_alive_timeout;
}

bool Rendezvous::record_failure(const Round& round, const std::string& why) {
  last_failed_ = true;
  try {
    require_store_reachable();
    const std::string outcome = guarded([&](loom::Store& s) {
      return settle(s, keys::rendezvous_outcome(config_.run_id, round.number), "failed: " + why);
    });
    last_failed_ = outcome.rfind("failed", 0) == 0;
  } catch (const StoreLost&) {
  }
  return last_failed_;
}

void Rendezvous::finish(const Round& round) {
  const std::string& run = config_.run_id;
  const int n = round.group_world_size();
  try {
    guarded([&](loom::Store& s) {
      s.set(keys::rendezvous_done(run, round.number, round.group_rank), std::string("1"));
    });
    std::vector<std::string> done;
    for (int g = 0; g < n; ++g) done.push_back(keys::rendezvous_done(run, round.number, g));
    done.push_back(keys::rendezvous_outcome(run, round.number));
    const auto deadline = Clock::now() + config_.exit_barrier_timeout;
    for (;;) {
      auto present = guarded([&](loom::Store& s) { return s.check(done); });
      // A node whose heartbeat stopped will never say it is done: lost while its workers went
      // on without it (--on-failure shrink), it is not waited for.
      const auto now = Clock::now();
      for (int g = 0; g < n; ++g) {
        const auto i = static_cast<std::size_t>(g);
        if (!present[i] && g != round.group_rank && heartbeat_stopped(round, g, now))
          present[i] = true;
      }
      const bool all_done =
          std::all_of(present.begin(), present.end() - 1, [](bool b) { return b; });
      if (all_done || present.back() || Clock::now() > deadline) break;
      stop_if_requested("the other nodes to finish (the exit barrier)");
      guarded([&](loom::Store& s) {
        s.add(keys::rendezvous_heartbeat(run, round.number, round.group_rank), 1);
      });
      std::this_thread::sleep_for(config_.poll_interval);
    }
    guarded([&](loom::Store& s) { s.add(keys::rendezvous_left(run, round.number), 1); });
    // The node that hosts the store keeps it until the others have seen the end (bounded).
    const auto until =
        Clock::now() + std::min<std::chrono::milliseconds>(config_.read_timeout, 10s);
    while (server_ && Clock::now() < until && guarded([&](loom::Store& s) {
                                                return s.add(
                                                    keys::rendezvous_left(run, round.number), 0);
                                              }) < n) {
      stop_if_requested("the other nodes to see the end");
      std::this_thread::sleep_for(config_.poll_interval);
    }
  } catch (const StoreLost&) {
  }
}

}  // namespace loomrun
