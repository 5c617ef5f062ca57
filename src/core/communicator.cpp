// Communicator lifecycle: join through the store, validate calls, run them in issue order on the
// engine (inline for a blocking call when nothing is queued, else on the worker thread).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "algorithms/engine.hpp"
#include "base/abort_record.hpp"
#include "base/config.hpp"
#include "base/halt.hpp"
#include "base/logging.hpp"
#include "base/trace_internal.hpp"
#include "core/failure_store.hpp"
#include "core/health_monitor.hpp"
#include "core/topology.hpp"
#include "core/work.hpp"
#include "device/device.hpp"
#include "gpu/runtime.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "loom/store.hpp"
#include "loom/trace.hpp"
#include "store/keys.hpp"
#include "transports/cudaipc/cudaipc.hpp"
#include "transports/ibverbs/ib_device.hpp"
#include "transports/ibverbs/ib_transport.hpp"
#include "transports/shm/shm_transport.hpp"
#include "transports/tcp/tcp_transport.hpp"
#include "transports/transport_table.hpp"

namespace loom {

using algorithms::Collective;
using algorithms::Kind;

namespace {

std::string host_name() {
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  return host;
}

std::uint64_t random_token() {
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd() ^ static_cast<std::uint64_t>(::getpid());
}

// Errors from below the engine name the peer and cause; this adds which call was running.
[[noreturn]] void rethrow_in_context(const Collective& call) {
  try {
    throw;
  } catch (const Error& e) {
    rethrow_with_context(e, call.describe());
  } catch (const std::exception& e) {
    throw Error(call.describe() + ": " + e.what());
  }
}

}  // namespace

class Communicator::Impl {
 public:
  Impl(std::shared_ptr<Store> store, int rank, int size, const Options& options,
       const std::string& route_hint)
      : rank_(rank), size_(size) {
    if (size < 1 || size > algorithms::kMaxWorldSize)
      throw InvalidArgument(
          fmt::format("init: world size {} is outside [1, {}]", size, algorithms::kMaxWorldSize));
    if (rank < 0 || rank >= size)
      throw InvalidArgument(fmt::format("init: rank {} is outside [0, {})", rank, size));
    if (!store) throw InvalidArgument(fmt::format("init: rank {}: store is null", rank));
    config_ = base::Config::resolve(options, size);
    base::set_log_rank(rank, size);
    base::set_trace_rank(rank, size);
    // Each communicator built on the same store and prefix gets a fresh key space, so a second
    // communicator never reads the first one's addresses.
    // Each attempt of a restarted job counts afresh, so a rank that died before joining in an
    // earlier attempt cannot leave the ranks on different generations.
    auto base = std::make_shared<PrefixStore>(options.store_prefix, store);
    const std::string attempt =
        config_.restart_count < 0 ? "" : fmt::format("attempt{}", config_.restart_count);
    const std::int64_t generation = base->add(store::keys::generation(attempt, rank), 1);
    store_ =
        std::make_shared<PrefixStore>(store::keys::generation_prefix(attempt, generation), base);

    std::uint64_t token = random_token();
    Bytes mine(reinterpret_cast<std::uint8_t*>(&token),
               reinterpret_cast<std::uint8_t*>(&token) + 8);
    Bytes agreed = store_->compare_set(store::keys::job_token(), {}, mine);
    if (agreed.size() != 8) throw StoreError("init: the job token in the store is malformed");
    std::memcpy(&token, agreed.data(), 8);

    auto tcp = std::make_unique<transport::tcp::TcpTransport>(*store_, rank, size, token, config_,
                                                              route_hint);
    listen_address_ = tcp->listen_address();
    // RDMA is opened before the topology exchange, so that a port is advertised only when it
    // works here; the peers on other hosts that advertise one too are reached through it.
    std::unique_ptr<transport::Transport> rdma;
    std::string rdma_port = "-", rdma_why = "LOOM_TRANSPORT=" + config_.transport;
    if (size > 1 && config_.transport == "auto") {
      if (auto port = transport::ibverbs::choose_port(rdma_why)) {
        try {
          rdma = transport::ibverbs::make_transport(*store_, rank, config_, *port);
          rdma_port =
              fmt::format("{}:{}:{}", port->device, port->port, port->ethernet ? "roce" : "ib");
          rdma_why = port->describe();
        } catch (const Error& e) {
          rdma_why = e.what();
        }
      }
    }
    topology_ = core::exchange_topology(*store_, rank, size, config_.timeout, rdma_port);
    // The spinning policy follows the ranks that really share this host's cores.
    config_.set_local_world_size(topology_.ranks_on_host_of(rank));
    config_.any_host_oversubscribed = topology_.any_host_oversubscribed();
    std::vector<bool> shm_peers(static_cast<std::size_t>(size), false);
    for (int r = 0; r < size; ++r) {
      const bool local = r != rank && topology_.same_host(rank, r);
      if (config_.transport == "shm" && r != rank && !local)
        throw InvalidArgument(fmt::format(
            "init: rank {}: LOOM_TRANSPORT=shm but rank {} is on another host", rank, r));
      shm_peers[static_cast<std::size_t>(r)] = local && config_.transport != "tcp";
    }
    std::unique_ptr<transport::Transport> shm;
    if (std::find(shm_peers.begin(), shm_peers.end(), true) != shm_peers.end())
      shm = std::make_unique<transport::shm::ShmTransport>(*store_, rank, token, config_,
                                                           topology_.pid_of_rank);
    auto table =
        std::make_unique<transport::TransportTable>(std::move(tcp), std::move(shm), shm_peers);
    log_rdma_choice(rdma_port, rdma_why);
    if (rdma) {
      std::vector<bool> rdma_peers(static_cast<std::size_t>(size), false);
      const std::string link = rdma_port.substr(rdma_port.rfind(':'));
      for (int r = 0; r < size; ++r) {
        const std::string& theirs = topology_.rdma_of_rank[static_cast<std::size_t>(r)];
        rdma_peers[static_cast<std::size_t>(r)] = r != rank && !topology_.same_host(rank, r) &&
                                                  theirs != "-" &&
                                                  theirs.substr(theirs.rfind(':')) == link;
      }
      table->set_rdma_transport(std::move(rdma), std::move(rdma_peers));
    }
    // Device buffers of same-host peers: CUDA IPC, when this build and machine have CUDA.
    if (config_.cuda_ipc && std::find(shm_peers.begin(), shm_peers.end(), true) != shm_peers.end())
      if (auto ipc = transport::cudaipc::make_transport(*store_, rank, token, config_,
                                                        topology_.pid_of_rank, shm_peers)) {
        ipc_ = ipc.get();
        table->set_device_transport(std::move(ipc));
      }
    transport_summary_ = describe_peers(*table);
    transport_ = std::move(table);
    engine_ = std::make_unique<algorithms::Engine>(rank, size, *transport_, config_, halt_,
                                                   *callers_waiting_, topology_.ranks_by_host());
    base::log().info(
        "rank {}/{} on {}: {}; tcp at {}, {} sockets per peer; {} slots of {} KiB; timeout {} s; "
        "reduction kernels {}",
        rank, size, host_name(), transport_summary_, listen_address_, config_.sockets_per_peer,
        config_.slots, config_.buffer_bytes / static_cast<std::size_t>(config_.slots) >> 10,
        config_.timeout.count() / 1000, kernels::simd_target());
    if (rank == 0) base::log().info("topology: {}", topology_.describe());
    if (gpus_)
      base::log().info("rank {}: {}; device buffers of local peers via {}", rank,
                       device::describe(), ipc_ ? "cudaipc" : "host slots");
    if (rank == 0)
      base::log().info(
          "algorithms: all_reduce ring, recursive_doubling, one_shot or hierarchical (cost "
          "model), "
          "reduce_scatter ring, "
          "all_gather ring, broadcast chain, reduce chain, barrier dissemination{}",
          config_.algorithm.empty() ? "" : " (LOOM_ALGO=" + config_.algorithm + ")");
    worker_ = std::thread([this] { work_loop(); });
    start_monitor();
  }

  ~Impl() { shutdown(); }

  int rank() const { return rank_; }
  int size() const { return size_; }

  std::string describe() const {
    return fmt::format("rank {}/{} on {}, {}, tcp at {}, {} sockets per peer, {} x {} KiB slots",
                       rank_, size_, host_name(), transport_summary_, listen_address_,
                       config_.sockets_per_peer, config_.slots,
                       config_.buffer_bytes / static_cast<std::size_t>(config_.slots) >> 10);
  }

  // Validates, numbers and queues one call for the worker thread.
  Work submit(Collective call) {
    validate(call);
    place(call);
    auto state = std::make_shared<Work::State>();
    state->waiting = callers_waiting_;
    std::unique_lock lock(mu_);
    admit(call, true);
    state->run = [this, call] { execute(call, true); };
    enqueue(state);
    return Work(state);
  }

  // Validates, numbers and runs one call, returning when it is done. With nothing queued it runs
  // on the caller's thread: no allocation, no thread hand-off.
  void run(Collective call) {
    validate(call);
    place(call);
    std::unique_lock lock(mu_);
    admit(call, false);
    if (!queue_.empty() || busy_) {  // behind earlier asynchronous calls: keep the order
      auto state = std::make_shared<Work::State>();
      state->run = [this, call] { execute(call, true); };
      enqueue(state);
      lock.unlock();
      Work(state).wait();
      return;
    }
    busy_.store(true, std::memory_order_relaxed);
    lock.unlock();
    struct Idle {  // on return or exception: the engine is free, calls queued meanwhile may run
      Impl& impl;
      ~Idle() {
        // Without the lock: clear busy_, then look for calls queued meanwhile. seq_cst on both
        // sides (enqueue counts, then the worker reads busy_): either this sees the count, or
        // the worker sees busy_ clear.
        impl.busy_.store(false, std::memory_order_seq_cst);
        if (impl.queued_.load(std::memory_order_seq_cst) != 0 || impl.halt_.triggered()) {
          std::lock_guard relock(impl.mu_);
          impl.close_if_halted();
          impl.wake_.notify_one();
        }
      }
    } idle{*this};
    execute(call, false);
  }

  void abort() {
    std::lock_guard lock(mu_);
    if (destroyed_) return;
    base::AbortRecord mine{
        base::AbortRecord::Kind::aborted, rank_, rank_,
        fmt::format("rank {} on host {} aborted its communicator", rank_, host_of(rank_))};
    if (!halt_.trigger(mine, true)) return;
    // A running call sees the halt at its next wait (within its spin window or 100 ms of
    // sleep), fails, and tells the others; the connections are closed once the engine is idle,
    // here or by the thread that ran the call, never while the engine uses them.
    if (busy_) return;
    publish(mine);
    transport_->abort();
  }

  // Under mu_, with the engine idle (busy_ clear; seq_cst with abort(): one of the two closes).
  void close_if_halted() {
    if (halt_.triggered() && !destroyed_) transport_->abort();
  }

  // The watch over the other ranks, on its own connection to the store (none when the store
  // cannot open a second one: failures then still reach each rank through its connections).
  void start_monitor() {
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
  void halt_from_record(const base::AbortRecord& record) {
    std::lock_guard lock(mu_);
    if (destroyed_ || !halt_.trigger(record, false)) return;
    base::log().error("rank {}: stopping: {} (reported by rank {})", rank_, record.cause,
                      record.reporter);
    if (!busy_) transport_->abort();
  }

  void shutdown() {
    std::unique_lock lock(mu_);
    if (destroyed_) return;
    destroyed_ = true;
    wake_.notify_all();
    lock.unlock();
    if (worker_.joinable()) worker_.join();
    monitor_.reset();
    engine_.reset();
    gpu_.reset();
    transport_.reset();
  }

 private:
  // Under mu_.
  void enqueue(std::shared_ptr<Work::State> state) {
    queue_.push_back(std::move(state));
    queued_.fetch_add(1, std::memory_order_seq_cst);
    wake_.notify_one();
  }

  // Under mu_: refuses calls on a destroyed or broken communicator, then numbers the call.
  // async: the caller goes on before the call is done.
  void admit(Collective& call, bool async) {
    if (halt_.triggered())
      halt_.raise_unusable(fmt::format("{}: rank {}", algorithms::to_string(call.kind), rank_));
    if (destroyed_)
      throw InvalidArgument(fmt::format("{}: rank {}: the communicator was destroyed",
                                        algorithms::to_string(call.kind), rank_));
    if (call.device >= 0) gpu_->issue(call, async);  // what raises here leaves nothing queued
    if (call.kind == Kind::send)
      call.seq = sent_[call.root]++;
    else if (call.kind == Kind::recv)
      call.seq = received_[call.root]++;
    else
      call.seq = next_seq_++;
  }

  void validate(const Collective& c) const {
    const std::string_view op = algorithms::to_string(c.kind);
    auto bad = [&](const std::string& why) {
      return InvalidArgument(fmt::format("{}: rank {}: {}", op, rank_, why));
    };
    if (size_of(c.dtype) == 0)
      throw bad(fmt::format("unknown data type {}", static_cast<int>(c.dtype)));
    if (static_cast<int>(c.op) > static_cast<int>(ReduceOp::avg))
      throw bad(fmt::format("unknown reduce op {}", static_cast<int>(c.op)));
    const std::size_t elem = size_of(c.dtype);
    std::size_t blocks = (c.kind == Kind::all_gather || c.kind == Kind::reduce_scatter) ? size_ : 1;
    if (c.count > (SIZE_MAX / 4) / elem / blocks)
      throw bad(fmt::format("count {} x {} bytes{} overflows the address space", c.count, elem,
                            blocks > 1 ? fmt::format(" x {} ranks", blocks) : ""));
    const bool rooted = c.kind == Kind::broadcast || c.kind == Kind::reduce;
    const bool p2p = c.kind == Kind::send || c.kind == Kind::recv;
    if ((rooted || p2p) && (c.root < 0 || c.root >= size_))
      throw bad(fmt::format("{} {} is outside [0, {})", p2p ? "peer" : "root", c.root, size_));
    if (p2p && c.root == rank_) throw bad(fmt::format("peer {} is this rank itself", c.root));
    if (c.count > 0 && c.kind != Kind::barrier) {
      if (reads(c) && c.in == nullptr)
        throw bad(fmt::format("argument 'in' is null with count {} > 0", c.count));
      if (writes(c) && c.out == nullptr)
        throw bad(fmt::format("argument 'out' is null with count {} > 0", c.count));
    }
  }

  // What this rank actually reads and writes: the root alone reads broadcast's input and writes
  // reduce's output.
  bool reads(const Collective& c) const {
    return c.kind != Kind::recv && !(c.kind == Kind::broadcast && c.root != rank_);
  }
  bool writes(const Collective& c) const {
    return c.kind != Kind::send && !(c.kind == Kind::reduce && c.root != rank_);
  }

  // Where the call's buffers are: host memory, or one GPU (then the communicator's GPU runtime
  // exists, bound to that device). A stream with host buffers, or buffers on two sides, are
  // refused.
  void place(Collective& c) {
    const std::string_view op = algorithms::to_string(c.kind);
    auto bad = [&](const std::string& why) {
      return InvalidArgument(fmt::format("{}: rank {}: {}", op, rank_, why));
    };
    if (c.count == 0 || c.kind == Kind::barrier) return;
    // -2: a buffer this rank does not touch; without GPUs every buffer is host memory (-1).
    auto where = [&](bool used, const void* p) { return !used ? -2 : gpus_ ? device::of(p) : -1; };
    const int in_device = where(reads(c), c.in);
    const int out_device = where(writes(c), c.out);
    if (in_device != -2 && out_device != -2 && in_device != out_device)
      throw bad(
          fmt::format("'in' is {} but 'out' is {}: one call's buffers must be on one side",
                      in_device < 0 ? "host memory" : fmt::format("on device {}", in_device),
                      out_device < 0 ? "host memory" : fmt::format("on device {}", out_device)));
    const int device = std::max(in_device, out_device);
    if (device < 0) {
      if (c.stream != nullptr)
        throw bad(!device::built() ? "a CUDA stream was given but this build has no CUDA support"
                  : !gpus_         ? "a CUDA stream was given but no GPU is visible"
                                   : "a CUDA stream was given but the buffers are host memory");
      return;
    }
    std::lock_guard lock(gpu_mu_);
    if (!gpu_) {
      gpu_ = gpu::make_runtime(device, rank_, config_);
      if (ipc_) ipc_->prepare(device);
    } else if (gpu_->device() != device) {
      throw bad(
          fmt::format("the buffers are on device {}, but this communicator's device calls "
                      "use device {} (one device per communicator)",
                      device, gpu_->device()));
    }
    c.device = device;
  }

  // background: on the worker thread, while the caller's thread probably computes.
  void execute(const Collective& call, bool background) {
    // A call on device buffers holds its stream until end(), whatever happens here.
    struct StreamRelease {
      gpu::Runtime* runtime;
      const Collective& call;
      bool ok = false;
      ~StreamRelease() {
        if (runtime) runtime->end(call, ok);
      }
    } release{call.device >= 0 ? gpu_.get() : nullptr, call};
    if (halt_.triggered())  // queued before the halt
      halt_.raise_unusable(fmt::format("{}: rank {}", call.describe(), rank_));
    if (call.count == 0 && call.kind != Kind::barrier) {
      release.ok = true;
      return;
    }
    progress_.word.store(call.tag().word, std::memory_order_relaxed);
    progress_.count.store(call.tag().count, std::memory_order_relaxed);
    progress_.in_call.store(true, std::memory_order_relaxed);
    try {
      algorithms::DataPath* device_path =
          release.runtime ? &release.runtime->begin(call, *engine_) : nullptr;
      if (trace::enabled()) {
        trace::Scope span(call.describe(), "collective");
        engine_->run(call, background, device_path);
      } else {
        engine_->run(call, background, device_path);
      }
      release.ok = true;
      progress_.in_call.store(false, std::memory_order_relaxed);
    } catch (...) {
      progress_.in_call.store(false, std::memory_order_relaxed);
      try {
        rethrow_in_context(call);
      } catch (const Error& e) {
        fail(call, e);
      }
    }
  }

  // After a failure: tell the other ranks through the store (or learn what another rank told),
  // close the connections so that no peer waits on this rank, and raise. A rank that only saw a
  // neighbour close raises the cause that the first rank to know published.
  [[noreturn]] void fail(const Collective& call, const Error& e) {
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
  base::AbortRecord record_of(const Error& e) const {
    using Kind = base::AbortRecord::Kind;
    switch (e.kind()) {
      case ErrorKind::mismatch:
        return {Kind::mismatch, rank_, -1,
                "collective mismatch: " + static_cast<const CollectiveMismatch&>(e).detail()};
      case ErrorKind::timeout:
        return {Kind::timeout, rank_, -1, fmt::format("rank {} timed out: {}", rank_, e.what())};
      case ErrorKind::aborted:
        return {Kind::aborted, rank_, rank_,
                fmt::format("rank {} on host {} aborted its communicator", rank_, host_of(rank_))};
      case ErrorKind::peer:
        if (const int peer = static_cast<const PeerError&>(e).peer(); peer >= 0)
          return {Kind::peer_failed, rank_, peer,
                  fmt::format("rank {} on host {} is gone or failed (seen by rank {}: {})", peer,
                              host_of(peer), rank_, e.what())};
        break;
      default:
        break;
    }
    return {Kind::peer_failed, rank_, rank_,
            fmt::format("rank {} on host {} failed: {}", rank_, host_of(rank_), e.what())};
  }

  // Publishes `mine` unless a record stands already; returns the one that stands (`mine` when
  // the store cannot be reached: peers still see this rank's connections close).
  base::AbortRecord publish(const base::AbortRecord& mine) {
    try {
      return core::publish_abort(*store_, mine);
    } catch (const Error& e) {
      base::log().warn("rank {}: cannot publish the failure: {}", rank_, e.what());
      return mine;
    }
  }

  std::string host_of(int rank) const {
    if (rank < 0 || static_cast<std::size_t>(rank) >= topology_.host_of_rank.size()) return "?";
    const std::string& id = topology_.host_of_rank[static_cast<std::size_t>(rank)];
    return id.substr(0, id.find('|'));
  }

  void work_loop() {
    std::unique_lock lock(mu_);
    for (;;) {
      wake_.wait_for(lock, std::chrono::milliseconds(200),
                     [&] { return (!queue_.empty() && !busy_) || destroyed_; });
      if (queue_.empty()) {
        if (destroyed_) return;
        continue;
      }
      if (busy_) continue;
      auto state = queue_.front();
      queue_.pop_front();
      queued_.fetch_sub(1, std::memory_order_seq_cst);
      busy_.store(true, std::memory_order_relaxed);
      lock.unlock();
      state->execute();
      lock.lock();
      busy_.store(false, std::memory_order_relaxed);
      close_if_halted();
    }
  }

  // "shm to ranks 1,2; tcp to ranks 3" for logs and describe().
  std::string describe_peers(const transport::TransportTable& table) const {
    std::vector<std::string> parts;
    for (const char* kind : {"shm", "ibverbs", "tcp"}) {
      std::vector<int> ranks;
      for (int r = 0; r < size_; ++r)
        if (r != rank_ && table.transport_of(r) == kind) ranks.push_back(r);
      if (!ranks.empty())
        parts.push_back(fmt::format("{} to rank(s) {}", kind, fmt::join(ranks, ",")));
    }
    return parts.empty() ? "no peers" : fmt::format("{}", fmt::join(parts, ", "));
  }

  // Why the ranks on other hosts are reached by RDMA or by TCP, once, at INFO.
  void log_rdma_choice(const std::string& mine, const std::string& why) const {
    std::vector<int> remote, without;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_ || topology_.same_host(rank_, r)) continue;
      remote.push_back(r);
      if (topology_.rdma_of_rank[static_cast<std::size_t>(r)] == "-") without.push_back(r);
    }
    if (remote.empty()) {
      base::log().debug("rank {}: no rank on another host; ibverbs: {}", rank_, why);
    } else if (mine == "-") {
      base::log().info("rank {}: ibverbs unavailable ({}): TCP to the {} rank(s) on other hosts",
                       rank_, why, remote.size());
    } else if (!without.empty()) {
      base::log().info("rank {}: ibverbs on {}; rank(s) {} have no RDMA port: TCP to them", rank_,
                       why, fmt::join(without, ","));
    } else {
      base::log().info("rank {}: ibverbs on {} to the {} rank(s) on other hosts", rank_, why,
                       remote.size());
    }
  }

  int rank_;
  int size_;
  base::Config config_;
  std::shared_ptr<Store> store_;
  core::Topology topology_;
  std::string listen_address_;
  std::string transport_summary_;
  std::unique_ptr<transport::Transport> transport_;
  std::unique_ptr<algorithms::Engine> engine_;
  // Calls on device buffers: created by the first one, on the caller's thread (place()).
  const bool gpus_ = device::count() > 0;  // without GPUs every buffer is host memory
  std::mutex gpu_mu_;
  std::unique_ptr<gpu::Runtime> gpu_;
  transport::cudaipc::IpcTransport* ipc_ = nullptr;  // owned by transport_

  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Work::State>> queue_;
  // The engine is running a call (on the worker or a caller's thread). Set under mu_; a caller's
  // thread clears it without the lock.
  std::atomic<bool> busy_{false};
  std::atomic<std::uint32_t> queued_{0};  // queue_.size(), readable without the lock
  base::Halt halt_;
  core::Progress progress_;
  std::unique_ptr<core::HealthMonitor> monitor_;
  // Threads in Work::wait on this communicator's calls (see Engine::caller_waiting).
  std::shared_ptr<std::atomic<int>> callers_waiting_ = std::make_shared<std::atomic<int>>(0);
  bool destroyed_ = false;
  std::uint64_t next_seq_ = 0;
  std::map<int, std::uint64_t> sent_;
  std::map<int, std::uint64_t> received_;
  std::thread worker_;

 public:
  std::unique_ptr<StoreServer> hosted_server;  // when this rank hosts the store (init())
};

// ---- Communicator
// ---------------------------------------------------------------------------------

namespace {
std::string route_hint_of(const std::shared_ptr<Store>& store) {
  if (auto* tcp = dynamic_cast<TcpStore*>(store.get())) return tcp->host();
  return {};
}
}  // namespace

Communicator::Communicator(std::shared_ptr<Store> store, int rank, int size, Options options)
    : impl_(std::make_shared<Impl>(store, rank, size, options, route_hint_of(store))) {}
Communicator::Communicator(Communicator&&) noexcept = default;
Communicator& Communicator::operator=(Communicator&&) noexcept = default;
Communicator::~Communicator() {
  if (impl_) impl_->shutdown();
}

#define LOOM_REQUIRE_IMPL(opname) \
  if (!impl_) throw InvalidArgument(opname ": the communicator was destroyed or moved from")

int Communicator::rank() const {
  LOOM_REQUIRE_IMPL("rank");
  return impl_->rank();
}
int Communicator::size() const {
  LOOM_REQUIRE_IMPL("size");
  return impl_->size();
}
std::string Communicator::describe() const {
  LOOM_REQUIRE_IMPL("describe");
  return impl_->describe();
}
void Communicator::destroy() {
  if (impl_) impl_->shutdown();
}
void Communicator::abort() {
  if (impl_) impl_->abort();
}

namespace {
Collective make(Kind kind, const void* in, void* out, std::size_t count, DataType dtype,
                ReduceOp op, int root, CudaStream stream = nullptr) {
  Collective c{};
  c.stream = stream;
  c.kind = kind;
  c.in = in;
  c.out = out;
  c.count = count;
  c.dtype = dtype;
  c.op = op;
  c.root = root;
  return c;
}
}  // namespace

Work Communicator::all_reduce_async(const void* in, void* out, std::size_t count, DataType dtype,
                                    ReduceOp op, CudaStream stream) {
  LOOM_REQUIRE_IMPL("all_reduce");
  return impl_->submit(make(Kind::all_reduce, in, out, count, dtype, op, 0, stream));
}
Work Communicator::reduce_scatter_async(const void* in, void* out, std::size_t count,
                                        DataType dtype, ReduceOp op, CudaStream stream) {
  LOOM_REQUIRE_IMPL("reduce_scatter");
  return impl_->submit(make(Kind::reduce_scatter, in, out, count, dtype, op, 0, stream));
}
Work Communicator::all_gather_async(const void* in, void* out, std::size_t count, DataType dtype,
                                    CudaStream stream) {
  LOOM_REQUIRE_IMPL("all_gather");
  return impl_->submit(make(Kind::all_gather, in, out, count, dtype, ReduceOp::sum, 0, stream));
}
Work Communicator::broadcast_async(const void* in, void* out, std::size_t count, DataType dtype,
                                   int root, CudaStream stream) {
  LOOM_REQUIRE_IMPL("broadcast");
  return impl_->submit(make(Kind::broadcast, in, out, count, dtype, ReduceOp::sum, root, stream));
}
Work Communicator::reduce_async(const void* in, void* out, std::size_t count, DataType dtype,
                                ReduceOp op, int root, CudaStream stream) {
  LOOM_REQUIRE_IMPL("reduce");
  return impl_->submit(make(Kind::reduce, in, out, count, dtype, op, root, stream));
}
Work Communicator::barrier_async() {
  LOOM_REQUIRE_IMPL("barrier");
  return impl_->submit(make(Kind::barrier, nullptr, nullptr, 0, DataType::u8, ReduceOp::sum, 0));
}
Work Communicator::send_async(const void* buf, std::size_t count, DataType dtype, int peer,
                              CudaStream stream) {
  LOOM_REQUIRE_IMPL("send");
  return impl_->submit(make(Kind::send, buf, nullptr, count, dtype, ReduceOp::sum, peer, stream));
}
Work Communicator::recv_async(void* buf, std::size_t count, DataType dtype, int peer,
                              CudaStream stream) {
  LOOM_REQUIRE_IMPL("recv");
  return impl_->submit(make(Kind::recv, nullptr, buf, count, dtype, ReduceOp::sum, peer, stream));
}

void Communicator::all_reduce(const void* in, void* out, std::size_t count, DataType dtype,
                              ReduceOp op, CudaStream stream) {
  LOOM_REQUIRE_IMPL("all_reduce");
  impl_->run(make(Kind::all_reduce, in, out, count, dtype, op, 0, stream));
}
void Communicator::reduce_scatter(const void* in, void* out, std::size_t count, DataType dtype,
                                  ReduceOp op, CudaStream stream) {
  LOOM_REQUIRE_IMPL("reduce_scatter");
  impl_->run(make(Kind::reduce_scatter, in, out, count, dtype, op, 0, stream));
}
void Communicator::all_gather(const void* in, void* out, std::size_t count, DataType dtype,
                              CudaStream stream) {
  LOOM_REQUIRE_IMPL("all_gather");
  impl_->run(make(Kind::all_gather, in, out, count, dtype, ReduceOp::sum, 0, stream));
}
void Communicator::broadcast(const void* in, void* out, std::size_t count, DataType dtype, int root,
                             CudaStream stream) {
  LOOM_REQUIRE_IMPL("broadcast");
  impl_->run(make(Kind::broadcast, in, out, count, dtype, ReduceOp::sum, root, stream));
}
void Communicator::reduce(const void* in, void* out, std::size_t count, DataType dtype, ReduceOp op,
                          int root, CudaStream stream) {
  LOOM_REQUIRE_IMPL("reduce");
  impl_->run(make(Kind::reduce, in, out, count, dtype, op, root, stream));
}
void Communicator::barrier() {
  LOOM_REQUIRE_IMPL("barrier");
  impl_->run(make(Kind::barrier, nullptr, nullptr, 0, DataType::u8, ReduceOp::sum, 0));
}
void Communicator::send(const void* buf, std::size_t count, DataType dtype, int peer,
                        CudaStream stream) {
  LOOM_REQUIRE_IMPL("send");
  impl_->run(make(Kind::send, buf, nullptr, count, dtype, ReduceOp::sum, peer, stream));
}
void Communicator::recv(void* buf, std::size_t count, DataType dtype, int peer, CudaStream stream) {
  LOOM_REQUIRE_IMPL("recv");
  impl_->run(make(Kind::recv, nullptr, buf, count, dtype, ReduceOp::sum, peer, stream));
}

// Used by init() to keep the store server alive as long as the communicator.
void attach_store_server(Communicator::Impl& impl, std::unique_ptr<StoreServer> server) {
  impl.hosted_server = std::move(server);
}

}  // namespace loom
