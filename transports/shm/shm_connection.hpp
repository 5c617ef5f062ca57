// A connection through a shared segment: the sender's slot is the receiver's slot, so the
// engine's reduction writes straight into the peer's memory.
#pragma once

#include <atomic>
#include <string>

#include "base/process_memory.hpp"
#include "transports/shm/shm_segment.hpp"
#include "transports/transport.hpp"

namespace loom::transport::shm {

class ShmConnection final : public Connection {
 public:
  // `side` is 0 for the lower rank of the pair, 1 for the higher.
  // peer_pid: the peer's process, checked while sleeping so a dead peer is noticed.
  // slot_bytes, slots: the layout as checked against the header, which is never read again
  // (the peer's process can change it at any time).
  // fd: the segment, owned from here on; each send slot's pages are reserved through it when the
  // slot is first filled (-1: they need not be: reserved already, or never written).
  // placement_span: how far along its slot a small message may be placed (0: at the start).
  ShmConnection(int self, int peer, int peer_pid, void* base, std::size_t bytes,
                std::size_t slot_bytes, std::size_t slots, int side, std::string name, int fd,
                std::size_t placement_span = 0);
  ~ShmConnection() override;

  int peer() const override { return peer_; }
  std::size_t slot_bytes() const override { return slot_bytes_; }
  using Connection::try_acquire_send_slot;
  std::byte* try_acquire_send_slot(std::size_t bytes) override;
  void post_send(std::size_t bytes, Tag tag) override;
  std::optional<RecvSlot> try_recv_slot() override;
  void release_recv_slot() override;
  std::size_t inline_capacity() const override { return kInlineCapacity; }
  std::byte* try_acquire_inline() override;
  void post_inline(std::size_t bytes, Tag tag) override;
  std::optional<RecvSlot> try_recv_inline() override;
  void release_inline() override;
  bool progress() override { return false; }  // the peer reads our writes directly
  bool send_idle() const override { return true; }
  void add_poll_fds(std::vector<pollfd>&) const override {}
  void prepare_sleep() override;
  void sleep(int timeout_ms) override;
  void wake_sleep() override;
  bool sleep_wakeable() const override { return true; }
  std::string describe() const override;
  std::vector<Region> host_regions() const override { return {{base_, bytes_}}; }
  // Marks this side gone and wakes the peer.
  void close();
  // FIFO positions of the next send slot and of the oldest received one, for a transport that
  // keeps the data elsewhere and uses this connection for its control (cudaipc).
  std::size_t send_slot_index() const { return posted_ % slots_; }
  std::size_t recv_slot_index() const { return consumed_ % slots_; }
  std::size_t slots() const { return slots_; }

 private:
  std::uint64_t placement(std::size_t bytes) const {
    const std::uint64_t at = next_offset_[posted_ % slots_];
    return bytes <= kPlacedMax && at + bytes <= placement_span_ ? at : 0;
  }
  // Reserves the pages of send slot `slot` up to byte `end` (posix_fallocate) where they are not
  // yet: a slot's pages are reserved as messages first reach them, so a communicator of small
  // messages holds a few pages of /dev/shm and its first calls do not pay for whole slots. The
  // segment's descriptor stays open until every slot is reserved whole, which most connections
  // never are: one descriptor a connection for its life.
  void reserve(std::size_t slot, std::size_t end);
  // Maps [at, at + bytes) into this process now: a slot's newly reserved pages, or the placement
  // span of a received slot, so that messages do not take a page fault each on their first pass.
  void map_now(std::byte* at, std::size_t bytes, int advice) const;
  // Wakes side `side`'s sleep if it sleeps (bell[side], shm_segment.hpp): the peer's after
  // posting to it or freeing its slots, this side's own for wake_sleep().
  void ring(int side);
  void ring_peer() { ring(1 - side_); }
  void check_peer_open() const;
  void check_peer_sent_more() const;
  [[noreturn]] void peer_gone(const char* why) const;

  int self_, peer_, peer_pid_, side_;
  int fd_;
  bool map_slots_;  // whether messages move along a placement span (mapped at first use)
  void* base_;
  std::size_t bytes_;
  std::string name_;
  SegmentHeader* header_;
  FifoControl* send_;
  FifoControl* recv_;
  std::byte* send_data_;
  std::byte* recv_data_;
  std::size_t slot_bytes_;
  std::uint64_t slots_;
  Mailbox* send_mail_;
  Mailbox* recv_mail_;
  // Where each send slot's next small message starts. Small messages move along the first
  // placement_span_ bytes of their slot from one use to the next, so a line is written again only
  // after the peer's core has read more than its own cache holds: rewriting lines the peer's core
  // still holds cost up to twice the time at 8-128 KiB, 2 ranks on 2 cores (docs/design.md, "How it
  // works, in short").
  std::size_t placement_span_;
  std::uint64_t next_offset_[kMaxSlots] = {};
  std::uint64_t acquired_at_ = 0;               // the place the last try_acquire_send_slot gave
  std::uint64_t posted_ = 0;                    // our copy of send_->head
  std::size_t reserved_bytes_[kMaxSlots] = {};  // how much of each send slot is reserved
  std::uint64_t reserved_ = 0;                  // send slots reserved whole
  std::uint64_t consumed_ = 0;                  // our copy of recv_->tail
  std::uint64_t recv_mapped_ = 0;               // receive slots mapped into this process
  std::uint64_t inline_sent_ = 0;               // inline messages posted
  std::uint64_t inline_received_ = 0;           // our copy of recv_->acked
  std::uint64_t inline_acked_ = 0;              // the last value of send_->acked we read
  // What prepare_sleep() saw of the peer's writes.
  std::uint64_t seen_head_ = 0;
  std::uint64_t seen_tail_ = 0;
  std::uint64_t seen_acked_ = 0;
  std::uint64_t seen_flag_ = 0;
  // wake_sleep() calls from this process's other threads, and what prepare_sleep() saw of them.
  std::atomic<std::uint64_t> wakes_{0};
  std::uint64_t seen_wakes_ = 0;
};

}  // namespace loom::transport::shm
