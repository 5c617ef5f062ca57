// Communicator lifetime: joining through the store, shutting down, and the public methods, each
// of which builds one call and runs or queues it.
#include <unistd.h>

#include <cstring>
#include <random>

#include <fmt/format.h>

#include "base/logging.hpp"
#include "base/trace_internal.hpp"
#include "core/communicator_impl.hpp"
#include "device/device.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "store/keys.hpp"

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

}  // namespace

Communicator::Impl::Impl(std::shared_ptr<Store> store, int rank, int size, const Options& options,
                         const std::string& route_hint)
    : rank_(rank), size_(size), gpus_(device::count() > 0) {
  if (size < 1) throw InvalidArgument(fmt::format("init: world size {} must be at least 1", size));
  if (rank < 0 || rank >= size)
    throw InvalidArgument(fmt::format("init: rank {} is outside [0, {})", rank, size));
  if (!store) throw InvalidArgument(fmt::format("init: rank {}: store is null", rank));
  config_ = base::Config::resolve(options, size);
  base::set_log_rank(rank, size);
  base::set_trace_rank(rank, size);
  // Each communicator built on the same store and prefix gets a fresh key space, so a second
  // communicator never reads the first one's addresses; each attempt of a restarted job counts
  // afresh, so a rank that died before joining in an earlier attempt cannot leave the ranks on
  // different generations.
  auto base = std::make_shared<PrefixStore>(options.store_prefix, store);
  const std::string attempt =
      config_.restart_count < 0 ? "" : fmt::format("attempt{}", config_.restart_count);
  const std::int64_t generation = base->add(store::keys::generation(attempt, rank), 1);
  store_ = std::make_shared<PrefixStore>(store::keys::generation_prefix(attempt, generation), base);

  std::uint64_t token = random_token();
  Bytes mine(reinterpret_cast<std::uint8_t*>(&token), reinterpret_cast<std::uint8_t*>(&token) + 8);
  Bytes agreed = store_->compare_set(store::keys::job_token(), {}, mine);
  if (agreed.size() != 8) throw StoreError("init: the job token in the store is malformed");
  std::memcpy(&token, agreed.data(), 8);

  build_transports(token, route_hint);
  engine_ = std::make_unique<algorithms::Engine>(rank, size, *transport_, config_, halt_,
                                                 *callers_waiting_, selection_inputs());
  base::log().info(
      "rank {}/{} on {}: {}; tcp at {}, {} sockets per peer; {} slots of {} KiB; timeout {} s; "
      "reduction kernels {}",
      rank, size, host_name(), transport_summary_, listen_address_, config_.sockets_per_peer,
      config_.slots, config_.buffer_bytes / static_cast<std::size_t>(config_.slots) >> 10,
      config_.timeout.count() / 1000, kernels::simd_target());
  if (rank == 0) base::log().info("topology: {}", topology_.describe());
  if (gpus_)
    base::log().info("rank {}: {}; device buffers of local peers via {}", rank, device::describe(),
                     ipc_ ? "cudaipc" : "host slots");
  if (rank == 0)
    base::log().info(
        "algorithms: all_reduce ring, recursive_doubling, one_shot or hierarchical (cost "
        "model), reduce_scatter ring, all_gather ring, broadcast chain, reduce chain, barrier "
        "dissemination{}",
        config_.algorithm.empty() ? "" : " (LOOM_ALGO=" + config_.algorithm + ")");
  // The threads last: whatever threw above leaves none behind (their destructors would not run).
  start_monitor();
  worker_ = std::thread([this] { work_loop(); });
}

Communicator::Impl::~Impl() {
  shutdown();
}

std::string Communicator::Impl::describe() const {
  return fmt::format("rank {}/{} on {}, {}, tcp at {}, {} sockets per peer, {} x {} KiB slots",
                     rank_, size_, host_name(), transport_summary_, listen_address_,
                     config_.sockets_per_peer, config_.slots,
                     config_.buffer_bytes / static_cast<std::size_t>(config_.slots) >> 10);
}

void Communicator::Impl::shutdown() {
  {
    std::lock_guard lock(mu_);
    if (destroyed_) return;
    destroyed_ = true;  // admit() refuses every later call
    closing_.store(true, std::memory_order_seq_cst);
    wake_.notify_all();
  }
  if (worker_.joinable()) worker_.join();  // it runs what was queued, then returns
  {
    // A blocking call on another thread still uses the engine: it ends at its deadline, or at
    // once after abort().
    std::unique_lock lock(mu_);
    wake_.wait(lock, [&] { return !busy_.load(std::memory_order_seq_cst); });
  }
  monitor_.reset();
  engine_.reset();
  {
    std::lock_guard lock(gpu_mu_);
    gpu_.reset();
  }
  transport_.reset();
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

}  // namespace loom
