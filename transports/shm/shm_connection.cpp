#include "transports/shm/shm_connection.hpp"

#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include <fmt/format.h>

#include "loom/loom.hpp"

// Older headers lack them; an older kernel refuses them (map_now is best effort).
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace loom::transport::shm {
namespace {

// Shared (not process-private) futexes: the two sides are different processes.
void futex_wait_shared(std::atomic<std::uint32_t>& word, std::uint32_t expected, int timeout_ms) {
  timespec ts{timeout_ms / 1000, static_cast<long>(timeout_ms % 1000) * 1000000L};
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT, expected, &ts, nullptr,
            0);
}
void futex_wake_shared(std::atomic<std::uint32_t>& word) {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE, INT32_MAX, nullptr,
            nullptr, 0);
}

}  // namespace

ShmConnection::ShmConnection(int self, int peer, int peer_pid, void* base, std::size_t bytes,
                             std::size_t slot_bytes, std::size_t slots, int side, std::string name,
                             int fd, std::size_t placement_span)
    : self_(self),
      peer_(peer),
      peer_pid_(peer_pid),
      side_(side),
      fd_(fd),
      map_slots_(fd >= 0 && placement_span > 0),
      base_(base),
      bytes_(bytes),
      name_(std::move(name)),
      slot_bytes_(slot_bytes),
      slots_(slots),
      placement_span_(std::min(placement_span, slot_bytes)) {
  auto* b = static_cast<std::byte*>(base);
  header_ = reinterpret_cast<SegmentHeader*>(b);
  auto* low_to_high = reinterpret_cast<FifoControl*>(b + kPage);
  auto* high_to_low = reinterpret_cast<FifoControl*>(b + 2 * kPage);
  std::byte* data_low_to_high = b + 3 * kPage;
  std::byte* data_high_to_low = data_low_to_high + slot_bytes_ * slots_;
  send_ = side == 0 ? low_to_high : high_to_low;
  recv_ = side == 0 ? high_to_low : low_to_high;
  send_data_ = side == 0 ? data_low_to_high : data_high_to_low;
  recv_data_ = side == 0 ? data_high_to_low : data_low_to_high;
  auto* mail_low_to_high = reinterpret_cast<Mailbox*>(data_high_to_low + slot_bytes_ * slots_);
  Mailbox* mail_high_to_low = mail_low_to_high + slots_;
  send_mail_ = side == 0 ? mail_low_to_high : mail_high_to_low;
  recv_mail_ = side == 0 ? mail_high_to_low : mail_low_to_high;
}

ShmConnection::~ShmConnection() {
  close();
  ::munmap(base_, bytes_);
  if (fd_ >= 0) ::close(fd_);
}

void ShmConnection::close() {
  header_->closed[side_].store(1, std::memory_order_seq_cst);
  header_->bell[1 - side_].fetch_add(1, std::memory_order_seq_cst);
  futex_wake_shared(header_->bell[1 - side_]);
}

void ShmConnection::peer_gone(const char* why) const {
  throw PeerError(fmt::format("rank {} <-> rank {} (shm): the peer {}", self_, peer_, why), peer_);
}

void ShmConnection::check_peer_open() const {
  if (header_->closed[1 - side_].load(std::memory_order_acquire))
    peer_gone("closed the connection (it failed or finished)");
}

void ShmConnection::check_peer_sent_more() const {
  // What a peer posted before closing is still read, on either channel; only a wait for more
  // fails. closed is stored after the last post, so seeing it makes every post visible.
  if (header_->closed[1 - side_].load(std::memory_order_acquire) &&
      recv_->head.load(std::memory_order_acquire) <= consumed_ &&
      recv_mail_[inline_received_ % slots_].flag.load(std::memory_order_acquire) !=
          inline_received_ + 1)
    peer_gone("closed the connection (it failed or finished)");
}

void ShmConnection::prepare_sleep() {
  seen_head_ = recv_->head.load(std::memory_order_acquire);
  seen_tail_ = send_->tail.load(std::memory_order_acquire);
  seen_acked_ = send_->acked.load(std::memory_order_acquire);
  seen_flag_ = recv_mail_[inline_received_ % slots_].flag.load(std::memory_order_acquire);
  seen_wakes_ = wakes_.load(std::memory_order_seq_cst);
}

std::byte* ShmConnection::try_acquire_send_slot(std::size_t bytes) {
  check_peer_open();
  if (posted_ - send_->tail.load(std::memory_order_acquire) >= slots_) {
    return nullptr;
  }
  acquired_at_ = placement(bytes);
  if (fd_ >= 0) reserve(posted_ % slots_, acquired_at_ + bytes);
  return send_data_ + (posted_ % slots_) * slot_bytes_ + acquired_at_;
}

void ShmConnection::reserve(std::size_t slot, std::size_t end) {
  std::size_t& have = reserved_bytes_[slot];
  // Whole pages, and at a first fill at least the span small messages move along (mapped now).
  std::size_t need = (std::max(end, std::size_t{1}) + kPage - 1) / kPage * kPage;
  if (have == 0 && map_slots_) need = std::max(need, placement_span_);
  need = std::min(need, slot_bytes_);
  if (need <= have) return;
  const std::size_t offset = slot_offset(side_, slot, slot_bytes_, slots_) + have;
  if (const int err = reserve_pages(fd_, offset, need - have); err != 0)
    // This rank's failure, not the peer's: no peer is named as the one at fault.
    throw PeerError(
        fmt::format("rank {} -> rank {} (shm {}): cannot reserve {} bytes (is "
                    "/dev/shm large enough?): {}",
                    self_, peer_, name_, need - have, std::strerror(err)));
  // Mapped now, in one call: a page at a time, its first write costs about twice as much.
  map_now(send_data_ + slot * slot_bytes_ + have, need - have, MADV_POPULATE_WRITE);
  have = need;
  if (have == slot_bytes_ && ++reserved_ == slots_) {  // every slot whole: the descriptor is done
    ::close(fd_);
    fd_ = -1;
  }
}

void ShmConnection::post_send(std::size_t bytes, Tag tag) {
  const std::uint64_t offset = acquired_at_;  // where the message was written
  acquired_at_ = 0;
  send_->meta[posted_ % slots_] = SlotMeta{bytes, offset, tag.word, tag.count};
  next_offset_[posted_ % slots_] =
      offset + (bytes + kPlacementStep - 1) / kPlacementStep * kPlacementStep;
  ++posted_;
  // seq_cst pairs with the peer's store to waiting[] in sleep(): one of the two sees the other.
  send_->head.store(posted_, std::memory_order_seq_cst);
  ring_peer();
}

std::optional<RecvSlot> ShmConnection::try_recv_slot() {
  if (recv_->head.load(std::memory_order_acquire) <= consumed_) {
    check_peer_sent_more();
    return std::nullopt;
  }
  if (consumed_ == recv_mapped_ && recv_mapped_ < slots_ && map_slots_) {
    map_now(recv_data_ + consumed_ * slot_bytes_, placement_span_, MADV_POPULATE_READ);
    ++recv_mapped_;
  }
  const SlotMeta& m = recv_->meta[consumed_ % slots_];
  const std::uint64_t bytes = read_once(m.bytes);
  const std::uint64_t offset = read_once(m.offset);
  if (bytes > slot_bytes_ || offset > slot_bytes_ - bytes)
    throw PeerError(fmt::format("rank {} <- rank {} (shm {}): corrupt slot of {} bytes at {}",
                                self_, peer_, name_, bytes, offset),
                    peer_);
  return RecvSlot{recv_data_ + (consumed_ % slots_) * slot_bytes_ + offset, bytes,
                  Tag{m.tag_word, m.tag_count}};
}

void ShmConnection::release_recv_slot() {
  ++consumed_;
  recv_->tail.store(consumed_, std::memory_order_seq_cst);
  ring_peer();
}

std::byte* ShmConnection::try_acquire_inline() {
  check_peer_open();
  // The mailbox of message k is reused by message k + slots: it must have been released.
  if (inline_sent_ - inline_acked_ >= slots_) {
    inline_acked_ = send_->acked.load(std::memory_order_acquire);
    if (inline_sent_ - inline_acked_ >= slots_) {
      return nullptr;
    }
  }
  return send_mail_[inline_sent_ % slots_].data;
}

void ShmConnection::post_inline(std::size_t bytes, Tag tag) {
  Mailbox& m = send_mail_[inline_sent_ % slots_];
  m.tag_word = tag.word;
  m.tag_count = tag.count;
  m.bytes = bytes;
  ++inline_sent_;
  m.flag.store(inline_sent_, std::memory_order_seq_cst);  // seq_cst: see post_send
  ring_peer();
}

std::optional<RecvSlot> ShmConnection::try_recv_inline() {
  const Mailbox& m = recv_mail_[inline_received_ % slots_];
  if (m.flag.load(std::memory_order_acquire) != inline_received_ + 1) {
    check_peer_sent_more();
    return std::nullopt;
  }
  const std::uint64_t bytes = read_once(m.bytes);
  if (bytes > kInlineCapacity)
    throw PeerError(fmt::format("rank {} <- rank {} (shm {}): corrupt inline message of {} bytes",
                                self_, peer_, name_, bytes),
                    peer_);
  return RecvSlot{m.data, bytes, Tag{m.tag_word, m.tag_count}};
}

void ShmConnection::release_inline() {
  ++inline_received_;
  recv_->acked.store(inline_received_, std::memory_order_seq_cst);
  ring_peer();
}

void ShmConnection::map_now(std::byte* at, std::size_t bytes, int advice) const {
  // Best effort (the advice needs Linux 5.14, and a range that starts a page): without it the
  // pages fault in at their first touch.
  ::madvise(at, bytes, advice);
}

void ShmConnection::ring(int side) {
  if (header_->waiting[side].load(std::memory_order_seq_cst) != 0) {
    header_->bell[side].fetch_add(1, std::memory_order_seq_cst);
    futex_wake_shared(header_->bell[side]);
  }
}

void ShmConnection::sleep(int timeout_ms) {
  // What the peer did since the caller last looked, or during the sleep.
  auto moved = [&] {
    return recv_->head.load(std::memory_order_seq_cst) != seen_head_ ||
           send_->tail.load(std::memory_order_seq_cst) != seen_tail_ ||
           send_->acked.load(std::memory_order_seq_cst) != seen_acked_ ||
           recv_mail_[inline_received_ % slots_].flag.load(std::memory_order_seq_cst) !=
               seen_flag_ ||
           header_->closed[1 - side_].load(std::memory_order_seq_cst) != 0 ||
           wakes_.load(std::memory_order_seq_cst) != seen_wakes_;
  };
  header_->waiting[side_].store(1, std::memory_order_seq_cst);
  const std::uint32_t rung = header_->bell[side_].load(std::memory_order_seq_cst);
  if (!moved()) futex_wait_shared(header_->bell[side_], rung, timeout_ms);
  header_->waiting[side_].store(0, std::memory_order_relaxed);
  // A peer that died cannot ring. Check only when it has not moved: a peer may post its last
  // slot and exit, and that slot must still be read.
  if (!moved() && peer_pid_ > 0 && !base::process_alive(peer_pid_))
    peer_gone(fmt::format("process {} is gone (exited or crashed)", peer_pid_).c_str());
}

// This side's own bell: the sleeper either sees wakes_ move before it sleeps, or its futex word
// changed, or it is woken.
void ShmConnection::wake_sleep() {
  wakes_.fetch_add(1, std::memory_order_seq_cst);
  ring(side_);
}

std::string ShmConnection::describe() const {
  return fmt::format("shm to rank {} ({} slots of {} KiB, {} inline mailboxes of {} B)", peer_,
                     slots_, slot_bytes_ >> 10, slots_, kInlineCapacity);
}

}  // namespace loom::transport::shm
