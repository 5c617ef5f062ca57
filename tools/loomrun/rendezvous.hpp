// loomrun's dynamic rendezvous: nodes meet in a store, agree on rounds of membership (who is in,
// in which order, at which restart count) and on when a round ends. The store is hosted by the
// node whose address the endpoint names; when it is lost, the surviving nodes take it over in an
// order agreed at the last round (the first that is alive hosts it), and carry on.
//
// A round: nodes join it (an arrival counter), it closes when MAX nodes have joined or, once MIN
// have, after the last-call window; its members run workers until its outcome is recorded
// (a failure, a lost node, or nodes waiting to join a job below MAX), then join the next one.
// Nodes that arrive while a round runs wait for the next; the running ones let them in at once.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loom/store.hpp"

namespace loomrun {

struct RendezvousConfig {
  std::string run_id;
  int min_nodes = 1, max_nodes = 1;
  std::string endpoint_host;
  int endpoint_port = 29400;  // 0: a free port (standalone)
  std::string local_addr;     // empty: the address facing the endpoint
  int nproc = 1;
  std::chrono::milliseconds join_timeout{600000}, last_call_timeout{30000},
      keep_alive_timeout{30000}, read_timeout{30000}, exit_barrier_timeout{300000};
  std::chrono::milliseconds poll_interval{100};
  std::string secret;
  // Whether loomrun was told to stop (SIGINT, SIGTERM, SIGHUP): every wait checks it, so that a
  // node waiting for others that never come leaves when asked, not at join_timeout.
  std::function<bool()> stop_requested;
};

struct Member {
  std::string addr;
  int nproc = 0;
  std::string host;
};

struct Round {
  std::int64_t number = 0;
  int restart_count = 0;  // failures so far in the run, agreed by every node
  int group_rank = 0;
  std::vector<Member> members;  // by group rank
  int group_world_size() const { return static_cast<int>(members.size()); }
  int world_size() const;
  int first_rank() const;  // this node's first global rank
};

// Why a round ended, for this node.
enum class RoundEnd { running, failed, membership, store_lost };

// The rendezvous could not go on: a join timed out, restarts are spent, or no store is left.
class RendezvousError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// loomrun was told to stop while it waited at the rendezvous (RendezvousConfig::stop_requested).
class RendezvousStopped : public RendezvousError {
 public:
  using RendezvousError::RendezvousError;
};

class Rendezvous {
 public:
  explicit Rendezvous(RendezvousConfig config);
  ~Rendezvous();

  // Joins the next round and returns once it has closed with this node in it. Raises
  // RendezvousError when the join times out or the round's restart count exceeds max_restarts.
  Round next_round(int max_restarts);

  // The workers' store of a round: group rank 0 hosts one and publishes its address.
  void publish_master(const Round& round, const std::string& addr, int port);
  std::pair<std::string, int> master(const Round& round);

  // One monitoring step while the round's workers run: heartbeats, and whether the round ended
  // (its outcome recorded by any node, nodes waiting, a node silent too long, the store lost).
  RoundEnd poll(const Round& round);
  // Records that this node's workers failed (or it was stopped): the others restart. False when
  // the round had already ended to let waiting nodes in (the workers failed as it was stopped).
  bool record_failure(const Round& round, const std::string& why);
  // This node's workers finished: waits (bounded) for the others to finish too, keeping up its
  // heartbeat and the store it may host.
  // Every wait here raises RendezvousStopped once stop_requested says so.
  void finish(const Round& round);

  const std::string& local_addr() const { return local_addr_; }
  const std::string& store_endpoint() const { return store_host_; }
  int store_port() const { return store_port_; }
  bool hosting() const { return server_ != nullptr; }

 private:
  struct StoreLost {};
  template <typename F>
  auto guarded(F&& f) -> decltype(f(std::declval<loom::Store&>()));
  void require_store_reachable() const;
  // Raises RendezvousStopped, naming what this node was waiting for, when it was told to stop.
  void stop_if_requested(const char* waiting_for) const;
  void connect_initial();
  void take_over();
  bool try_host(const std::string& addr, int port);
  bool try_join(const std::string& addr, int port, std::chrono::milliseconds timeout);
  void seed();
  std::optional<Round> join_round(std::int64_t round, int max_restarts);
  int wait_until_closed(std::int64_t round);
  std::int64_t current_round();
  std::string info_line() const;
  // Whether member g's heartbeat has not moved for keep_alive_timeout (reads it once).
  bool heartbeat_stopped(const Round& round, int g, std::chrono::steady_clock::time_point now);

  RendezvousConfig config_;
  std::string local_addr_, hostname_;
  std::shared_ptr<loom::Store> store_;
  std::unique_ptr<loom::StoreServer> server_;
  std::string store_host_;
  int store_port_ = 0;
  // Who takes the store over, in order, when it is lost: the last round's members.
  std::vector<std::string> successors_;
  std::int64_t last_round_ = 0;  // the last round this node was a member of
  int last_restarts_ = 0;        // its restart count
  int last_group_rank_ = -1;
  bool last_failed_ = false;  // it ended in a failure
  // Heartbeats of the other members: last value seen and when it changed.
  std::vector<std::int64_t> beats_;
  std::vector<std::chrono::steady_clock::time_point> beat_changed_;
  std::chrono::steady_clock::time_point next_beat_;
  std::chrono::steady_clock::time_point next_probe_;  // poll()'s next look at the store's host
};

}  // namespace loomrun
