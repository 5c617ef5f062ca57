// LOOM_* environment variables, read once into plain values.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>

#include "loom/loom.hpp"

namespace loom::base {

std::optional<std::string> env_string(const char* name);
// Raises InvalidArgument naming the variable when the value is not an integer in [lo, hi].
std::optional<long long> env_int(const char* name, long long lo, long long hi);
// Sizes accept K, M, G suffixes (powers of two): "4M" = 4 MiB.
std::optional<std::size_t> parse_size(const std::string& text);

// What a transport reads: the shape of its connections to its peers and how they authenticate.
struct LinkConfig {
  std::string socket_ifname;
  int sockets_per_peer = 2;
  std::size_t buffer_bytes = 4u << 20;
  int slots = 8;
  std::size_t socket_buffer_bytes = 4u << 20;
  // The job secret that authenticates data connections; empty: none (see base/auth.hpp).
  std::string secret;
  // Device buffers of ranks on one host move through CUDA IPC (LOOM_CUDA_IPC=0: staged through
  // the host's shared memory instead). Must be the same on every rank.
  bool cuda_ipc = true;
  // Bytes of device slots per CUDA IPC connection (LOOM_CUDA_BUFFSIZE): larger than the host
  // FIFO, since every slot hand-over waits for the GPU and GPU copies run at TB/s.
  std::size_t cuda_buffer_bytes = std::size_t{32} << 20;

  // The bytes of one slot of a host connection's FIFO, and of a CUDA IPC connection's.
  std::size_t slot_bytes() const { return buffer_bytes / static_cast<std::size_t>(slots); }
  std::size_t cuda_slot_bytes() const {
    return cuda_buffer_bytes / static_cast<std::size_t>(slots);
  }

  // InvalidArgument for sockets, slots or buffers out of range.
  void check_limits() const;
};

// How a rank that waits uses its core (transports and the engine alike): bounded spinning, then
// blocking, from how many ranks share the host's cores.
struct Pacing {
  // Bounded spinning before blocking, in microseconds; 0 blocks at once.
  int spin_us = 200;
  bool spin_us_set = false;  // by LOOM_SPIN_US, which set_local_world_size leaves alone
  int local_world_size = 1;
  bool local_world_size_given = false;  // by LOCAL_WORLD_SIZE, not assumed
  int cores = 1;
  // More ranks on this host than cores: spinning yields the core instead of pausing.
  bool oversubscribed = false;
  // Some host of the job runs more ranks than it has cores (the same on every rank): slot
  // hand-overs then go through the scheduler, and slices are chosen larger.
  bool any_host_oversubscribed = false;
  // Ranks on this host plus a communication thread each outnumber the cores: an asynchronous
  // call, running beside its rank's computation, yields while it spins.
  bool background_oversubscribed = false;

  // Sets local_world_size and the spinning policy that follows from it.
  void set_local_world_size(int ranks_on_host);
};

// How the engine chooses an algorithm for a call.
struct SelectionConfig {
  // LOOM_ALGO's rules (algorithms/rules.hpp); empty: the cost model alone.
  std::string algorithm;
  // The tuning table to read (LOOM_TUNE_FILE, else the default under the user's cache); empty:
  // none.
  std::string tuning_file;
  // How long init measures this host for the cost model (LOOM_PROBE_US; 0: the model's
  // defaults). Ranks that skip it take the figures of those that probe.
  std::chrono::microseconds probe_budget{10000};
  // Calls whose every rank is on this host read and write the peers' device buffers in place
  // (LOOM_CUDA_DIRECT=0: through the device slots instead). Must be the same on every rank.
  bool cuda_direct = true;
  // Where the model cannot price its two cheapest algorithms apart, measure both on each size's
  // first calls and keep the faster (LOOM_TRIALS=0: the model's choice alone, the same on every
  // call of a size in a launch). Must be the same on every rank (init checks it, as the other
  // settings of core/settings_agreement.hpp).
  bool trials = true;
};

// How a failure is noticed, and what the communicator tells a launcher about it.
struct FailureConfig {
  // A collective waiting this long gets a stall report (LOOM_STALL_WARN, seconds).
  std::chrono::milliseconds stall_warn{std::chrono::seconds(30)};
  // A rank whose heartbeat stops this long is declared failed (LOOM_HEARTBEAT_TIMEOUT; 0: off).
  std::chrono::milliseconds heartbeat_timeout{std::chrono::seconds(30)};
  // Where a shrink names, by pid, the ranks on its host it left out that still run, for the
  // launcher to stop them (LOOM_LEFT_OUT_DIR, set by loomrun --on-failure shrink); empty: none.
  std::string left_out_dir;
  // Which attempt of a restarted job this is (LOOM_RESTART_COUNT, else
  // TORCHELASTIC_RESTART_COUNT); -1 outside a restarting launcher.
  int restart_count = -1;
  // What loomrun calls this worker (LOOM_WORKER_ID: one word, unique to the worker and its
  // attempt, whose part before the first '-' names its loomrun, so its node); empty where no
  // loomrun started it.
  std::string worker_id;
  // The fewest of the launcher's nodes a job may run on (LOOM_MIN_NODES, set by loomrun's
  // dynamic launches to --nnodes MIN; 0: no bound): a shrink whose survivors run under fewer
  // fails, so that a part of the job cut off from the rest never goes on as a job of its own
  // beside the rest, which loomrun restarts elsewhere.
  int min_nodes = 0;
};

// A communicator's configuration, by the layer that reads each part: transports get `link` and
// `pacing`, the engine `selection` and `pacing`, the communicator's failure path `failure`.
struct Config {
  // How long any call may wait for a peer (LOOM_TIMEOUT).
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  // "auto" (shm within a host, tcp across), "tcp" or "shm"; LOOM_SHM_DISABLE=1 means "tcp".
  std::string transport = "auto";
  LinkConfig link;
  Pacing pacing;
  SelectionConfig selection;
  FailureConfig failure;

  // Options win over environment, environment over defaults.
  static Config resolve(const Options& options, int world_size);
  // What a rank whose settings resolve() refused still needs to join its peers and tell them
  // (the secret, the launcher's attempt and name for it, as resolve() reads them; the timeout,
  // or its default where it is the invalid one), the rest the defaults. Raises as resolve() does
  // where the secret or the attempt is itself invalid: then the rank cannot tell its peers.
  static Config for_joining(const Options& options, int world_size);
  // A split's child: this config with the fields `options` sets replaced (InvalidArgument for
  // one a child cannot change).
  Config for_child(const Options& options) const;
};

// $XDG_CACHE_HOME/loom/tune.txt, else $HOME/.cache/loom/tune.txt; empty without either.
std::string default_tuning_file();

}  // namespace loom::base
