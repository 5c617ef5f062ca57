// A communicator's background watch, on a thread of its own with its own store connection (whose
// requests give up after a few seconds):
// - every half second, looks for an abort record (another rank failed) and hands it over, so a
//   rank waiting on a live but stuck peer stops within a second instead of at its timeout;
// - beats a heartbeat every second and watches the next rank's (rank n-1 watches rank 0): a rank
//   whose heartbeat has stopped for LOOM_HEARTBEAT_TIMEOUT seconds is declared failed (a frozen
//   process, a lost host), unless it said it left;
// - keeps going when the store does not answer, saying so at WARN once; when the store stays
//   silent for LOOM_HEARTBEAT_TIMEOUT and a rank hosts it, that rank is declared failed here
//   (there is no store to tell the others: each rank finds it on its own);
// - publishes this rank's own failure records, with a deadline its caller chooses, and says
//   when this rank has the record that stands (the rank hosting the store waits for that);
// - stall report: a rank whose collective has waited LOOM_STALL_WARN seconds says so through the
//   store, every rank then publishes where it stands, and rank 0 logs which ranks have and have
//   not entered that collective (the run keeps waiting until its timeout).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "base/abort_record.hpp"
#include "loom/store.hpp"

namespace loom::core {

// What the engine is doing, written on its hot path with relaxed stores only.
struct Progress {
  std::atomic<std::uint64_t> word{0};   // tag word of the current or last call
  std::atomic<std::uint64_t> count{0};  // tag count
  std::atomic<bool> in_call{false};
};

class HealthMonitor {
 public:
  struct Settings {
    int rank = 0;
    int size = 1;
    std::chrono::milliseconds stall_warn{std::chrono::seconds(30)};
    std::chrono::milliseconds heartbeat_timeout{std::chrono::seconds(30)};  // 0: off
    std::vector<std::string> hosts;  // host name of every rank, for messages
    // How a rank is named in messages ("rank 3", or "rank 1 (rank 3 of the parent)").
    std::function<std::string(int)> who;
    // Where rank 0's stall report goes (the log at WARN when not set).
    std::function<void(const std::string&)> report;
  };
  // `on_abort` runs on the monitor's thread when a record appears, or a failure is found (once).
  HealthMonitor(std::shared_ptr<Store> store, Settings settings, const Progress& progress,
                std::function<void(const base::AbortRecord&)> on_abort);
  // Says, on the way out, that this rank left on purpose: its watcher stops expecting beats.
  ~HealthMonitor();
  HealthMonitor(const HealthMonitor&) = delete;
  HealthMonitor& operator=(const HealthMonitor&) = delete;

  // Which rank hosts the store (-1: none of them; a launcher does), and how to name the store
  // in messages ("127.0.0.1:29500").
  void set_store_host(int rank, std::string where);
  // Publishes `mine` through the monitor's store connection unless a record stands already,
  // and returns the one that stands; nullopt when the store did not answer within `wait`.
  // prefer_standing: first waits that long for a record another rank may be publishing (a rank
  // that only saw a connection close leaves the cause to the rank that knows it). Returns nullopt
  // at once while the store is known not to answer.
  std::optional<base::AbortRecord> publish(const base::AbortRecord& mine,
                                           std::chrono::milliseconds wait,
                                           std::chrono::milliseconds prefer_standing);

 private:
  using Clock = std::chrono::steady_clock;
  void loop();
  void tick(Clock::time_point now);
  void serve_publish();
  void store_answered(Clock::time_point now);
  void store_silent(Clock::time_point now, const Error& e);
  void watch_heartbeat(Clock::time_point now);
  void watch_stalls(Clock::time_point now);
  void report_stall(std::int64_t stalls);
  void declare(const base::AbortRecord& record, bool publish);
  void mark_seen();
  std::string who(int rank) const;

  std::shared_ptr<Store> store_;
  Settings settings_;
  const Progress& progress_;
  std::function<void(const base::AbortRecord&)> on_abort_;
  bool abort_seen_ = false;
  bool seen_marked_ = false;  // this rank said it has the record (keys::abort_seen)

  Clock::time_point started_;

  // Heartbeats: this rank's, and the one it watches.
  Clock::time_point next_beat_{};
  Clock::time_point next_heartbeat_check_{};
  int watched_ = 0;  // the rank this one watches: the next that has not left
  std::int64_t watched_beat_ = -1;
  Clock::time_point watched_since_;

  // The store's silence: since when, and whether it was said.
  std::optional<Clock::time_point> last_answer_;
  std::optional<Clock::time_point> silent_since_;
  std::atomic<bool> silent_{
      false};                 // silent_since_, for publish(): a silent store is not waited on
  int store_host_rank_ = -1;  // under mu_
  std::string store_where_;   // under mu_

  // Stalls: the call seen at the last tick, and since when it has not changed.
  std::uint64_t seen_word_ = 0;
  bool seen_in_call_ = false;
  Clock::time_point seen_since_{};
  std::uint64_t reported_word_ = 0;  // this rank's stalled call, already announced
  std::int64_t stalls_seen_ = 0;     // the stall counter at the last look
  Clock::time_point next_report_{};

  // A publish asked of the monitor's thread.
  struct PublishRequest {
    base::AbortRecord mine;
    std::chrono::milliseconds prefer_standing;
    std::optional<base::AbortRecord> standing;
    bool done = false;
  };
  std::shared_ptr<PublishRequest> request_;  // under mu_

  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace loom::core
