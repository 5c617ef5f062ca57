#include "store/keys.hpp"

#include <fmt/format.h>

namespace loom::store::keys {
namespace {

std::string key(Space space, std::string_view field) {
  return fmt::format("{}/{}", name(space), field);
}
template <typename... Index>
std::string key(Space space, std::string_view field, Index... index) {
  std::string k = key(space, field);
  ((k += fmt::format("/{}", index)), ...);
  return k;
}

}  // namespace

std::string_view name(Space space) {
  switch (space) {
    case Space::communicator:
      return "communicator";
    case Space::topology:
      return "topology";
    case Space::failure:
      return "failure";
    case Space::health:
      return "health";
    case Space::tcp:
      return "tcp";
    case Space::shm:
      return "shm";
    case Space::cudaipc_control:
      return "cudaipc-control";
    case Space::cudaipc:
      return "cudaipc";
    case Space::ibverbs:
      return "ibverbs";
    case Space::split:
      return "split";
    case Space::shrink:
      return "shrink";
    case Space::rendezvous:
      return "rendezvous";
    case Space::launcher:
      return "launcher";
  }
  return "unknown";
}

std::string generation(std::string_view attempt, int rank) {
  return attempt.empty() ? key(Space::communicator, "generation", rank)
                         : key(Space::communicator, "generation", attempt, rank);
}
std::string generation_prefix(std::string_view attempt, std::int64_t n) {
  return attempt.empty() ? fmt::format("g{}", n) : fmt::format("{}/g{}", attempt, n);
}

std::string job_token() {
  return key(Space::communicator, "job_token");
}
std::string topology(int rank) {
  return key(Space::topology, "rank", rank);
}
std::string settings_refused(int rank) {
  return key(Space::topology, "settings_refused", rank);
}
std::string abort_record() {
  return key(Space::failure, "abort");
}
std::string abort_seen(int rank) {
  return key(Space::failure, "seen", rank);
}
std::string heartbeat(int rank) {
  return key(Space::health, "heartbeat", rank);
}
std::string progress(int rank) {
  return key(Space::health, "progress", rank);
}
std::string stalls() {
  return key(Space::health, "stalls");
}
std::string departed(int rank) {
  return key(Space::health, "departed", rank);
}
std::string tcp_address(int rank) {
  return key(Space::tcp, "address", rank);
}
std::string shm_segment(Space space, int low, int high) {
  return key(space, "segment", low, high);
}
std::string cudaipc_handle(int owner, int peer) {
  return key(Space::cudaipc, "handle", owner, peer);
}
std::string ib_record(int from, int to) {
  return key(Space::ibverbs, "record", from, to);
}
std::string ib_ready(int from, int to) {
  return key(Space::ibverbs, "ready", from, to);
}
std::string split_request(std::uint64_t split, int rank) {
  return key(Space::split, "request", split, rank);
}
std::string split_space(std::uint64_t split, int color) {
  return key(Space::split, "space", split, color);
}
std::string group_space(std::uint64_t digest, std::uint64_t n) {
  return key(Space::split, "group", digest, n);
}
std::string group_settings(int group_rank) {
  return key(Space::split, "group_settings", group_rank);
}
std::string shrink_joined(std::uint64_t round, int rank) {
  return key(Space::shrink, "joined", round, rank);
}
std::string shrink_members(std::uint64_t round) {
  return key(Space::shrink, "members", round);
}
std::string shrink_space(std::uint64_t round) {
  return key(Space::shrink, "space", round);
}

std::string launcher_left_out(std::string_view worker_id) {
  return key(Space::launcher, "left_out", worker_id);
}
std::string launcher_attempt() {
  return key(Space::launcher, "attempt");
}

std::string rendezvous_seeded(std::string_view run) {
  return key(Space::rendezvous, run, "seeded");
}
std::string rendezvous_round(std::string_view run) {
  return key(Space::rendezvous, run, "round");
}
std::string rendezvous_joined(std::string_view run, std::int64_t round) {
  return key(Space::rendezvous, run, "joined", round);
}
std::string rendezvous_node(std::string_view run, std::int64_t round, int arrival) {
  return key(Space::rendezvous, run, "node", round, arrival);
}
std::string rendezvous_closed(std::string_view run, std::int64_t round) {
  return key(Space::rendezvous, run, "closed", round);
}
std::string rendezvous_outcome(std::string_view run, std::int64_t round) {
  return key(Space::rendezvous, run, "outcome", round);
}
std::string rendezvous_restarts(std::string_view run, std::int64_t round) {
  return key(Space::rendezvous, run, "restarts", round);
}
std::string rendezvous_master(std::string_view run, std::int64_t round) {
  return key(Space::rendezvous, run, "master", round);
}
std::string rendezvous_heartbeat(std::string_view run, std::int64_t round, int group_rank) {
  return key(Space::rendezvous, run, "heartbeat", round, group_rank);
}
std::string rendezvous_done(std::string_view run, std::int64_t round, int group_rank) {
  return key(Space::rendezvous, run, "done", round, group_rank);
}
std::string rendezvous_left(std::string_view run, std::int64_t round) {
  return key(Space::rendezvous, run, "left", round);
}

}  // namespace loom::store::keys
