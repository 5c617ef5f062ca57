#include "transports/ibverbs/ib_transport.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>

#include <fmt/format.h>

#include "base/logging.hpp"
#include "store/keys.hpp"

namespace loom::transport::ibverbs {
namespace {

enum WorkKind : std::uint64_t { kData = 1, kCredit = 2, kReceive = 3 };

struct SlotHeader {
  std::uint64_t bytes;
  std::uint64_t tag_word;
  std::uint64_t tag_count;
  std::uint64_t seq;
};
static_assert(sizeof(SlotHeader) <= kSlotHeader);

std::size_t round_up(std::size_t n, std::size_t to) {
  return (n + to - 1) / to * to;
}

std::byte* page_aligned(std::size_t bytes) {
  void* p = std::aligned_alloc(4096, round_up(bytes, 4096));
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, round_up(bytes, 4096));
  return static_cast<std::byte*>(p);
}

}  // namespace

IbConnection::IbConnection(Store& store, int self, int peer, ibv_context* context, ibv_pd* pd,
                           RegistrationCache& cache, const PortChoice& port, std::size_t slot_bytes,
                           std::size_t slots, const std::string& secret, std::uint64_t job_token)
    : store_(store),
      self_(self),
      peer_(peer),
      secret_(secret),
      job_token_(job_token),
      port_(port),
      cache_(cache),
      context_(context),
      pd_(pd),
      slot_bytes_(slot_bytes),
      stride_(round_up(slot_bytes + kSlotHeader, 64)),
      slots_(slots),
      psn_(std::random_device{}() & 0xffffff),
      max_send_wr_(static_cast<int>(2 * slots + 4)),
      max_recv_wr_(static_cast<int>(2 * slots + 4)),
      credits_(slots) {
  struct Cleanup {  // a constructor that throws runs no destructor: free what was made
    IbConnection* c;
    bool done = false;
    ~Cleanup() {
      if (!done) c->teardown();
    }
  } cleanup{this};
  channel_ = ibv_create_comp_channel(context_);
  if (!channel_) fail(fmt::format("ibv_create_comp_channel: {}", std::strerror(errno)));
  // Non-blocking, so that progress() can drain its events without waiting.
  ::fcntl(channel_->fd, F_SETFL, ::fcntl(channel_->fd, F_GETFL) | O_NONBLOCK);
  cq_ = ibv_create_cq(context_, max_send_wr_ + max_recv_wr_, nullptr, channel_, 0);
  if (!cq_) fail(fmt::format("ibv_create_cq: {}", std::strerror(errno)));
  ibv_qp_init_attr init{};
  init.send_cq = cq_;
  init.recv_cq = cq_;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = static_cast<std::uint32_t>(max_send_wr_);
  init.cap.max_recv_wr = static_cast<std::uint32_t>(max_recv_wr_);
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  qp_ = ibv_create_qp(pd_, &init);
  if (!qp_) fail(fmt::format("ibv_create_qp: {}", std::strerror(errno)));
  send_buffer_ = page_aligned(slots_ * stride_);
  recv_buffer_ = page_aligned(slots_ * stride_);
  send_registration_ = cache_.acquire(send_buffer_, slots_ * stride_);
  recv_registration_ = cache_.acquire(recv_buffer_, slots_ * stride_);
  modify(IBV_QPS_INIT, nullptr);
  // Receives must be posted before the peer can write: a write with immediate consumes one.
  for (int i = 0; i < max_recv_wr_; ++i) post_receive();
  cleanup.done = true;
}

IbConnection::~IbConnection() {
  teardown();
}

void IbConnection::teardown() {
  if (qp_) ibv_destroy_qp(qp_);
  qp_ = nullptr;
  if (cq_) ibv_destroy_cq(cq_);
  cq_ = nullptr;
  if (channel_) ibv_destroy_comp_channel(channel_);
  channel_ = nullptr;
  auto drop = [this](std::byte*& buffer, Registration& registration) {
    if (buffer == nullptr) return;
    if (registration.handle) cache_.release(registration);
    registration = {};
    cache_.invalidate(buffer, slots_ * stride_);  // deregistered before the memory goes
    std::free(buffer);
    buffer = nullptr;
  };
  drop(send_buffer_, send_registration_);
  drop(recv_buffer_, recv_registration_);
}

void IbConnection::fail(const std::string& what) const {
  throw PeerError(fmt::format("ibverbs: rank {} with rank {}{}: {}", self_, peer_,
                              qp_ ? fmt::format(" (QP {})", qp_->qp_num) : std::string(), what),
                  peer_);
}

ConnectionRecord IbConnection::local_record() const {
  ConnectionRecord r;
  r.lid = port_.lid;
  r.ethernet = port_.ethernet;
  ibv_gid gid{};
  if (ibv_query_gid(context_, static_cast<std::uint8_t>(port_.port), port_.gid_index, &gid) == 0)
    std::memcpy(r.gid.data(), gid.raw, 16);
  r.qpn = qp_->qp_num;
  r.psn = psn_;
  r.mtu = port_.active_mtu;
  r.slots_addr = reinterpret_cast<std::uint64_t>(recv_buffer_);
  r.slots_rkey = recv_registration_.rkey;
  r.slot_stride = stride_;
  r.slots = static_cast<std::uint32_t>(slots_);
  return r;
}

void IbConnection::modify(int state, const ConnectionRecord* remote) {
  ibv_qp_attr attr{};
  int mask = IBV_QP_STATE;
  attr.qp_state = static_cast<ibv_qp_state>(state);
  if (state == IBV_QPS_INIT) {
    attr.pkey_index = 0;
    attr.port_num = static_cast<std::uint8_t>(port_.port);
    attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    mask |= IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  } else if (state == IBV_QPS_RTR) {
    attr.path_mtu = static_cast<ibv_mtu>(std::min(port_.active_mtu, remote->mtu));
    attr.dest_qp_num = remote->qpn;
    attr.rq_psn = remote->psn;
    attr.max_dest_rd_atomic = 1;
    attr.min_rnr_timer = 12;
    attr.ah_attr.port_num = static_cast<std::uint8_t>(port_.port);
    if (remote->ethernet) {
      attr.ah_attr.is_global = 1;
      std::memcpy(attr.ah_attr.grh.dgid.raw, remote->gid.data(), 16);
      attr.ah_attr.grh.sgid_index = static_cast<std::uint8_t>(port_.gid_index);
      attr.ah_attr.grh.hop_limit = 64;
    } else {
      attr.ah_attr.dlid = remote->lid;
    }
    mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
            IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  } else if (state == IBV_QPS_RTS) {
    attr.timeout = 14;  // 4.096 us * 2^14 = 67 ms per try
    attr.retry_cnt = 7;
    // 6, the largest finite count (7 retries forever): the receive queue has room for every
    // write and credit the peer can have in flight, so running out of receives means a broken peer.
    attr.rnr_retry = 6;
    attr.sq_psn = psn_;
    attr.max_rd_atomic = 1;
    mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
            IBV_QP_MAX_QP_RD_ATOMIC;
  }
  if (const int e = ibv_modify_qp(qp_, &attr, mask); e != 0)
    fail(fmt::format("ibv_modify_qp to state {}: {}", state, std::strerror(e)));
}

void IbConnection::publish() {
  const std::string record = seal(local_record(), secret_, {job_token_, self_, peer_});
  store_.set(store::keys::ib_record(self_, peer_), Bytes(record.begin(), record.end()));
}

void IbConnection::connect_to(const ConnectionRecord& remote) {
  if (remote.slots != slots_ || remote.slot_stride != stride_)
    fail(
        fmt::format("the peer has {} slots of {} bytes, this rank {} of {} (LOOM_BUFFSIZE or "
                    "LOOM_SLOTS differ)",
                    remote.slots, remote.slot_stride, slots_, stride_));
  if (remote.ethernet != port_.ethernet) fail("one side is RoCE, the other InfiniBand");
  remote_ = remote;
  modify(IBV_QPS_RTR, &remote);
  modify(IBV_QPS_RTS, &remote);
}

bool IbConnection::establish() {
  if (peer_ready_) return true;
  const auto now = std::chrono::steady_clock::now();
  if (now < next_look_) return false;
  next_look_ = now + std::chrono::milliseconds(1);
  if (!remote_) {
    const std::string key = store::keys::ib_record(peer_, self_);
    if (!store_.check({key}).front()) return false;
    const Bytes theirs = store_.get(key, std::chrono::milliseconds(1000));
    std::string why;
    auto remote =
        unseal(std::string_view(reinterpret_cast<const char*>(theirs.data()), theirs.size()),
               secret_, {job_token_, peer_, self_}, &why);
    if (!remote) fail("refused its connection record: " + why);
    connect_to(*remote);
    // The peer writes only after it has seen this: a write to a queue pair still in INIT
    // would be dropped and retried, and could exhaust the retries.
    store_.set(store::keys::ib_ready(self_, peer_), Bytes{1});
  }
  if (!store_.check({store::keys::ib_ready(peer_, self_)}).front()) return false;
  peer_ready_ = true;
  base::log().debug("connected: {}", describe());
  return true;
}

void IbConnection::close() {
  if (closed_ || !qp_) return;
  closed_ = true;
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  ibv_modify_qp(qp_, &attr, IBV_QP_STATE);
}

void IbConnection::post_receive() {
  ibv_recv_wr wr{};
  wr.wr_id = kReceive;
  wr.sg_list = nullptr;
  wr.num_sge = 0;  // writes land in the slots; credits carry no payload
  ibv_recv_wr* bad = nullptr;
  if (const int e = ibv_post_recv(qp_, &wr, &bad); e != 0)
    fail(fmt::format("ibv_post_recv: {}", std::strerror(e)));
}

std::byte* IbConnection::try_acquire_send_slot(std::size_t /*bytes*/) {
  auto can = [this] { return credits_.can_post() && outstanding_sends_ < max_send_wr_; };
  if (!establish()) return nullptr;
  if (!can()) poll_completions();
  if (!can()) return nullptr;
  return send_buffer_ + credits_.next_slot() * stride_ + kSlotHeader;
}

void IbConnection::post_send(std::size_t bytes, Tag tag) {
  const std::size_t slot = credits_.next_slot();
  std::byte* staging = send_buffer_ + slot * stride_;
  const SlotHeader header{bytes, tag.word, tag.count, credits_.posted_count()};
  std::memcpy(staging, &header, sizeof(header));
  ibv_sge sge{};
  sge.addr = reinterpret_cast<std::uint64_t>(staging);
  sge.length = static_cast<std::uint32_t>(kSlotHeader + bytes);
  sge.lkey = send_registration_.lkey;
  ibv_send_wr wr{};
  wr.wr_id = kData;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = htonl(credits_.next_immediate());
  wr.wr.rdma.remote_addr = remote_->slots_addr + slot * remote_->slot_stride;
  wr.wr.rdma.rkey = remote_->slots_rkey;
  ibv_send_wr* bad = nullptr;
  if (const int e = ibv_post_send(qp_, &wr, &bad); e != 0)
    fail(fmt::format("ibv_post_send (RDMA write of slot {}): {}", slot, std::strerror(e)));
  credits_.posted();
  ++outstanding_sends_;
}

std::optional<RecvSlot> IbConnection::try_recv_slot() {
  if (!establish()) return std::nullopt;
  if (!credits_.has_message()) poll_completions();
  if (!credits_.has_message()) return std::nullopt;
  const std::byte* slot = recv_buffer_ + credits_.oldest_slot() * stride_;
  SlotHeader header;
  std::memcpy(&header, slot, sizeof(header));
  if (header.bytes > slot_bytes_)
    fail(fmt::format("a slot header claims {} bytes in a slot of {}", header.bytes, slot_bytes_));
  return RecvSlot{slot + kSlotHeader, header.bytes, Tag{header.tag_word, header.tag_count}};
}

void IbConnection::release_recv_slot() {
  send_credit(credits_.release());
}

void IbConnection::send_credit(std::uint32_t immediate) {
  if (outstanding_sends_ >= max_send_wr_) {
    pending_credit_ = immediate;  // credits are totals: the newest replaces an older one
    return;
  }
  ibv_send_wr wr{};
  wr.wr_id = kCredit;
  wr.sg_list = nullptr;
  wr.num_sge = 0;
  wr.opcode = IBV_WR_SEND_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = htonl(immediate);
  ibv_send_wr* bad = nullptr;
  if (const int e = ibv_post_send(qp_, &wr, &bad); e != 0)
    fail(fmt::format("ibv_post_send (credit): {}", std::strerror(e)));
  ++outstanding_sends_;
  pending_credit_.reset();
}

bool IbConnection::poll_completions() {
  if (closed_) fail("the connection was closed (communicator aborted)");
  if (!peer_ready_) return establish();
  // Acknowledge the channel's events: they only wake a sleeper, the queue holds the work.
  void* context = nullptr;
  ibv_cq* event_cq = nullptr;
  unsigned events = 0;
  while (ibv_get_cq_event(channel_, &event_cq, &context) == 0) ++events;
  if (events) ibv_ack_cq_events(cq_, events);
  bool moved = false;
  ibv_wc wc[16];
  for (;;) {
    const int n = ibv_poll_cq(cq_, 16, wc);
    if (n < 0) fail("ibv_poll_cq failed");
    for (int i = 0; i < n; ++i) {
      const ibv_wc& c = wc[i];
      if (c.status != IBV_WC_SUCCESS)
        fail(fmt::format("work completion error: {} (status {}, vendor error {:#x}) on {}",
                         ibv_wc_status_str(c.status), static_cast<int>(c.status), c.vendor_err,
                         c.wr_id == kData     ? "an RDMA write of a slot"
                         : c.wr_id == kCredit ? "a credit"
                                              : "a receive"));
      switch (c.opcode) {
        case IBV_WC_RDMA_WRITE:
          if (!credits_.write_completed()) fail("a write completion without a posted write");
          --outstanding_sends_;
          break;
        case IBV_WC_SEND:
          --outstanding_sends_;
          break;
        case IBV_WC_RECV_RDMA_WITH_IMM:
          if (!credits_.received(ntohl(c.imm_data)))
            fail(fmt::format("slot write {} arrived out of order", ntohl(c.imm_data)));
          post_receive();
          break;
        case IBV_WC_RECV:
          if (!(c.wc_flags & IBV_WC_WITH_IMM) || !credits_.credit(ntohl(c.imm_data)))
            fail("a credit that does not match what was sent");
          post_receive();
          break;
        default:
          fail(fmt::format("unexpected completion opcode {}", static_cast<int>(c.opcode)));
      }
    }
    moved |= n > 0;
    if (n < 16) break;
  }
  if (pending_credit_ && outstanding_sends_ < max_send_wr_) send_credit(*pending_credit_);
  return moved;
}

void IbConnection::add_poll_fds(std::vector<pollfd>& fds) const {
  // While connecting, nothing raises an event: no descriptor, so the waiter looks again soon.
  if (!peer_ready_) return;
  // Armed before the waiter's last look (whose try_* calls poll the queue), so a completion
  // that arrives after that look raises an event on the descriptor.
  ibv_req_notify_cq(cq_, 0);
  fds.push_back(pollfd{channel_->fd, POLLIN, 0});
}

void IbConnection::sleep(int timeout_ms) {
  if (!peer_ready_) timeout_ms = std::min(timeout_ms, 1);  // the store is looked at, not waited on
  ibv_req_notify_cq(cq_, 0);
  if (credits_.has_message()) return;
  pollfd p{channel_->fd, POLLIN, 0};
  ::poll(&p, 1, timeout_ms);
}

std::string IbConnection::describe() const {
  return fmt::format("ibverbs to rank {} via {}, QP {} -> {}, {} slots of {} KiB{}", peer_,
                     port_.describe(), qp_ ? qp_->qp_num : 0, remote_ ? remote_->qpn : 0, slots_,
                     slot_bytes_ >> 10,
                     peer_ready_ ? ""
                     : remote_   ? " (waiting for the peer's queue pair to be ready)"
                                 : " (waiting for the peer's connection record)");
}

std::vector<Connection::Region> IbConnection::host_regions() const {
  return {{send_buffer_, slots_ * stride_}, {recv_buffer_, slots_ * stride_}};
}

// ---- Transport

IbTransport::IbTransport(Store& store, int rank, const base::LinkConfig& link, PortChoice port,
                         std::uint64_t job_token)
    : store_(store),
      rank_(rank),
      secret_(link.secret),
      job_token_(job_token),
      slot_bytes_(link.slot_bytes()),
      slots_(static_cast<std::size_t>(link.slots)),
      port_(std::move(port)) {
  int count = 0;
  ibv_device** list = ibv_get_device_list(&count);
  for (int d = 0; list && d < count && !context_; ++d)
    if (port_.device == ibv_get_device_name(list[d])) context_ = ibv_open_device(list[d]);
  if (list) ibv_free_device_list(list);
  if (!context_)
    throw Error(fmt::format("ibverbs: rank {}: cannot open {}: {}", rank, port_.device,
                            std::strerror(errno)));
  pd_ = ibv_alloc_pd(context_);
  if (!pd_) {
    ibv_close_device(context_);
    throw Error(fmt::format("ibverbs: rank {}: ibv_alloc_pd on {}: {}", rank, port_.device,
                            std::strerror(errno)));
  }
  ibv_pd* pd = pd_;
  const int r = rank;
  cache_ = std::make_unique<RegistrationCache>(
      [pd, r](void* addr, std::size_t bytes) {
        ibv_mr* mr = ibv_reg_mr(pd, addr, bytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
        if (!mr)
          throw Error(fmt::format("ibverbs: rank {}: ibv_reg_mr of {} bytes: {}", r, bytes,
                                  std::strerror(errno)));
        return Registration{mr, mr->lkey, mr->rkey, 0, 0};
      },
      [](const Registration& reg) { ibv_dereg_mr(static_cast<ibv_mr*>(reg.handle)); }, 256);
}

IbTransport::~IbTransport() {
  connections_.clear();
  cache_.reset();
  if (pd_) ibv_dealloc_pd(pd_);
  if (context_) ibv_close_device(context_);
}

void IbTransport::abort() {
  for (auto& [peer, conn] : connections_) conn->close();
}

Connection& IbTransport::connect(int peer, const base::Deadline&, const base::Halt&) {
  if (auto it = connections_.find(peer); it != connections_.end()) return *it->second;
  auto conn = std::make_unique<IbConnection>(store_, rank_, peer, context_, pd_, *cache_, port_,
                                             slot_bytes_, slots_, secret_, job_token_);
  conn->publish();  // the rest happens on the connection's first uses, without waiting here
  return *(connections_[peer] = std::move(conn));
}

std::unique_ptr<Transport> make_transport(const Setup& setup, const PortChoice& port) {
  return std::make_unique<IbTransport>(setup.store, setup.rank, setup.link, port, setup.token);
}

}  // namespace loom::transport::ibverbs
