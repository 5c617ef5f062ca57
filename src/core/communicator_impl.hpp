// The communicator behind loom::Communicator. It owns its parts: the call queue (issue order,
// the worker, the engine's busy mark: core/call_queue.hpp), the failure protocol (the halt, the
// health monitor, the publishing of causes, when connections close: core/failure_protocol.hpp),
// the transports (core/transport_bundle.hpp), the calls on device buffers
// (core/device_calls.hpp) and the windows (core/host_windows.hpp); the checks of a call's
// arguments (core/call_checks.hpp) and what the topology says of the links
// (core/peer_links.hpp) are plain functions. Its own jobs live in files of their own:
//   joining.cpp       how it comes to be: init, split, create_group, shrink, its transports
//   communicator.cpp  the public methods, settings and summaries, shutdown and abort
//   call_runner.cpp   what the call queue runs: a call on the engine, a batch of sends and
//                     receives
//   windows.cpp       alloc() and free(): host memory the ranks of a host share
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "algorithms/dispatch.hpp"
#include "algorithms/engine.hpp"
#include "base/abort_record.hpp"
#include "base/config.hpp"
#include "base/halt.hpp"
#include "core/call_queue.hpp"
#include "core/device_calls.hpp"
#include "core/failure_protocol.hpp"
#include "core/host_windows.hpp"
#include "core/topology.hpp"
#include "core/work.hpp"
#include "loom/loom.hpp"
#include "loom/store.hpp"
#include "transports/cudaipc/cudaipc.hpp"
#include "transports/transport_table.hpp"

namespace loom {

class LOOM_INTERNAL Communicator::Impl final : private core::CallQueue::Runner {
 public:
  // route_hint: the store's host, so that data connections listen where it is reached.
  // `hosts_store`: this process serves the store (init() under env:// and tcp://, rank 0), which
  // it must keep until its peers have read what it tells them.
  Impl(std::shared_ptr<Store> store, int rank, int size, const Options& options,
       const std::string& route_hint, bool hosts_store = false);
  // A child of `parent` made by split(): `members` are its ranks' ranks in the parent, this one
  // is `rank`; `store` its own key space, `token` its own job token.
  Impl(const Impl& parent, base::Config config, std::shared_ptr<Store> store,
       std::vector<int> members, int rank, std::uint64_t token);
  ~Impl();
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const base::Config& config() const;
  // The tuning table entry this communicator reads: "shm 4x1".
  std::string tuning_key() const;
  std::string describe() const;
  Estimate estimate(Operation op, std::size_t bytes, bool device, bool shared) const;

  // Validates, numbers and queues one call for the worker thread.
  Work submit(algorithms::Collective call);
  // Validates, numbers and runs one call, returning when it is done.
  void run(algorithms::Collective call);
  // One of the communicator's own small calls on host buffers (split's and alloc's exchanges),
  // run as the user's calls are.
  void run_own(algorithms::Kind kind, const void* in, void* out, std::size_t count, DataType dtype,
               ReduceOp op = ReduceOp::sum);

  void abort();
  // Communicator::set_timeout: the calls that start after, and the children split or shrunk
  // from here after, wait this long.
  void set_timeout(std::chrono::milliseconds timeout);
  // Waits for the running and queued calls, then closes everything; idempotent.
  void shutdown();
  // Communicator::alloc and free (windows.cpp).
  void* alloc(std::size_t bytes);
  std::shared_ptr<void> alloc_shared(std::size_t bytes);
  void free(void* p);
  // Communicator::split: the child this rank joins, or null for a negative color. `refused`:
  // this rank's options were invalid (the error it raises, after the exchange: every member of
  // its child then raises too, and the parent goes on), and child_config is only a placeholder.
  std::shared_ptr<Impl> split(int color, int key, const base::Config& child_config,
                              const std::string& refused = {});
  // Communicator::create_group with this rank's options invalid (`why`): publishes it as this
  // member's settings in the group's key space (every other member then raises InvalidArgument
  // naming it) and counts the group as made, as they do.
  void refuse_group(const std::vector<int>& members, const std::string& why);
  // Communicator::create_group: the members' child, made by the members alone once they found
  // their settings alike (core::group_settings_disagreement; InvalidArgument where not).
  std::shared_ptr<Impl> create_group(const std::vector<int>& members,
                                     const base::Config& child_config);
  // Communicator::shrink: the survivors' communicator.
  // The ranks in `exclude` are neither waited for nor members.
  std::shared_ptr<Impl> shrink(std::chrono::milliseconds timeout, const std::vector<int>& exclude);
  // Which rank hosts the store (-1: none, a launcher does) and where it is, for the failure
  // path and the monitor to name a store that stopped answering.
  void set_store_host(int rank, std::string where);

  // When this rank hosts the store (init()): it lives as long as the communicator and every
  // communicator split from it.
  std::shared_ptr<StoreServer> hosted_server;

 private:
  // The engine, the monitor and the worker: the last steps of either constructor
  // (communicator.cpp). ipc: what build_transports() made for device buffers, or null.
  void start(transport::cudaipc::IpcTransport* ipc);
  // A child's failure protocol names the store's host as its parent's does, renumbered.
  void inherit_store_host(const Impl& parent);
  // "rank 3", or "rank 1 (rank 3 of the parent)" for a communicator made by split().
  std::string who(int rank) const;

  // joining.cpp, for shrink: the process of rank r where it runs on this host, else 0.
  int local_pid(int r) const;
  // joining.cpp, for shrink: tells the launcher of the ranks that shrink left out: of those on this
  // host that still run, in its folder; of every one it named (the first member alone), in the
  // store.
  void report_left_out(const std::vector<int>& members) const;
  // init's key space on `store` (a generation of its own for each communicator on the same
  // store and prefix, per launcher attempt) and the job token every rank agrees on there.
  void join_key_space(const std::shared_ptr<Store>& store, const Options& options);
  // create_group's child as every member derives it from the list alone: its key space, token
  // and this rank's rank in it; counts the group as made. InvalidArgument for a list that does
  // not name this rank, or names one twice or outside the communicator.
  struct GroupSpace {
    std::shared_ptr<Store> store;
    std::uint64_t token = 0;
    int rank = 0;
  };
  GroupSpace group_space(const std::vector<int>& members);
  // Raises PeerError when the members run on fewer of the launcher's nodes than `min_nodes`.
  void require_enough_nodes(const std::vector<int>& members, int min_nodes) const;

  // The topology exchange between the transport bundle's two steps (joining.cpp); returns the
  // CUDA IPC transport where device buffers reach this host's peers (owned by the table), or null.
  transport::cudaipc::IpcTransport* build_transports();
  // A call's arguments and where its buffers are, checked before anything is queued (sets
  // call.device).
  void check(algorithms::Collective& call);
  // What the failure protocol closes: every connection (any thread).
  void close_connections();

  // call_runner.cpp: core::CallQueue::Runner
  void refuse(const algorithms::Collective& call) override;
  void issue(algorithms::Collective& call) override;
  std::function<void()> execute(const algorithms::Collective& call, bool background) override;
  void run_batch(core::CallQueue::Batch& batch) override;
  void wake_batch() override;
  bool halted() const noexcept override;
  void engine_idle(bool closed) override;
  void run_engine(const algorithms::Collective& call, bool background, gpu::Runtime* runtime);
  // A call queued before the communicator halted raises what the halt says.
  void refuse_if_halted(const algorithms::Collective& call);
  // The same for what is not a call (create_group's wait for its members), `context` naming it.
  void raise_if_halted(const std::string& context) const;
  // In a handler: the error in flight, named with `call`, fails the communicator (fail()).
  [[noreturn]] void fail_in_flight(const algorithms::Collective& call);

  // The rank the failure protocol's record names as failed, or -1 (for shrink).
  int failed_rank() const;
  // The host name of `rank`, for messages ("?" when not known).
  std::string host_of(int rank) const;

  const int rank_;
  const int size_;
  base::Config config_;
  std::shared_ptr<Store> store_;  // this communicator's key space
  // The store as init was given it, outside every key space: where a launcher reads
  // (store::keys::launcher_left_out).
  std::shared_ptr<Store> launcher_store_;
  core::Topology topology_;
  std::string route_hint_;         // where the store is reached: data connections listen there too
  bool hosts_store_ = false;       // init() made this process the store's server (rank 0)
  std::uint64_t token_ = 0;        // the job token: names this communicator's connections
  std::vector<int> parent_ranks_;  // by rank, its rank in the parent (split() only)
  // The job itself: the top-level communicator, or a shrink of one (every survivor), not a
  // split's subset. Only such a shrink names the ranks it leaves out to the launcher, which
  // stops them: one left out of a subset may be healthy in the job.
  bool whole_job_ = true;
  std::uint64_t splits_ = 0;  // split() calls so far: each gets a key space of its own
  // create_group() calls so far, by member list (each member counts alike: all of them call);
  // members of disjoint groups may call it from threads of their own.
  std::mutex groups_mu_;
  std::map<std::vector<int>, std::uint64_t> groups_made_;
  std::uint64_t shrinks_ = 0;  // shrink() calls so far: likewise
  std::string listen_address_;
  std::string transport_summary_;
  std::unique_ptr<transport::TransportTable> transport_;
  // Made once the topology is known; kept after shutdown (estimate() still answers).
  std::shared_ptr<const algorithms::Selector> selector_;
  std::unique_ptr<algorithms::Engine> engine_;
  // Which algorithm runs each call, and its plan across calls: used with the engine, by whichever
  // thread has it (busy_).
  algorithms::Dispatcher dispatcher_;
  // alloc()'s memory; outlives the engine (which reads it) and, for the user, shutdown().
  std::unique_ptr<core::HostWindows> windows_;

  core::DeviceCalls devices_{rank_};

  core::FailureProtocol failure_{{rank_, size_, [this](int r) { return who(r); },
                                  [this](int r) { return host_of(r); },
                                  [this] { close_connections(); }}};
  // Threads in Work::wait on this communicator's calls (see Engine::sharing_core).
  std::shared_ptr<std::atomic<int>> callers_waiting_ = std::make_shared<std::atomic<int>>(0);
  // Last: made and started once everything else exists, closed first.
  std::unique_ptr<core::CallQueue> queue_;
};

}  // namespace loom
