// The communicator's public methods, each of which builds one call, checks it and runs or
// queues it; its settings and summaries; its end (shutdown, abort). How it comes to be is in
// joining.cpp.
#include <algorithm>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/logging.hpp"
#include "core/call_checks.hpp"
#include "core/communicator_impl.hpp"
#include "core/peer_links.hpp"
#include "device/device.hpp"
#include "kernels/cpu/cpu_kernels.hpp"

namespace loom {

using algorithms::Collective;
using algorithms::Kind;

void Communicator::Impl::start(transport::cudaipc::IpcTransport* ipc) {
  devices_.configure(ipc, config_.selection.cuda_direct, config_.link.slot_bytes());
  // Its LOOM_ALGO rules are checked here (InvalidArgument).
  selector_ = std::make_shared<const algorithms::Selector>(
      core::selection_inputs(topology_, config_, size_));
  engine_ = std::make_unique<algorithms::Engine>(rank_, size_, *transport_, config_,
                                                 failure_.halt(), *callers_waiting_, selector_);
  // alloc()'s windows are mapped where a call could read them in place: one host, over shm.
  const auto& inputs = selector_->inputs();
  windows_ = std::make_unique<core::HostWindows>(
      size_, size_ == 1 ? "one rank"
             : !inputs.one_host() || inputs.local != transport::TransportKind::shm
                 ? "the ranks are not on one host over shared memory"
                 : "");
  engine_->set_host_windows(windows_.get());
  base::log().info(
      "{}/{} on {}: {}; tcp at {}, {} sockets per peer; {} slots of {} KiB; timeout {} s; "
      "reduction kernels {}",
      who(rank_), size_, core::host_name(), transport_summary_, listen_address_,
      config_.link.sockets_per_peer, config_.link.slots, config_.link.slot_bytes() >> 10,
      config_.timeout.count() / 1000, kernels::simd_target());
  if (rank_ == 0) {
    base::log().info("topology: {}", topology_.describe());
    const auto& costs = selector_->inputs().costs;
    base::log().info("cost model {}: {}", costs.source,
                     costs.source == "defaults" ? "LOOM_PROBE_US=0 or one rank"
                                                : topology_.machine_rates().encode());
    const auto& in = selector_->inputs();
    if (!in.tuned_from.empty())
      base::log().info(
          "tuning table {}: {}", in.tuned_from,
          in.tuned.empty() ? "no entry for this machine, transport and shape" : in.tuned);
  }
  if (devices_.gpus())
    base::log().info("{}: {}; device buffers of local peers via {}", who(rank_), device::describe(),
                     devices_.route());
  // The threads last: whatever threw above leaves none behind (their destructors would not run).
  queue_ = std::make_unique<core::CallQueue>(static_cast<core::CallQueue::Runner&>(*this), rank_,
                                             callers_waiting_);
  failure_.start(store_, config_.failure, *queue_);
  queue_->start();
}

// The rank hosting the store, as the child of `parent` numbers it (-1 when it is not one of its
// members).
void Communicator::Impl::inherit_store_host(const Impl& parent) {
  const int parent_host = parent.failure_.store_host_rank();
  int store_host = parent_host < 0 ? parent_host : -1;
  for (int r = 0; r < size_; ++r)
    if (parent_ranks_[static_cast<std::size_t>(r)] == parent_host) store_host = r;
  failure_.set_store_host(store_host, parent.failure_.store_where());
}

Work Communicator::Impl::submit(Collective call) {
  check(call);
  return queue_->submit(std::move(call));
}

void Communicator::Impl::run(Collective call) {
  check(call);
  queue_->run(std::move(call));
}

void Communicator::Impl::check(Collective& call) {
  const core::CallBytes moved = core::check_call(call, rank_, size_);
  devices_.place(call, moved.read > 0, moved.written > 0);
}

std::string Communicator::Impl::tuning_key() const {
  const auto [transport, shape] = core::tuning_key(selector_->inputs());
  return transport + " " + shape;
}

void Communicator::Impl::set_timeout(std::chrono::milliseconds timeout) {
  if (timeout.count() <= 0)
    throw InvalidArgument(fmt::format("set_timeout: {}: the timeout must be positive, not {} ms",
                                      who(rank_), timeout.count()));
  bool closed = false;
  queue_->locked([&](const core::CallQueue::Now& now) {
    // The engine goes only after the queue closed: under its lock it is here.
    if (!(closed = now.closed)) {
      config_.timeout = timeout;
      engine_->set_timeout(timeout);
    }
    return false;
  });
  if (closed)
    throw InvalidArgument(
        fmt::format("set_timeout: {}: the communicator was destroyed", who(rank_)));
}

// "rank 3", or "rank 1 (rank 3 of the parent)" in a communicator made by split().
std::string Communicator::Impl::who(int rank) const {
  if (parent_ranks_.empty() || rank < 0 || rank >= size_) return fmt::format("rank {}", rank);
  return fmt::format("rank {} (rank {} of the parent)", rank,
                     parent_ranks_[static_cast<std::size_t>(rank)]);
}

Communicator::Impl::~Impl() {
  shutdown();
}

std::string Communicator::Impl::describe() const {
  return fmt::format("rank {}/{} on {}, {}, tcp at {}, {} sockets per peer, {} x {} KiB slots",
                     rank_, size_, core::host_name(), transport_summary_, listen_address_,
                     config_.link.sockets_per_peer, config_.link.slots,
                     config_.link.slot_bytes() >> 10);
}

Estimate Communicator::Impl::estimate(Operation op, std::size_t bytes, bool device,
                                      bool shared) const {
  if (std::find(std::begin(algorithms::kAllKinds), std::end(algorithms::kAllKinds), op) ==
      std::end(algorithms::kAllKinds))
    throw InvalidArgument(fmt::format("estimate: rank {}: operation {} is not one of Loom's", rank_,
                                      static_cast<int>(op)));
  // The engine's own selector: this choice is the call's.
  // Whether the peers' memory is mapped, as the call's dispatch asks it: device buffers through
  // CUDA IPC, host buffers in the shared windows.
  const bool windows = device ? devices_.peers_mapped() : shared && windows_->any();
  const algorithms::Selector::Choice c = selector_->choose(op, bytes, device, windows);
  return Estimate{std::string(c.algorithm->name),  c.slice, c.predicted_us, c.forced, c.tuned,
                  selector_->inputs().costs.source};
}

void Communicator::Impl::shutdown() {
  // Refuses later calls, runs those queued, waits for a blocking call on another thread (it ends
  // at its deadline, or at once after abort()).
  if (!queue_ || !queue_->close()) return;
  failure_.stop_monitor();
  engine_.reset();
  devices_.close();
  transport_.reset();
  failure_.keep_store_for_survivors(hosted_server != nullptr);
}

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
std::string Communicator::tuning_key() const {
  LOOM_REQUIRE_IMPL("tuning_key");
  return impl_->tuning_key();
}
Estimate Communicator::estimate(Operation op, std::size_t bytes, bool device, bool shared) const {
  LOOM_REQUIRE_IMPL("estimate");
  return impl_->estimate(op, bytes, device, shared);
}
Communicator::Communicator(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

std::optional<Communicator> Communicator::split(int color, int key) {
  return split(color, key, Options{});  // no option set: the parent's settings throughout
}

std::optional<Communicator> Communicator::split(int color, int key, const Options& options) {
  LOOM_REQUIRE_IMPL("split");
  // A bad option is raised after the split's exchange, which tells the other members of this
  // rank's child (they raise too) and leaves this communicator as it was on every rank.
  base::Config config = impl_->config();
  std::string refused;
  try {
    config = impl_->config().for_child(options);
    algorithms::Selector::check_rules(config.selection.algorithm);
  } catch (const InvalidArgument& e) {
    refused = fmt::format("split: rank {}: {}", impl_->rank(), e.what());
  }
  auto child = impl_->split(color, key, config, refused);
  if (!child) return std::nullopt;
  return Communicator(std::move(child));
}

Communicator Communicator::create_group(std::span<const int> ranks, const Options& options) {
  LOOM_REQUIRE_IMPL("create_group");
  const std::vector<int> members(ranks.begin(), ranks.end());
  base::Config config;
  try {
    config = impl_->config().for_child(options);
    algorithms::Selector::check_rules(config.selection.algorithm);
  } catch (const InvalidArgument& e) {
    // The other members compare the child's settings with this rank's before they build it:
    // told through its key space, they raise InvalidArgument naming this rank.
    impl_->refuse_group(members, e.what());
    throw InvalidArgument(fmt::format("create_group: rank {}: {}", impl_->rank(), e.what()));
  }
  return Communicator(impl_->create_group(members, config));
}

void* Communicator::alloc(std::size_t bytes) {
  LOOM_REQUIRE_IMPL("alloc");
  return impl_->alloc(bytes);
}

std::shared_ptr<void> Communicator::alloc_shared(std::size_t bytes) {
  LOOM_REQUIRE_IMPL("alloc_shared");
  return impl_->alloc_shared(bytes);
}

void Communicator::free(void* p) {
  LOOM_REQUIRE_IMPL("free");
  impl_->free(p);
}

Communicator Communicator::shrink(std::chrono::milliseconds timeout) {
  LOOM_REQUIRE_IMPL("shrink");
  return Communicator(impl_->shrink(timeout, {}));
}

Communicator Communicator::shrink(std::span<const int> exclude, std::chrono::milliseconds timeout) {
  LOOM_REQUIRE_IMPL("shrink");
  return Communicator(impl_->shrink(timeout, std::vector<int>(exclude.begin(), exclude.end())));
}

void Communicator::set_timeout(std::chrono::milliseconds timeout) {
  LOOM_REQUIRE_IMPL("set_timeout");
  impl_->set_timeout(timeout);
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

// The uneven calls: their counts and displacements are copied (an async call may outlive them).
Collective make_uneven(Kind kind, const void* in, void* out, DataType dtype, ReduceOp op,
                       std::span<const std::size_t> send_counts,
                       std::span<const std::size_t> send_displs,
                       std::span<const std::size_t> counts, std::span<const std::size_t> displs,
                       CudaStream stream) {
  auto layout = std::make_shared<algorithms::Layout>();
  layout->send_counts.assign(send_counts.begin(), send_counts.end());
  layout->send_displs.assign(send_displs.begin(), send_displs.end());
  layout->counts.assign(counts.begin(), counts.end());
  layout->displs.assign(displs.begin(), displs.end());
  std::size_t total = 0;
  if (kind != Kind::all_to_all_v)
    for (std::size_t k : counts) total += k;  // may wrap: validate() checks the sum itself
  Collective c = make(kind, in, out, total, dtype, op, 0, stream);
  c.layout = std::move(layout);
  return c;
}

}  // namespace

void Communicator::Impl::run_own(Kind kind, const void* in, void* out, std::size_t count,
                                 DataType dtype, ReduceOp op) {
  run(make(kind, in, out, count, dtype, op, 0));
}

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
Work Communicator::gather_async(const void* in, void* out, std::size_t count, DataType dtype,
                                int root, CudaStream stream) {
  LOOM_REQUIRE_IMPL("gather");
  return impl_->submit(make(Kind::gather, in, out, count, dtype, ReduceOp::sum, root, stream));
}
Work Communicator::scatter_async(const void* in, void* out, std::size_t count, DataType dtype,
                                 int root, CudaStream stream) {
  LOOM_REQUIRE_IMPL("scatter");
  return impl_->submit(make(Kind::scatter, in, out, count, dtype, ReduceOp::sum, root, stream));
}
Work Communicator::all_to_all_async(const void* in, void* out, std::size_t count, DataType dtype,
                                    CudaStream stream) {
  LOOM_REQUIRE_IMPL("all_to_all");
  return impl_->submit(make(Kind::all_to_all, in, out, count, dtype, ReduceOp::sum, 0, stream));
}
Work Communicator::all_to_all_v_async(const void* in, std::span<const std::size_t> send_counts,
                                      std::span<const std::size_t> send_displs, void* out,
                                      std::span<const std::size_t> recv_counts,
                                      std::span<const std::size_t> recv_displs, DataType dtype,
                                      CudaStream stream) {
  LOOM_REQUIRE_IMPL("all_to_all_v");
  return impl_->submit(make_uneven(Kind::all_to_all_v, in, out, dtype, ReduceOp::sum, send_counts,
                                   send_displs, recv_counts, recv_displs, stream));
}
Work Communicator::all_gather_v_async(const void* in, void* out,
                                      std::span<const std::size_t> counts,
                                      std::span<const std::size_t> displs, DataType dtype,
                                      CudaStream stream) {
  LOOM_REQUIRE_IMPL("all_gather_v");
  return impl_->submit(make_uneven(Kind::all_gather_v, in, out, dtype, ReduceOp::sum, {}, {},
                                   counts, displs, stream));
}
Work Communicator::reduce_scatter_v_async(const void* in, void* out,
                                          std::span<const std::size_t> counts,
                                          std::span<const std::size_t> displs, DataType dtype,
                                          ReduceOp op, CudaStream stream) {
  LOOM_REQUIRE_IMPL("reduce_scatter_v");
  return impl_->submit(
      make_uneven(Kind::reduce_scatter_v, in, out, dtype, op, {}, {}, counts, displs, stream));
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
void Communicator::gather(const void* in, void* out, std::size_t count, DataType dtype, int root,
                          CudaStream stream) {
  LOOM_REQUIRE_IMPL("gather");
  impl_->run(make(Kind::gather, in, out, count, dtype, ReduceOp::sum, root, stream));
}
void Communicator::scatter(const void* in, void* out, std::size_t count, DataType dtype, int root,
                           CudaStream stream) {
  LOOM_REQUIRE_IMPL("scatter");
  impl_->run(make(Kind::scatter, in, out, count, dtype, ReduceOp::sum, root, stream));
}
void Communicator::all_to_all(const void* in, void* out, std::size_t count, DataType dtype,
                              CudaStream stream) {
  LOOM_REQUIRE_IMPL("all_to_all");
  impl_->run(make(Kind::all_to_all, in, out, count, dtype, ReduceOp::sum, 0, stream));
}
void Communicator::all_to_all_v(const void* in, std::span<const std::size_t> send_counts,
                                std::span<const std::size_t> send_displs, void* out,
                                std::span<const std::size_t> recv_counts,
                                std::span<const std::size_t> recv_displs, DataType dtype,
                                CudaStream stream) {
  LOOM_REQUIRE_IMPL("all_to_all_v");
  impl_->run(make_uneven(Kind::all_to_all_v, in, out, dtype, ReduceOp::sum, send_counts,
                         send_displs, recv_counts, recv_displs, stream));
}
void Communicator::all_gather_v(const void* in, void* out, std::span<const std::size_t> counts,
                                std::span<const std::size_t> displs, DataType dtype,
                                CudaStream stream) {
  LOOM_REQUIRE_IMPL("all_gather_v");
  impl_->run(make_uneven(Kind::all_gather_v, in, out, dtype, ReduceOp::sum, {}, {}, counts, displs,
                         stream));
}
void Communicator::reduce_scatter_v(const void* in, void* out, std::span<const std::size_t> counts,
                                    std::span<const std::size_t> displs, DataType dtype,
                                    ReduceOp op, CudaStream stream) {
  LOOM_REQUIRE_IMPL("reduce_scatter_v");
  impl_->run(
      make_uneven(Kind::reduce_scatter_v, in, out, dtype, op, {}, {}, counts, displs, stream));
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

const base::Config& Communicator::Impl::config() const {
  return config_;
}

int Communicator::Impl::failed_rank() const {
  return failure_.failed_rank(size_);
}

void Communicator::Impl::close_connections() {
  transport_->abort();
}

void Communicator::Impl::abort() {
  failure_.abort(*queue_);
}

void Communicator::Impl::set_store_host(int rank, std::string where) {
  failure_.set_store_host(rank, std::move(where));
}

std::string Communicator::Impl::host_of(int rank) const {
  if (rank < 0 || static_cast<std::size_t>(rank) >= topology_.host_of_rank.size()) return "?";
  const std::string& id = topology_.host_of_rank[static_cast<std::size_t>(rank)];
  return id.substr(0, id.find('|'));
}

}  // namespace loom
