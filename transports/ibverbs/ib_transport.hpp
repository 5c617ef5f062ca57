// InfiniBand verbs transport (rdma-core's libibverbs) for peers on other hosts. One reliable-
// connected queue pair per peer, its own completion queue and completion channel. The slot FIFO
// of the transport interface maps onto RDMA as follows:
//   - the receiver's slots are registered memory; the sender fills a registered staging slot
//     (a 64-byte header with size and tag, then the payload) and RDMA-writes it with immediate
//     data into the receiver's slot of the same number; the immediate (the message number)
//     raises a completion on the receiver, whose posted receive it consumes;
//   - each release on the receiver returns a credit: a zero-byte send with immediate data (the
//     released total) that raises a completion on the sender;
//   - completions are polled in progress(); a wait sleeps on the completion channel's descriptor
//     after arming the queue with ibv_req_notify_cq.
// Queue pairs go RESET -> INIT -> RTR -> RTS as in rdma-core's ibv_rc_pingpong, with the
// connection records (LID or GID, QPN, PSN, MTU, slot address and rkey) exchanged through the
// store, sealed with an HMAC under the job secret. connect() never waits for the peer (connections
// are made lazily in ring order, and a rank waiting inside connect could close a cycle of waits):
// it publishes this side's record and returns; the connection completes itself on later calls,
// looking (at most every millisecond) for the peer's record, then for the peer's "ready" (its queue
// pair in RTR), before it lets the first write go.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>

#include "base/config.hpp"
#include "loom/store.hpp"
#include "transports/ibverbs/connection_record.hpp"
#include "transports/ibverbs/ib_device.hpp"
#include "transports/ibverbs/registration_cache.hpp"
#include "transports/ibverbs/slot_credits.hpp"
#include "transports/setup.hpp"
#include "transports/transport.hpp"

struct ibv_context;
struct ibv_pd;
struct ibv_cq;
struct ibv_qp;
struct ibv_comp_channel;

namespace loom::transport::ibverbs {

inline constexpr std::size_t kSlotHeader = 64;

class IbConnection final : public Connection {
 public:
  // secret, job_token: what seals the connection records (connection_record.hpp).
  IbConnection(Store& store, int self, int peer, ibv_context* context, ibv_pd* pd,
               RegistrationCache& cache, const PortChoice& port, std::size_t slot_bytes,
               std::size_t slots, const std::string& secret, std::uint64_t job_token);
  ~IbConnection() override;
  // This side's half of the connection, for the peer.
  ConnectionRecord local_record() const;
  // Publishes local_record() for the peer, sealed.
  void publish();
  // Moves the queue pair to the error state: the peer's operations on it fail.
  void close();

  int peer() const override { return peer_; }
  std::size_t slot_bytes() const override { return slot_bytes_; }
  using Connection::try_acquire_send_slot;
  std::byte* try_acquire_send_slot(std::size_t bytes) override;
  void post_send(std::size_t bytes, Tag tag) override;
  std::optional<RecvSlot> try_recv_slot() override;
  void release_recv_slot() override;
  bool progress() override { return poll_completions(); }
  bool send_idle() const override { return !pending_credit_; }
  void add_poll_fds(std::vector<pollfd>& fds) const override;
  void sleep(int timeout_ms) override;
  std::string describe() const override;
  std::vector<Region> host_regions() const override;

 private:
  void teardown();
  // Completes the connection as far as the store allows without waiting; true once both queue
  // pairs are ready.
  bool establish();
  void connect_to(const ConnectionRecord& remote);
  bool poll_completions();
  void post_receive();
  void send_credit(std::uint32_t immediate);
  void modify(int state, const ConnectionRecord* remote);
  [[noreturn]] void fail(const std::string& what) const;

  Store& store_;
  int self_, peer_;
  const std::string& secret_;
  std::uint64_t job_token_;
  PortChoice port_;
  RegistrationCache& cache_;
  ibv_context* context_;
  ibv_pd* pd_;
  std::size_t slot_bytes_, stride_, slots_;
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  ibv_qp* qp_ = nullptr;
  std::uint32_t psn_;
  int max_send_wr_, max_recv_wr_;
  std::byte* send_buffer_ = nullptr;
  std::byte* recv_buffer_ = nullptr;
  Registration send_registration_, recv_registration_;
  std::optional<ConnectionRecord> remote_;
  SlotCredits credits_;
  int outstanding_sends_ = 0;
  std::optional<std::uint32_t> pending_credit_;  // a credit that found the send queue full
  bool closed_ = false;
  bool peer_ready_ = false;
  std::chrono::steady_clock::time_point next_look_{};  // when establish() may ask the store again
};

class IbTransport final : public Transport {
 public:
  // Opens the port's device; raises Error when it cannot.
  // job_token: the communicator's own (a child of split or shrink derives its own): with the
  // secret it seals the connection records.
  IbTransport(Store& store, int rank, const base::LinkConfig& link, PortChoice port,
              std::uint64_t job_token);
  ~IbTransport() override;
  TransportKind kind_to(int) const override { return TransportKind::ibverbs; }
  Connection& connect(int peer, const base::Deadline& deadline, const base::Halt& halt) override;
  void abort() override;

 private:
  Store& store_;
  int rank_;
  std::string secret_;
  std::uint64_t job_token_ = 0;
  std::size_t slot_bytes_, slots_;
  PortChoice port_;
  ibv_context* context_ = nullptr;
  ibv_pd* pd_ = nullptr;
  std::unique_ptr<RegistrationCache> cache_;
  std::map<int, std::unique_ptr<IbConnection>> connections_;
};

// For the communicator, without the verbs headers: the transport over `port` for the
// communicator whose token is `job_token`, or nullptr in a build without libibverbs.
std::unique_ptr<Transport> make_transport(const Setup& setup, const PortChoice& port);

}  // namespace loom::transport::ibverbs
