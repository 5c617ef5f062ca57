// How a communicator stops (core/failure_protocol.hpp): abort(), another rank's record found by
// the health monitor, or a call's own failure; and how the cause reaches every rank through the
// store.
#include <algorithm>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/logging.hpp"
#include "core/failure_protocol.hpp"
#include "core/failure_store.hpp"

namespace loom::core {

using algorithms::Collective;

namespace {
// How long a failing rank waits for the store to take its record: the store may be gone.
constexpr auto kPublishWait = std::chrono::seconds(1);
// How long a rank that only saw a connection close waits for the cause from the rank that knows.
constexpr auto kPreferStanding = std::chrono::milliseconds(500);
// How long the rank hosting the store keeps it, on its way out after a failure, for the ranks
// that have not read the record: they learn a failure within a second (a closed connection, the
// monitor's next look), or are gone themselves.
constexpr auto kKeepStoreForSurvivors = std::chrono::seconds(3);
}  // namespace

void FailureProtocol::abort(CallQueue& queue) {
  const base::AbortRecord mine{
      base::AbortRecord::Kind::aborted, m_.rank, m_.rank,
      fmt::format("{} on host {} aborted its communicator", m_.who(m_.rank), m_.host_of(m_.rank))};
  std::shared_ptr<HealthMonitor> monitor;
  bool idle = false;
  // A running call sees the halt at its next wait (within its spin window or 100 ms of sleep),
  // fails, and tells the others; the connections are closed once the engine is idle (here, or by
  // the thread that ran the call: engine_idle), never while the engine uses them.
  queue.locked([&](const CallQueue::Now& now) {
    if (now.closed || !halt_.trigger(mine, true)) return false;
    idle = !now.busy;
    if (idle) monitor = monitor_;
    return true;
  });
  // Not under the lock: the store may take its time, or never answer.
  if (idle) publish(mine, std::chrono::milliseconds(0), monitor.get());
}

// The one place the connections close on a halt: under the call queue's lock, the engine idle
// (seq_cst with the halt's trigger: whichever of a halt and a call's end comes last closes).
void FailureProtocol::engine_idle(bool closed) {
  if (halt_.triggered() && !closed) m_.close_connections();
}

// The watch over the other ranks, on its own connection to the store (none when the store
// cannot open a second one: failures then still reach each rank through its connections).
void FailureProtocol::start(std::shared_ptr<Store> store, const base::FailureConfig& config,
                            CallQueue& queue) {
  store_ = std::move(store);
  // Its requests give up soon, so that a stopped store host is noticed in time.
  const auto request_timeout = std::clamp<std::chrono::milliseconds>(
      config.heartbeat_timeout / 4, std::chrono::seconds(1), std::chrono::seconds(5));
  std::shared_ptr<Store> own = store_->clone_bounded(request_timeout);
  if (!own) own = store_->clone();  // a store that cannot bound its requests: unbounded
  if (!own) {
    base::log().debug("rank {}: the store cannot be cloned: no health monitor", m_.rank);
    return;
  }
  HealthMonitor::Settings s;
  s.rank = m_.rank;
  s.size = m_.size;
  s.stall_warn = config.stall_warn;
  s.heartbeat_timeout = config.heartbeat_timeout;
  for (int r = 0; r < m_.size; ++r) s.hosts.push_back(m_.host_of(r));
  s.who = [this](int r) { return m_.who(r); };
  monitor_ = std::make_shared<HealthMonitor>(
      std::move(own), std::move(s), progress_,
      [this, &queue](const base::AbortRecord& record) { halt_from_record(queue, record); });
  if (store_host_rank_ != -2) monitor_->set_store_host(store_host_rank_, store_where_);
}

// The health monitor found another rank's record: stop, the way abort() does.
void FailureProtocol::halt_from_record(CallQueue& queue, const base::AbortRecord& record) {
  queue.locked([&](const CallQueue::Now& now) {
    if (now.closed || !halt_.trigger(record, false)) return false;
    base::log().error("{}: stopping: {} (reported by {})", m_.who(m_.rank), record.cause,
                      m_.who(record.reporter));
    return true;
  });
}

// After a failure: tell the other ranks through the store (or learn what another rank told),
// close the connections so that no peer waits on this rank, and raise. A rank that only saw a
// neighbour close raises the cause that the first rank to know published.
void FailureProtocol::fail(const Collective& call, const Error& e) {
  const bool local_abort = e.kind() == ErrorKind::aborted;
  const base::AbortRecord mine = record_of(e);
  // A rank that only saw a connection close leaves the cause to the rank that knows it.
  const bool second_hand =
      mine.kind == base::AbortRecord::Kind::peer_failed && mine.failed != m_.rank;
  // This rank's own failure (a mismatch, a timeout, an error here): close first, so that no peer
  // waits on this rank while the store takes its time. A peer's closure seen here: close after
  // the publish, since the neighbours that would see this rank close first would take it for the
  // failed one before the rank that saw the failure first could say which one it was. Either
  // publish is bounded (kPublishWait), and immediate while the store is known to be silent.
  if (!second_hand) m_.close_connections();
  // A halt that came from elsewhere carries a record that stands already (published, or found
  // when the store went silent): no publish to wait for.
  const auto elsewhere = local_abort ? std::nullopt : halt_.record_from_elsewhere();
  const base::AbortRecord standing =
      elsewhere ? *elsewhere
                : publish(mine, second_hand ? kPreferStanding : std::chrono::milliseconds(0),
                          monitor_.get());
  halt_.trigger(standing, local_abort);
  m_.close_connections();
  // A peer's failure is told the same way on every rank (naming the rank and its host); this
  // rank's own mismatch or timeout keeps its own words.
  if (!local_abort &&
      (standing.reporter != m_.rank || standing.kind == base::AbortRecord::Kind::peer_failed)) {
    base::log().error("{}: {}: {} (reported by {})", call.describe(), m_.who(m_.rank),
                      standing.cause, m_.who(standing.reporter));
    standing.raise(fmt::format("{}: {}", call.describe(), m_.who(m_.rank)));
  }
  base::log().error("{}", e.what());
  throw;
}

// On the way out after a failure, on the rank that hosts the store (init()): its process may end
// right after, and the store with it. A survivor that has not read the record by then would find
// no store and blame this rank; so the store stays until every rank but the failed one has read
// the record, or kKeepStoreForSurvivors has passed.
void FailureProtocol::keep_store_for_survivors(bool hosts_store) {
  if (!hosts_store || !store_ || !halt_.triggered()) return;
  try {
    const auto record = read_abort(*store_);
    if (!record) return;  // none stands in the store: nobody will say they read it
    const auto deadline = std::chrono::steady_clock::now() + kKeepStoreForSurvivors;
    std::vector<int> unaware;
    while (!(unaware = unaware_of_abort(*store_, m_.size, m_.rank, *record)).empty() &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!unaware.empty())
      base::log().info(
          "{}: closing the store it hosts: rank(s) {} did not read the failure "
          "record within {} s",
          m_.who(m_.rank), fmt::join(unaware, ","), kKeepStoreForSurvivors.count());
  } catch (const Error& e) {
    base::log().debug("{}: the store it hosts: {}", m_.who(m_.rank), e.what());
  }
}

// What this rank's own error tells the others.
base::AbortRecord FailureProtocol::record_of(const Error& e) const {
  using Kind = base::AbortRecord::Kind;
  switch (e.kind()) {
    case ErrorKind::mismatch:
      return {Kind::mismatch, m_.rank, -1,
              "collective mismatch: " + static_cast<const CollectiveMismatch&>(e).detail()};
    case ErrorKind::timeout:
      return {Kind::timeout, m_.rank, -1,
              fmt::format("{} timed out: {}", m_.who(m_.rank), e.what())};
    case ErrorKind::aborted:
      return {Kind::aborted, m_.rank, m_.rank,
              fmt::format("{} on host {} aborted its communicator", m_.who(m_.rank),
                          m_.host_of(m_.rank))};
    case ErrorKind::peer:
      if (const int peer = static_cast<const PeerError&>(e).peer(); peer >= 0)
        return {Kind::peer_failed, m_.rank, peer,
                fmt::format("{} on host {} is gone or failed (seen by {}: {})", m_.who(peer),
                            m_.host_of(peer), m_.who(m_.rank), e.what())};
      break;
    default:
      break;
  }
  return {Kind::peer_failed, m_.rank, m_.rank,
          fmt::format("{} on host {} failed: {}", m_.who(m_.rank), m_.host_of(m_.rank), e.what())};
}

// Publishes `mine` unless a record stands already, within kPublishWait; returns the one that
// stands. When the store does not answer and a rank hosts it, that rank is the likeliest to have
// failed (its connections closing cascade around the ring and would blame a neighbour); else
// `mine` (peers still see this rank's connections close).
base::AbortRecord FailureProtocol::publish(const base::AbortRecord& mine,
                                           std::chrono::milliseconds prefer_standing,
                                           HealthMonitor* monitor) {
  std::optional<base::AbortRecord> standing;
  if (monitor) {
    standing = monitor->publish(mine, kPublishWait + prefer_standing, prefer_standing);
  } else if (store_) {  // none before start(): nobody to tell
    try {
      standing = publish_abort(*store_, mine);
      mark_abort_seen(*store_, m_.rank);
    } catch (const Error& e) {
      base::log().warn("{}: cannot publish the failure: {}", m_.who(m_.rank), e.what());
    }
  }
  if (standing) return *standing;
  if (store_host_rank_ >= 0 && store_host_rank_ != m_.rank && mine.failed != m_.rank &&
      mine.kind == base::AbortRecord::Kind::peer_failed)
    return {base::AbortRecord::Kind::peer_failed, m_.rank, store_host_rank_,
            fmt::format("{} on host {}, which hosts the rendezvous store, is unreachable: the "
                        "store does not answer (seen by {}: {})",
                        m_.who(store_host_rank_), m_.host_of(store_host_rank_), m_.who(m_.rank),
                        mine.cause)};
  base::log().warn("{}: cannot publish the failure: the store does not answer", m_.who(m_.rank));
  return mine;
}

void FailureProtocol::set_store_host(int rank, std::string where) {
  store_host_rank_ = rank;
  store_where_ = std::move(where);
  if (monitor_) monitor_->set_store_host(rank, store_where_);
}

int FailureProtocol::failed_rank(int size) const {
  const auto record = halt_.record();
  return record && record->kind != base::AbortRecord::Kind::aborted && record->failed >= 0 &&
                 record->failed < size
             ? record->failed
             : -1;
}

}  // namespace loom::core
