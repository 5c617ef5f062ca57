#include "transports/tcp/tcp_connection.hpp"

#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <new>

#include <fmt/format.h>

#include "loom/loom.hpp"

namespace loom::transport::tcp {
namespace {

constexpr std::size_t kPage = 4096;

std::byte* page_aligned(std::size_t bytes) {
  void* p = std::aligned_alloc(kPage, (bytes + kPage - 1) / kPage * kPage);
  if (p == nullptr) throw std::bad_alloc();
  return static_cast<std::byte*>(p);
}

std::size_t offset_in_line(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % kFrameAlign;
}

// Zeros for the leads and tails.
const std::byte kPadding[kFrameAlign] = {};

}  // namespace

TcpConnection::TcpConnection(int self, int peer, std::vector<int> fds, std::size_t slot_bytes,
                             int slots, std::size_t readahead_bytes, std::string peer_address)
    : self_(self),
      peer_(peer),
      slot_bytes_(slot_bytes),
      slots_(static_cast<std::uint64_t>(slots)),
      readahead_bytes_(readahead_bytes),
      peer_address_(std::move(peer_address)),
      recv_stride_((slot_bytes + 3 * kFrameAlign - 1) / kFrameAlign * kFrameAlign),
      send_buffer_(page_aligned(slot_bytes * static_cast<std::size_t>(slots))),
      recv_buffer_(page_aligned(recv_stride_ * static_cast<std::size_t>(slots))),
      send_slots_(static_cast<std::size_t>(slots)),
      recv_slots_(static_cast<std::size_t>(slots)),
      steers_(static_cast<std::size_t>(slots)),
      send_buffer_of_(static_cast<std::size_t>(slots), nullptr),
      recv_buffer_of_(static_cast<std::size_t>(slots), nullptr) {
  // Stacked last slot first, so that the first taken is the first in memory.
  for (std::size_t k = static_cast<std::size_t>(slots); k-- > 0;) {
    free_send_.push_back(send_buffer_.get() + k * slot_bytes_);
    free_recv_.push_back(recv_buffer_.get() + k * recv_stride_);
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
    std::byte* placed = own + offset_in_line(s.recv_into);
    std::memcpy(placed, s.recv_into, payload_read(s));
    s.recv_into = placed;  // recv_frame stays null: the lead and tail are read aside
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
    const std::byte* payload = info.data != nullptr ? info.data : send_buffer_of_[slot];
    if (s.send_offset == 0) {
      // The payload follows the header at its own offset in a line (see the header comment);
      // one that fits the first line with the header comes right after it, in one read.
      s.send_lead =
          info.bytes <= kFrameAlign - sizeof(FrameHeader)
              ? 0
              : (offset_in_line(payload) + kFrameAlign - sizeof(FrameHeader)) % kFrameAlign;
      s.send_tail = frame_tail(s.send_lead, info.bytes);
      const auto bytes = static_cast<std::uint32_t>(info.bytes);
      s.send_header =
          FrameHeader{bytes, (bytes ^ kFrameMagic) + static_cast<std::uint32_t>(s.send_lead),
                      info.tag.word, info.tag.count};
    }
    const std::size_t head = sizeof(FrameHeader) + s.send_lead;
    const std::size_t total = head + info.bytes + s.send_tail;
    // What is left of header, lead, payload and tail, from send_offset on.
    iovec iov[4];
    int iovcnt = 0;
    auto add = [&](const void* base, std::size_t begin, std::size_t length) {
      if (s.send_offset >= begin + length) return;
      const std::size_t skip = s.send_offset > begin ? s.send_offset - begin : 0;
      iov[iovcnt++] = {const_cast<std::byte*>(static_cast<const std::byte*>(base)) + skip,
                       length - skip};
    };
    add(&s.send_header, 0, sizeof(FrameHeader));
    add(kPadding, sizeof(FrameHeader), s.send_lead);
    add(payload, head, info.bytes);
    add(kPadding, head + info.bytes, s.send_tail);
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

std::size_t TcpConnection::payload_read(const Socket& s) {
  if (s.recv_offset < kFrameAlign) return 0;  // still in the first line, not in place yet
  const std::size_t head = sizeof(FrameHeader) + frame_lead(s.recv_header);
  return s.recv_offset > head ? std::min<std::size_t>(s.recv_offset - head, s.recv_header.bytes)
                              : 0;
}

std::byte* TcpConnection::place_payload(Socket& s) {
  const std::uint64_t slot = s.next_recv % slots_;
  // It goes where the engine steered it, if it is the message expected there (else to the slot,
  // where the engine finds the mismatch), and into a slot at its source's offset in a line.
  const Steer& steer = steers_[slot];
  const Tag tag{s.recv_header.tag_word, s.recv_header.tag_count};
  if (steer.dst != nullptr && steer.bytes == s.recv_header.bytes && steer.tag == tag)
    return steer.dst;
  std::byte* own = recv_buffer_of_[slot] = take(free_recv_);
  return own + (sizeof(FrameHeader) + frame_lead(s.recv_header)) % kFrameAlign;
}

bool TcpConnection::read_some(Socket& s) {
  bool moved = false;
  while (may_read(s)) {
    ssize_t n;
    if (s.recv_offset < kFrameAlign) {
      // Every frame's first line: the header, and the start of its lead or payload. A message
      // that fits comes in this one call.
      n = ::recv(s.fd, s.recv_line + s.recv_offset, kFrameAlign - s.recv_offset, MSG_DONTWAIT);
    } else {
      const std::size_t head = sizeof(FrameHeader) + frame_lead(s.recv_header);
      const std::size_t bytes = s.recv_header.bytes, total = frame_bytes(s.recv_header);
      if (s.recv_frame != nullptr) {
        // Into a slot buffer, as the frame lies: its lead and tail beside the payload.
        n = ::recv(s.fd, s.recv_frame + (s.recv_offset - kFrameAlign), total - s.recv_offset,
                   MSG_DONTWAIT);
      } else {
        // Into a steered buffer (or one taken over from it): the lead and tail elsewhere.
        std::byte padding[kFrameAlign];
        iovec iov[3];
        int iovcnt = 0;
        if (s.recv_offset < head) iov[iovcnt++] = {padding, head - s.recv_offset};
        const std::size_t done = payload_read(s);
        if (done < bytes) iov[iovcnt++] = {s.recv_into + done, bytes - done};
        const std::size_t past = head + bytes;
        if (std::max(past, s.recv_offset) < total)
          iov[iovcnt++] = {padding, total - std::max(past, s.recv_offset)};
        msghdr msg{};
        msg.msg_iov = iov;
        msg.msg_iovlen = static_cast<std::size_t>(iovcnt);
        n = iovcnt == 1 ? ::recv(s.fd, iov[0].iov_base, iov[0].iov_len, MSG_DONTWAIT)
                        : ::recvmsg(s.fd, &msg, MSG_DONTWAIT);
      }
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
    const bool first_line = s.recv_offset < kFrameAlign;
    s.recv_offset += static_cast<std::size_t>(n);
    if (first_line) {
      if (s.recv_offset < kFrameAlign) continue;
      std::memcpy(&s.recv_header, s.recv_line, sizeof(FrameHeader));
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
      const std::size_t head = sizeof(FrameHeader) + frame_lead(h);
      if (h.bytes > 0) {
        s.recv_into = place_payload(s);
        // A slot buffer takes the rest of the frame as it comes, the payload at its place.
        if (recv_buffer_of_[s.next_recv % slots_] != nullptr)
          s.recv_frame = head < kFrameAlign ? s.recv_into + (kFrameAlign - head)
                                            : s.recv_into - (head - kFrameAlign);
        // The payload's first bytes came with the line.
        if (head < kFrameAlign)
          std::memcpy(s.recv_into, s.recv_line + head,
                      std::min<std::size_t>(kFrameAlign - head, h.bytes));
      }
    }
    if (s.recv_offset == frame_bytes(s.recv_header)) {
      const std::uint64_t slot = s.next_recv % slots_;
      recv_slots_[slot] =
          SlotInfo{s.recv_header.bytes, Tag{s.recv_header.tag_word, s.recv_header.tag_count}, true,
                   s.recv_into != nullptr ? s.recv_into : recv_buffer_.get()};
      s.recv_offset = 0;
      s.recv_into = nullptr;
      s.recv_frame = nullptr;
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
