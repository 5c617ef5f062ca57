// How a communicator stops, in one part: the halt (whether it stopped, and the record of why),
// the health monitor that watches the other ranks, the publishing of a cause through the store so
// that every rank raises the same one, and the rule that the connections close only while the
// engine is idle. Its communicator gives it a way to name ranks and hosts and to close its
// connections; its call queue's lock tells it whether the engine is busy.
//
//   abort()           this rank's own abort: halts, and publishes when the engine is idle (else
//                     the running call fails at its next wait and publishes)
//   fail()            a call's failure: publishes or learns the cause, closes, raises it
//   engine_idle()     the queue's hook, under its lock: closes the connections after a halt
//   the monitor       another rank's record: halts as abort() does
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "algorithms/collective.hpp"
#include "base/abort_record.hpp"
#include "base/config.hpp"
#include "base/halt.hpp"
#include "core/call_queue.hpp"
#include "core/health_monitor.hpp"
#include "loom/loom.hpp"
#include "loom/store.hpp"

namespace loom::core {

class FailureProtocol {
 public:
  // What it needs of its communicator: its rank and size, how to name a rank ("rank 1 (rank 3
  // of the parent)") and its host, and how to close every connection at once.
  struct Member {
    int rank = 0;
    int size = 1;
    std::function<std::string(int)> who;
    std::function<std::string(int)> host_of;
    std::function<void()> close_connections;
  };
  explicit FailureProtocol(Member member) : m_(std::move(member)) {}
  FailureProtocol(const FailureProtocol&) = delete;
  FailureProtocol& operator=(const FailureProtocol&) = delete;

  // The communicator's key space in the store, and the monitor on a connection of its own (none
  // when the store cannot open a second one: failures then still reach each rank through its
  // connections). The monitor's records halt through `queue`'s lock.
  void start(std::shared_ptr<Store> store, const base::FailureConfig& config, CallQueue& queue);
  // Shutdown: the monitor says this rank left on purpose and stops.
  void stop_monitor() { monitor_.reset(); }

  // What the engine watches at every wait, and what a call made after a halt raises.
  const base::Halt& halt() const { return halt_; }
  // The rank the halt's record names as failed, or -1: none, or one that only aborted its own
  // communicator (a watchdog's abort before a shrink: alive, it joins like any other).
  int failed_rank(int size) const;
  // What the engine is doing, for the monitor's stall reports.
  Progress& progress() { return progress_; }

  // Which rank hosts the store (-1: a launcher does; -2: not known) and how to name it.
  void set_store_host(int rank, std::string where);
  int store_host_rank() const { return store_host_rank_; }
  const std::string& store_where() const { return store_where_; }

  // This rank's own abort(): a running call sees the halt at its next wait and fails.
  void abort(CallQueue& queue);
  // The one place the connections close on a halt (CallQueue::Runner::engine_idle).
  void engine_idle(bool closed);
  // A call's failure, `e` in flight: tells the other ranks (or learns what another told), closes
  // the connections so that no peer waits on this rank, and raises the cause that stands.
  [[noreturn]] void fail(const algorithms::Collective& call, const Error& e);
  // On the way out, on the rank hosting the store: keeps it until the survivors read the record.
  void keep_store_for_survivors(bool hosts_store);

 private:
  void halt_from_record(CallQueue& queue, const base::AbortRecord& record);
  base::AbortRecord record_of(const Error& e) const;
  base::AbortRecord publish(const base::AbortRecord& mine,
                            std::chrono::milliseconds prefer_standing, HealthMonitor* monitor);

  const Member m_;
  std::shared_ptr<Store> store_;
  base::Halt halt_;
  Progress progress_;
  std::shared_ptr<HealthMonitor> monitor_;  // shared: abort() publishes outside the lock
  int store_host_rank_ = -2;
  std::string store_where_;
};

}  // namespace loom::core
