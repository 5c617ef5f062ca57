#include "transports/tcp/tcp_connection.hpp"

#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "loom/loom.hpp"

namespace loom::transport::tcp {

TcpConnection::TcpConnection(int self, int peer, std::vector<int> fds, std::size_t slot_bytes,
                             int slots, std::size_t readahead_bytes, std::string peer_address)
    : self_(self),
      peer_(peer),
      slot_bytes_(slot_bytes),
      slots_(static_cast<std::uint64_t>(slots)),
      readahead_bytes_(readahead_bytes),
      peer_address_(std::move(peer_address)),
      send_buffer_(new std::byte[slot_bytes * static_cast<std::size_t>(slots)]),
      recv_buffer_(new std::byte[slot_bytes * static_cast<std::size_t>(slots)]),
      send_slots_(static_cast<std::size_t>(slots)),
      recv_slots_(static_cast<std::size_t>(slots)),
      steers_(static_cast<std::size_t>(slots)),
      send_buffer_of_(static_cast<std::size_t>(slots), nullptr),
      recv_buffer_of_(static_cast<std::size_t>(slots), nullptr) {
  // Stacked last slot first, so that the first taken is the first in memory.
  for (std::size_t k = static_cast<std::size_t>(slots); k-- > 0;) {
    free_send_.push_back(send_buffer_.get() + k * slot_bytes_);
    free_recv_.push_back(recv_buffer_.get() + k * slot_bytes_);
  }
  for (std::size_t k = 0; k < fds.size(); ++k) {
    Socket s{};
    s.fd = fds[k];
    s.next_send = k;
    s.next_recv = k;
    sockets_.push_back(s);
  }
}

TcpConnection::~TcpConnection() {
  for (auto& s : sockets_) ::close(s.fd);
}

std::byte* TcpConnection::take(std::vector<std::byte*>& free) {
  std::byte* buffer = free.back();
  free.pop_back();
  return buffer;
}

std::byte* TcpConnection::try_acquire_send_slot(std::size_t /*bytes*/) {
  if (send_posted_ >= send_done_ + slots_) return nullptr;
  if (acquired_send_ == nullptr) acquired_send_ = take(free_send_);
  return acquired_send_;
}

void TcpConnection::post_send(std::size_t bytes, Tag tag) {
  post(bytes, tag, nullptr);
}

void TcpConnection::post_send_from(const std::byte* src, std::size_t bytes, Tag tag) {
  post(bytes, tag, src);
}

void TcpConnection::post(std::size_t bytes, Tag tag, const std::byte* from) {
  SlotInfo& info = send_slots_[send_posted_ % slots_];
  info = SlotInfo{bytes, tag, false, from};
  send_buffer_of_[send_posted_ % slots_] =
      acquired_send_ != nullptr ? acquired_send_ : take(free_send_);
  acquired_send_ = nullptr;
  ++send_posted_;
  // Hand the frame to the kernel now: the engine may not poll this connection again soon.
  write_some(sockets_[(send_posted_ - 1) % sockets_.size()]);
  advance_send_done();
}

void TcpConnection::settle_sends() {
  // A frame partly written goes on from the same offset: the slot holds the same bytes.
  for (std::uint64_t seq = send_done_; seq < send_posted_; ++seq) {
    SlotInfo& info = send_slots_[seq % slots_];
    if (info.ready || info.data == nullptr) continue;
    std::memcpy(send_buffer_of_[seq % slots_], info.data, info.bytes);
    info.data = nullptr;
  }
}

void TcpConnection::advance_send_done() {
  while (send_done_ < send_posted_ && send_slots_[send_done_ % slots_].ready) {
    send_slots_[send_done_ % slots_].ready = false;
    free_send_.push_back(send_buffer_of_[send_done_ % slots_]);
    ++send_done_;
  }
}

bool TcpConnection::steer_recv(std::size_t ahead, std::byte* dst, std::size_t bytes, Tag tag) {
  if (ahead >= slots_) return false;
  const std::uint64_t seq = recv_consumed_ + ahead;
  const Socket& s = sockets_[seq % sockets_.size()];
  // Arrived, or its payload is being read into the slot already: too late to steer.
  if (recv_slots_[seq % slots_].ready || (s.next_recv == seq && s.recv_into != nullptr))
    return true;
  steers_[seq % slots_] = Steer{dst, bytes, tag};
  return true;
}

void TcpConnection::unsteer() {
  for (auto& s : sockets_) {
    // A payload being read into a steered buffer goes on in its slot, with what came so far.
    std::byte*& own = recv_buffer_of_[s.next_recv % slots_];
    if (s.recv_into == nullptr || own != nullptr) continue;
    own = take(free_recv_);
    std::memcpy(own, s.recv_into, s.recv_offset - sizeof(FrameHeader));
    s.recv_into = own;
  }
  for (auto& steer : steers_) steer = Steer{};
}

std::optional<RecvSlot> TcpConnection::try_recv_slot() {
  const SlotInfo& info = recv_slots_[recv_consumed_ % slots_];
  if (!info.ready) {
    // The peer may close once it has sent all it had to: only a receive still waited for fails.
    if (sockets_[recv_consumed_ % sockets_.size()].closed) fail("receive", 0);
    return std::nullopt;
  }
  return RecvSlot{info.data, info.bytes, info.tag};
}

void TcpConnection::release_recv_slot() {
  recv_slots_[recv_consumed_ % slots_].ready = false;
  held_bytes_ -= recv_slots_[recv_consumed_ % slots_].bytes;
  if (std::byte*& own = recv_buffer_of_[recv_consumed_ % slots_]; own != nullptr) {
    free_recv_.push_back(own);
    own = nullptr;
  }
  steers_[recv_consumed_ % slots_] = Steer{};
  ++recv_consumed_;
}

bool TcpConnection::progress() {
  bool moved = false;
  for (auto& s : sockets_) {
    moved |= write_some(s);
    moved |= read_some(s);
  }
  advance_send_done();
  return moved;
}

bool TcpConnection::write_some(Socket& s) {
  bool moved = false;
  while (s.next_send < send_posted_) {
    const std::uint64_t slot = s.next_send % slots_;
    SlotInfo& info = send_slots_[slot];
    if (s.send_offset == 0)
      s.send_header = FrameHeader{static_cast<std::uint32_t>(info.bytes),
                                  static_cast<std::uint32_t>(info.bytes) ^ kFrameMagic,
                                  info.tag.word, info.tag.count};
    const std::size_t total = sizeof(FrameHeader) + info.bytes;
    iovec iov[2];
    int iovcnt = 0;
    const std::byte* payload = info.data != nullptr ? info.data : send_buffer_of_[slot];
    if (s.send_offset < sizeof(FrameHeader)) {
      iov[iovcnt++] = {reinterpret_cast<char*>(&s.send_header) + s.send_offset,
                       sizeof(FrameHeader) - s.send_offset};
      if (info.bytes) iov[iovcnt++] = {const_cast<std::byte*>(payload), info.bytes};
    } else {
      std::size_t done = s.send_offset - sizeof(FrameHeader);
      iov[iovcnt++] = {const_cast<std::byte*>(payload) + done, info.bytes - done};
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<std::size_t>(iovcnt);
    ssize_t n = ::sendmsg(s.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return moved;
      fail("send", errno);
    }
    moved = true;
    s.send_offset += static_cast<std::size_t>(n);
    if (s.send_offset == total) {
      info.ready = true;
      s.send_offset = 0;
      s.next_send += sockets_.size();
    }
  }
  return moved;
}

bool TcpConnection::may_read(const Socket& s) const {
  if (s.closed || s.next_recv >= recv_consumed_ + slots_) return false;
  return s.recv_offset > 0 || s.next_recv == recv_consumed_ || held_bytes_ < readahead_bytes_;
}

bool TcpConnection::read_some(Socket& s) {
  bool moved = false;
  while (may_read(s)) {
    const std::uint64_t slot = s.next_recv % slots_;
    ssize_t n;
    if (s.recv_offset < sizeof(FrameHeader)) {
      n = ::recv(s.fd, reinterpret_cast<char*>(&s.recv_header) + s.recv_offset,
                 sizeof(FrameHeader) - s.recv_offset, MSG_DONTWAIT);
    } else {
      std::size_t done = s.recv_offset - sizeof(FrameHeader);
      if (s.recv_into == nullptr) {
        // The payload's first byte: it goes where the engine steered it, if it is the message
        // expected there (else to the slot, where the engine finds the mismatch).
        const Steer& steer = steers_[slot];
        const Tag tag{s.recv_header.tag_word, s.recv_header.tag_count};
        if (steer.dst != nullptr && steer.bytes == s.recv_header.bytes && steer.tag == tag)
          s.recv_into = steer.dst;
        else
          s.recv_into = recv_buffer_of_[slot] = take(free_recv_);
      }
      n = ::recv(s.fd, s.recv_into + done, s.recv_header.bytes - done, MSG_DONTWAIT);
    }
    if (n == 0) {
      s.closed = true;
      return moved;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return moved;
      fail("receive", errno);
    }
    moved = true;
    s.recv_offset += static_cast<std::size_t>(n);
    if (s.recv_offset == sizeof(FrameHeader)) {
      const FrameHeader& h = s.recv_header;
      if (!frame_header_valid(h, slot_bytes_))
        throw PeerError(
            fmt::format(
                "rank {} <- rank {} ({}): corrupt frame header (length {}, slot holds {}): the "
                "peer "
                "runs a different configuration (LOOM_BUFFSIZE, LOOM_SLOTS) or is not a Loom peer",
                self_, peer_, peer_address_, h.bytes, slot_bytes_),
            peer_);
      held_bytes_ += h.bytes;
    }
    if (s.recv_offset == sizeof(FrameHeader) + s.recv_header.bytes) {
      recv_slots_[slot] =
          SlotInfo{s.recv_header.bytes, Tag{s.recv_header.tag_word, s.recv_header.tag_count}, true,
                   s.recv_into != nullptr ? s.recv_into : recv_buffer_.get()};
      s.recv_offset = 0;
      s.recv_into = nullptr;
      s.next_recv += sockets_.size();
    }
  }
  return moved;
}

void TcpConnection::add_poll_fds(std::vector<pollfd>& fds) const {
  for (const auto& s : sockets_) {
    short events = 0;
    if (s.next_send < send_posted_) events |= POLLOUT;
    if (may_read(s)) events |= POLLIN;
    if (events) fds.push_back(pollfd{s.fd, events, 0});
  }
}

void TcpConnection::shutdown() {
  for (auto& s : sockets_) ::shutdown(s.fd, SHUT_RDWR);
}

void TcpConnection::sleep(int timeout_ms) {
  std::vector<pollfd> fds;
  add_poll_fds(fds);
  ::poll(fds.data(), fds.size(), timeout_ms);
}

std::string TcpConnection::describe() const {
  return fmt::format("tcp to rank {} at {} ({} sockets, {} slots of {} KiB)", peer_, peer_address_,
                     sockets_.size(), slots_, slot_bytes_ >> 10);
}

void TcpConnection::fail(const std::string& what, int err) const {
  std::string cause = err == 0 || err == ECONNRESET || err == EPIPE
                          ? "connection closed by the peer (it exited, crashed or aborted)"
                          : std::string(std::strerror(err));
  throw PeerError(fmt::format("rank {} {} rank {} ({}): {}", self_, what == "send" ? "->" : "<-",
                              peer_, peer_address_, cause),
                  peer_);
}

}  // namespace loom::transport::tcp
