// How a communicator stops: abort(), another rank's record found by the health monitor, or a
// call's own failure; and how the cause reaches every rank through the store.
#include <fmt/format.h>

#include "base/logging.hpp"
#include "core/communicator_impl.hpp"
#include "core/failure_store.hpp"

namespace loom {

using algorithms::Collective;

void Communicator::Impl::abort() {
  std::lock_guard lock(mu_);
  if (destroyed_) return;
  base::AbortRecord mine{
      base::AbortRecord::Kind::aborted, rank_, rank_,
      fmt::format("{} on host {} aborted its communicator", who(rank_), host_of(rank_))};
  if (!halt_.trigger(mine, true)) return;
  // A running call sees the halt at its next wait (within its spin window or 100 ms of
  // sleep), fails, and tells the others; the connections are closed once the engine is idle,
  // here or by the thread that ran the call, never while the engine uses them.
  if (busy_) return;
  publish(mine);
  transport_->abort();
}

// Under mu_, with the engine idle (busy_ clear; seq_cst with abort(): one of the two closes).
void Communicator::Impl::close_if_halted() {
  if (halt_.triggered() && !destroyed_) transport_->abort();
}

// The watch over the other ranks, on its own connection to the store (none when the store
// cannot open a second one: failures then still reach each rank through its connections).
void Communicator::Impl::start_monitor() {
  std::shared_ptr<Store> own = store_->clone();
  if (!own) {
    base::log().debug("rank {}: the store cannot be cloned: no health monitor", rank_);
    return;
  }
  core::HealthMonitor::Settings s;
  s.rank = rank_;
  s.size = size_;
  s.stall_warn = config_.stall_warn;
  s.heartbeat_timeout = config_.heartbeat_timeout;
  for (int r = 0; r < size_; ++r) s.hosts.push_back(host_of(r));
  monitor_ = std::make_unique<core::HealthMonitor>(
      std::move(own), std::move(s), progress_,
      [this](const base::AbortRecord& record) { halt_from_record(record); });
}

// The health monitor found another rank's record: stop, the way abort() does.
void Communicator::Impl::halt_from_record(const base::AbortRecord& record) {
  std::lock_guard lock(mu_);
  if (destroyed_ || !halt_.trigger(record, false)) return;
  base::log().error("rank {}: stopping: {} (reported by rank {})", rank_, record.cause,
                    record.reporter);
  if (!busy_) transport_->abort();
}

// After a failure: tell the other ranks through the store (or learn what another rank told),
// close the connections so that no peer waits on this rank, and raise. A rank that only saw a
// neighbour close raises the cause that the first rank to know published.
void Communicator::Impl::fail(const Collective& call, const Error& e) {
  const bool local_abort = e.kind() == ErrorKind::aborted;
  const base::AbortRecord standing = publish(record_of(e));
  halt_.trigger(standing, local_abort);
  transport_->abort();  // peers waiting on this rank fail now instead of at their timeout
  // A peer's failure is told the same way on every rank (naming the rank and its host); this
  // rank's own mismatch or timeout keeps its own words.
  if (!local_abort &&
      (standing.reporter != rank_ || standing.kind == base::AbortRecord::Kind::peer_failed)) {
    base::log().error("{}: rank {}: {} (reported by rank {})", call.describe(), rank_,
                      standing.cause, standing.reporter);
    standing.raise(fmt::format("{}: rank {}", call.describe(), rank_));
  }
  base::log().error("{}", e.what());
  throw;
}

// What this rank's own error tells the others.
base::AbortRecord Communicator::Impl::record_of(const Error& e) const {
  using Kind = base::AbortRecord::Kind;
  switch (e.kind()) {
    case ErrorKind::mismatch:
      return {Kind::mismatch, rank_, -1,
              "collective mismatch: " + static_cast<const CollectiveMismatch&>(e).detail()};
    case ErrorKind::timeout:
      return {Kind::timeout, rank_, -1, fmt::format("{} timed out: {}", who(rank_), e.what())};
    case ErrorKind::aborted:
      return {Kind::aborted, rank_, rank_,
              fmt::format("{} on host {} aborted its communicator", who(rank_), host_of(rank_))};
    case ErrorKind::peer:
      if (const int peer = static_cast<const PeerError&>(e).peer(); peer >= 0)
        return {Kind::peer_failed, rank_, peer,
                fmt::format("{} on host {} is gone or failed (seen by {}: {})", who(peer),
                            host_of(peer), who(rank_), e.what())};
      break;
    default:
      break;
  }
  return {Kind::peer_failed, rank_, rank_,
          fmt::format("{} on host {} failed: {}", who(rank_), host_of(rank_), e.what())};
}

// Publishes `mine` unless a record stands already; returns the one that stands (`mine` when
// the store cannot be reached: peers still see this rank's connections close).
base::AbortRecord Communicator::Impl::publish(const base::AbortRecord& mine) {
  try {
    return core::publish_abort(*store_, mine);
  } catch (const Error& e) {
    base::log().warn("rank {}: cannot publish the failure: {}", rank_, e.what());
    return mine;
  }
}

std::string Communicator::Impl::host_of(int rank) const {
  if (rank < 0 || static_cast<std::size_t>(rank) >= topology_.host_of_rank.size()) return "?";
  const std::string& id = topology_.host_of_rank[static_cast<std::size_t>(rank)];
  return id.substr(0, id.find('|'));
}

}  // namespace loom
