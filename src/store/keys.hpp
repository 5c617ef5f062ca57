// Every key Loom writes into a rendezvous store is built here, and only here.
//
// A key is "<space>/<field>/<index>...": each component (a transport, the health monitor, the
// failure protocol, ...) owns one space and writes only keys of its own space, and each space
// names its fields, so two components can never produce the same key. A communicator sees the
// store through a PrefixStore (generation_prefix), so keys of different communicators and of
// different attempts of a restarted job never meet either.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace loom::store::keys {

enum class Space : std::uint8_t {
  communicator,     // the generation counter and the job token
  topology,         // each rank's host, pid, cores, RDMA port
  failure,          // the abort record
  health,           // heartbeats, stall reports
  tcp,              // listening addresses
  shm,              // shared-memory segments of host connections
  cudaipc_control,  // shared-memory segments of CUDA IPC connections (their FIFO counters)
  cudaipc,          // CUDA IPC memory handles
  ibverbs,          // RDMA connection records
  split,            // sub-communicators: the colors and keys of a split
  shrink,           // communicators of the survivors: who joined, who was admitted
  rendezvous,       // loomrun's elastic rendezvous: rounds, their members and outcomes
  launcher,         // what workers tell the launcher that started them (outside any generation)
};
// The space's name: the first part of each of its keys.
std::string_view name(Space space);

// The generation counter of a communicator key space; outside any generation.
std::string generation(std::string_view attempt, int rank);
// The prefix of generation n of a key space: every other key below lives under it.
std::string generation_prefix(std::string_view attempt, std::int64_t n);

// Inside a generation:
std::string job_token();
std::string topology(int rank);
// Rank `rank` read the topology records and found the ranks' settings disagree: the ranks meet
// here before each raises, so the rank hosting the store keeps it until all have read.
std::string settings_refused(int rank);
std::string abort_record();
// Rank `rank` has read the abort record: the rank that hosts the store may let it go.
std::string abort_seen(int rank);
std::string heartbeat(int rank);
std::string progress(int rank);
std::string stalls();
// A rank that destroyed its communicator on purpose: its watcher stops expecting heartbeats.
std::string departed(int rank);
std::string tcp_address(int rank);
// A shared-memory segment's name for the pair (low, high); `space` is shm or cudaipc_control.
std::string shm_segment(Space space, int low, int high);
std::string cudaipc_handle(int owner, int peer);
std::string ib_record(int from, int to);
std::string ib_ready(int from, int to);
// Sub-communicators: what rank `rank` asked for in the parent's split number `split`, and the
// key space of one child.
std::string split_request(std::uint64_t split, int rank);
std::string split_space(std::uint64_t split, int color);
// The key space of the n-th communicator made by create_group() from the members whose list
// has `digest`.
std::string group_space(std::uint64_t digest, std::uint64_t n);
// Inside a group's key space: the child's settings as member `group_rank` has them, compared
// before any member builds its part.
std::string group_settings(int group_rank);
// Shrinking after a failure: rank `rank` joined shrink number `round`; the members admitted
// (the first proposal stands); the key space of the survivors' communicator.
std::string shrink_joined(std::uint64_t round, int rank);
std::string shrink_members(std::uint64_t round);
std::string shrink_space(std::uint64_t round);

// Outside any generation, for the launcher: the survivors' shrink left out the worker it calls
// `worker_id` (LOOM_WORKER_ID).
std::string launcher_left_out(std::string_view worker_id);
// The highest attempt any node of a static launch has entered (--max-restarts): every node runs
// that one.
std::string launcher_attempt();

// loomrun's elastic rendezvous of run `run` (outside any generation). A round is one
// membership of the job: nodes join it, it closes, their workers run until it ends.
std::string rendezvous_seeded(std::string_view run);  // the store is ready (after a takeover)
std::string rendezvous_round(std::string_view run);   // the round nodes join now
std::string rendezvous_joined(std::string_view run, std::int64_t round);  // arrival counter
std::string rendezvous_node(std::string_view run, std::int64_t round, int arrival);
std::string rendezvous_closed(std::string_view run, std::int64_t round);    // its node count
std::string rendezvous_outcome(std::string_view run, std::int64_t round);   // why it ended
std::string rendezvous_restarts(std::string_view run, std::int64_t round);  // restart count
std::string rendezvous_master(std::string_view run, std::int64_t round);    // workers' store
std::string rendezvous_heartbeat(std::string_view run, std::int64_t round, int group_rank);
std::string rendezvous_done(std::string_view run, std::int64_t round, int group_rank);
std::string rendezvous_left(std::string_view run, std::int64_t round);  // saw every node done

}  // namespace loom::store::keys
