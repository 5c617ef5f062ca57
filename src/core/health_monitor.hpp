// A communicator's background watch, on a thread of its own with its own store connection:
// - every half second, looks for an abort record (another rank failed) and hands it over, so a
//   rank waiting on a live but stuck peer stops within a second instead of at its timeout;
// - beats a heartbeat every second; rank 0 declares a rank whose heartbeat has stopped for
//   LOOM_HEARTBEAT_TIMEOUT seconds failed (a frozen process, a lost host);
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
#include <thread>
#include <vector>

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
    // Where rank 0's stall report goes (the log at WARN when not set).
    std::function<void(const std::string&)> report;
  };
  // `on_abort` runs on the monitor's thread when a record appears (once).
  HealthMonitor(std::shared_ptr<Store> store, Settings settings, const Progress& progress,
                std::function<void(const base::AbortRecord&)> on_abort);
  ~HealthMonitor();
  HealthMonitor(const HealthMonitor&) = delete;
  HealthMonitor& operator=(const HealthMonitor&) = delete;

 private:
  void loop();
  void tick(std::chrono::steady_clock::time_point now);
  void watch_heartbeats(std::chrono::steady_clock::time_point now);
  void watch_stalls(std::chrono::steady_clock::time_point now);
  void report_stall(std::int64_t stalls);

  std::shared_ptr<Store> store_;
  Settings settings_;
  const Progress& progress_;
  std::function<void(const base::AbortRecord&)> on_abort_;
  bool abort_seen_ = false;

  // Heartbeats (rank 0 watches them all).
  std::chrono::steady_clock::time_point next_beat_{};
  std::chrono::steady_clock::time_point next_heartbeat_check_{};
  std::vector<std::int64_t> last_beat_;
  std::vector<std::chrono::steady_clock::time_point> last_change_;

  // Stalls: the call seen at the last tick, and since when it has not changed.
  std::uint64_t seen_word_ = 0;
  bool seen_in_call_ = false;
  std::chrono::steady_clock::time_point seen_since_{};
  std::uint64_t reported_word_ = 0;  // this rank's stalled call, already announced
  std::int64_t stalls_seen_ = 0;     // the "stalls" counter at the last look
  std::chrono::steady_clock::time_point next_report_{};

  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace loom::core
