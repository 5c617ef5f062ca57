// Which attempt the nodes of a static launch run (--max-restarts). Each node's loomrun restarts
// its own workers, and each attempt's workers meet in a key space of their own: a node whose
// workers failed fast, twice, ran ahead for good, its workers waiting in one attempt while the
// others' waited in another until LOOM_TIMEOUT, in turn, until every restart was spent. Node
// 0's store keeps the highest attempt any node has entered; every node runs that one.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "loom/store.hpp"

namespace loomrun {

class StaticAttempts {
 public:
  // The store at host:port (node 0's), with the job secret of the environment.
  StaticAttempts(const std::string& host, std::uint16_t port);
  // The attempt to start with: the highest entered so far (0 for a new job).
  int first();
  // After this node's attempt `failed` failed (or was stopped): the attempt to run next, at least
  // failed + 1 (another node may be further on already).
  int after(int failed);
  // Whether another node has entered an attempt past `attempt`; looks at the store at most once
  // per `interval` (false in between, and while the store does not answer).
  bool passed(int attempt, std::chrono::milliseconds interval);

 private:
  int read();
  std::shared_ptr<loom::Store> store_;
  std::chrono::steady_clock::time_point next_look_{};
};

}  // namespace loomrun
