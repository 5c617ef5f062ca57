// The context an algorithm runs in: its rank, the group, the connections, the call's deadline.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "algorithms/algorithm_records.hpp"
#include "algorithms/batch_wake.hpp"
#include "algorithms/collective.hpp"
#include "algorithms/data_path.hpp"
#include "algorithms/peer_memory.hpp"
#include "algorithms/selection.hpp"
#include "algorithms/spin_budget.hpp"
#include "base/config.hpp"
#include "base/deadline.hpp"
#include "base/halt.hpp"
#include "transports/transport.hpp"

namespace loom::algorithms {

class Dispatcher;

// x mod n in [0, n), for ring positions.
inline int positive_mod(int x, int n) {
  return ((x % n) + n) % n;
}

// A rank's place in a ring of `size` ranks (connections null when size is 1).
struct RingPosition {
  int size;
  int position;
  transport::Connection* prev;
  transport::Connection* next;
};

// What an algorithm may use: its rank, the group size, connections and the call's deadline.
class Engine {
 public:
  // `halt` is triggered from any thread (abort(), another rank's failure): waits then raise
  // its error. `callers_waiting` counts threads blocked in Work::wait. `selector`: the choice of
  // algorithms, shared with the communicator's estimate().
  Engine(int rank, int size, transport::Transport& transport, const base::Config& config,
         const base::Halt& halt, const std::atomic<int>& callers_waiting,
         std::shared_ptr<const Selector> selector)
      : rank_(rank),
        size_(size),
        transport_(transport),
        pacing_(config.pacing),
        slots_(config.link.slots),
        halt_(halt),
        callers_waiting_(callers_waiting),
        selector_(std::move(selector)),
        timeout_ms_(config.timeout.count()),
        spin_budget_(config.pacing.spin_us) {}
  int rank() const { return rank_; }
  int size() const { return size_; }
  // How waits spin or yield (base::Pacing), and the slots each connection has.
  const base::Pacing& pacing() const { return pacing_; }
  int slots() const { return slots_; }
  const Collective& call() const { return *call_; }
  const base::Deadline& deadline() const { return deadline_; }
  const base::Halt& halt() const { return halt_; }
  // The ranks of each host, hosts ordered by their lowest rank, ranks ascending.
  const std::vector<std::vector<int>>& hosts() const { return selector_->inputs().hosts; }
  const Selector& selector() const { return *selector_; }
  int ring_next(int k = 1) const { return positive_mod(rank_ + k, size_); }
  int ring_prev(int k = 1) const { return positive_mod(rank_ - k, size_); }
  // The ring of all ranks in rank order, connected (a ring of one: no connections).
  RingPosition ring();

  // The connection to peer; remembered so that waits keep it moving and run() flushes it. For a
  // call on GPU buffers: the transport's device connection (CUDA IPC where it has one), its host
  // memory made reachable by the GPU.
  transport::Connection& connection(int peer);
  // The connection to peer that carries host memory, also in a call on GPU buffers (the direct
  // algorithms' messages).
  transport::Connection& host_connection(int peer);
  // Where this call copies and reduces: the CPU, or the GPU for device buffers.
  DataPath& data() { return device_path_ ? *device_path_ : static_cast<DataPath&>(host_path_); }
  // The GPU's data path for a call on device buffers, else null.
  DataPath* device_path() const { return device_path_; }
  // Device memory this host's ranks share, for a call on device buffers that may take the
  // direct path; else null.
  PeerMemory* peer_memory() const { return peer_memory_; }
  // The call's device work orders itself on the GPU (the direct path): the host waits for none
  // of it at the call's end.
  void leave_ordering_to_device() { device_ordered_ = true; }
  // Host memory the ranks of this host share (Communicator::alloc's windows): null until the
  // first window every rank mapped. That happens between calls, on every rank at the same place
  // in its sequence of calls (the windows are made collectively), so every rank chooses alike.
  PeerMemory* host_windows() const {
    return host_windows_ != nullptr && host_windows_->any() ? host_windows_ : nullptr;
  }
  // Before the first call.
  void set_host_windows(PeerMemory* windows) { host_windows_ = windows; }
  // Every connection this call has used so far.
  const std::vector<transport::Connection*>& used() const { return used_; }
  // This rank's own call with the sequence number of `tag`, if it is among the last ones run:
  // a peer's message for a call this rank has already finished names what this rank did then.
  const transport::Tag* own_call_like(const transport::Tag& tag) const;
  // Runs one call to completion: the algorithm `dispatcher` chooses (its owner, the
  // communicator, keeps its plan across calls), then a flush of every connection it used.
  // background: an asynchronous call, running while the rank's own thread computes.
  // device_path: the GPU's data path for a call on device buffers; peer_memory: what the
  // direct path needs (null: the slots only).
  void run(const Collective& call, Dispatcher& dispatcher, bool background = false,
           DataPath* device_path = nullptr, PeerMemory* peer_memory = nullptr);
  bool background() const { return background_; }
  // Several sends and receives side by side (PointToPointBatch, point_to_point.cpp): the batch
  // begins (host buffers, the deadline from its first wait), makes each operation the current
  // call in turn, restarts the deadline whenever one moves, and flushes at its end.
  void begin_batch(bool background);
  void enter(const Collective& call, std::size_t slice_bytes);
  void restart_deadline() { deadline_ = base::Deadline::from_first_wait(timeout()); }
  // How long a call waits for its peers: the config's, until set_timeout() (from any thread)
  // changes it for the calls that start after.
  std::chrono::milliseconds timeout() const {
    return std::chrono::milliseconds(timeout_ms_.load(std::memory_order_relaxed));
  }
  void set_timeout(std::chrono::milliseconds timeout) {
    timeout_ms_.store(timeout.count(), std::memory_order_relaxed);
  }
  // Waits until every connection used has handed its queued slots over.
  void flush();
  // How this call is cut, as its dispatch chose (dispatch.hpp), reset at every call; both ends
  // of every connection compute the same from the same call. How much one slot carries (0: a
  // whole slot), which an algorithm of several phases sets per phase:
  std::size_t slice_bytes() const { return slice_bytes_; }
  void set_slice_bytes(std::size_t bytes) { slice_bytes_ = bytes; }
  // ... and how many slices a round of the ring all-reduce carries per block (0: half the
  // FIFO's slots).
  std::size_t round_slices() const { return round_slices_; }
  void set_slicing(std::size_t slice_bytes, std::size_t round_slices) {
    slice_bytes_ = slice_bytes;
    round_slices_ = round_slices;
  }
  // The blocks a single-copy all-to-all reads in place, as its dispatch chose (the others go
  // through the slots).
  const ReadRange& reads() const { return reads_; }
  void set_reads(const ReadRange& reads) { reads_ = reads; }
  // What this call's waits for its peers took, counted where the dispatch asks (DEBUG logging:
  // the model's predictions against this rank's clock): the time, the waits that did not end at
  // once, and the sleeps among them (a sleeping rank pays a wake-up).
  struct WaitStats {
    double us = 0;
    std::uint64_t waits = 0;
    std::uint64_t sleeps = 0;
  };
  bool counting_waits() const { return counting_waits_; }
  // Starts counting afresh (on), or stops and keeps the count (off).
  void count_waits(bool on) {
    counting_waits_ = on;
    if (on) wait_stats_ = {}, work_stats_ = {};
  }
  const WaitStats& wait_stats() const { return wait_stats_; }
  void note_wait(double us, std::uint64_t sleeps) const {
    wait_stats_.us += us;
    wait_stats_.waits += 1;
    wait_stats_.sleeps += sleeps;
  }
  // The copies and reductions of the same calls, by where their bytes come from: the caller's
  // memory into a send slot; a received slot (over shared memory, lines the peer's core wrote:
  // where the bytes cross between cores) into the caller's memory or the next slot; a peer's
  // memory read or written in place (the single copy); the rank's own memory (the single copy's
  // folds of what it read). The rest of a call's time is its waits and the hand-overs between
  // them (the slots' flags, the messages).
  enum class Work { into_slots, out_of_slots, peer_memory, own_memory };
  static constexpr int kWorkKinds = static_cast<int>(Work::own_memory) + 1;
  struct WorkStats {
    double us[kWorkKinds] = {};
    double bytes[kWorkKinds] = {};
  };
  const WorkStats& work_stats() const { return work_stats_; }
  void note_work(Work kind, double us, std::size_t bytes) const {
    work_stats_.us[static_cast<int>(kind)] += us;
    work_stats_.bytes[static_cast<int>(kind)] += static_cast<double>(bytes);
  }
  // How long this rank's waits spin before they sleep, learned across calls (waiter.hpp).
  SpinBudget& spin_budget() const { return spin_budget_; }
  // Ends the worker's sleep in a batch of sends and receives when an operation joins it.
  BatchWake& batch_wake() const { return batch_wake_; }
  // What the algorithms keep across this communicator's calls, each in a record of its own.
  AlgorithmRecords& records() { return records_; }
  // Whether a call whose buffers take `bytes` on each rank outgrows the last-level cache, counted
  // over the ranks on this host (they share it).
  bool beyond_cache(std::size_t bytes) const {
    return selector_->inputs().beyond_cache(static_cast<double>(bytes), pacing_.local_world_size);
  }
  // Whether the ring passes stream their copies out of the slots (Primitives::stream_outputs):
  // beyond the cache, and where ranks outnumber the cores from half of it on, since ranks taking
  // turns at a core pass its caches to each other at every switch (docs/tuning.md, "Streaming
  // the ring's outputs").
  bool ring_outputs_beyond_cache(std::size_t bytes) const {
    return beyond_cache(selector_->inputs().oversubscribed() ? 2 * bytes : bytes);
  }
  // A background call shares the rank's core with the rank's computation, unless the rank's
  // thread is waiting for it.
  bool sharing_core() const {
    return background_ && pacing_.background_oversubscribed &&
           callers_waiting_.load(std::memory_order_relaxed) == 0;
  }

 private:
  void use(transport::Connection& connection);
  // What run() and begin_batch() both start with: the call (or none yet), its buffers' paths,
  // the deadline from the first wait, no connections used.
  void begin(const Collective* call, bool background, DataPath* device_path,
             PeerMemory* peer_memory);

  int rank_;
  int size_;
  transport::Transport& transport_;
  base::Pacing pacing_;
  int slots_;
  const base::Halt& halt_;
  const std::atomic<int>& callers_waiting_;
  std::shared_ptr<const Selector> selector_;
  std::atomic<std::chrono::milliseconds::rep> timeout_ms_;
  const Collective* call_ = nullptr;
  bool background_ = false;
  std::size_t slice_bytes_ = 0;
  std::size_t round_slices_ = 0;
  AlgorithmRecords records_;
  ReadRange reads_;
  mutable SpinBudget spin_budget_;
  mutable BatchWake batch_wake_;
  bool counting_waits_ = false;
  mutable WaitStats wait_stats_;
  mutable WorkStats work_stats_;
  std::vector<transport::Connection*> by_peer_;         // connections made so far, by rank
  std::vector<transport::Connection*> by_peer_device_;  // the same for calls on GPU buffers
  HostDataPath host_path_;
  DataPath* device_path_ = nullptr;  // this call's, when its buffers are on a GPU
  PeerMemory* peer_memory_ = nullptr;
  bool device_ordered_ = false;
  PeerMemory* host_windows_ = nullptr;
  base::Deadline deadline_{std::chrono::milliseconds(0)};
  std::vector<transport::Connection*> used_;
  static constexpr std::size_t kHistory = 64;
  std::array<transport::Tag, kHistory> history_{};  // tags of the last calls, by sequence number
};

// Times one copy or reduction into the engine's work count (Engine::Work) while the engine counts
// (DEBUG logging) a call on host buffers; otherwise reads no clock. (A GPU's copies are queued on
// its stream: the time here would be the queueing's.) Where the work runs inside a wait's look (the
// exchanges: Primitives::send_recv and its kin), a wait that does not end at once counts it too.
class WorkTimer {
 public:
  WorkTimer(const Engine& engine, Engine::Work kind, std::size_t bytes)
      : engine_(engine.counting_waits() && engine.device_path() == nullptr ? &engine : nullptr),
        kind_(kind),
        bytes_(bytes) {
    if (engine_ != nullptr) started_ = base::Clock::now();
  }
  ~WorkTimer() {
    if (engine_ != nullptr)
      engine_->note_work(
          kind_, std::chrono::duration<double, std::micro>(base::Clock::now() - started_).count(),
          bytes_);
  }
  WorkTimer(const WorkTimer&) = delete;
  WorkTimer& operator=(const WorkTimer&) = delete;

 private:
  const Engine* engine_;
  Engine::Work kind_;
  std::size_t bytes_;
  base::Clock::time_point started_{};
};

}  // namespace loom::algorithms
