// The slot FIFO's accounting over RDMA, apart from the verbs so that it can be tested alone.
//
// The sender writes slot k (its message number modulo the slot count) from its staging slot k
// into the receiver's slot k. It may write message m when the receiver has released message
// m - slots (credit) and its own write of that message has completed locally (the staging slot
// is free again). The receiver counts the messages it has received and released; every release
// goes back as a credit carrying the released total in 31 bits of immediate data, which the
// sender widens against what it has sent.
#pragma once

#include <cstdint>

namespace loom::transport::ibverbs {

class SlotCredits {
 public:
  static constexpr std::uint32_t kCreditFlag = 0x80000000u;
  static constexpr std::uint32_t kCountMask = 0x7fffffffu;

  explicit SlotCredits(std::uint64_t slots) : slots_(slots) {}
  std::uint64_t slots() const { return slots_; }

  // ---- Sender
  bool can_post() const { return posted_ - released_ < slots_ && posted_ - write_done_ < slots_; }
  std::uint64_t next_slot() const { return posted_ % slots_; }
  // The immediate data of the write of the next message.
  std::uint32_t next_immediate() const { return static_cast<std::uint32_t>(posted_ & kCountMask); }
  void posted() { ++posted_; }
  // Local completion of the oldest outstanding write.
  bool write_completed() {
    if (write_done_ == posted_) return false;  // a completion for nothing: protocol error
    ++write_done_;
    return true;
  }
  // A credit from the receiver; false when it claims more than was sent (protocol error).
  bool credit(std::uint32_t immediate) {
    const std::uint64_t total = widen(released_, immediate);
    if (total > posted_) return false;
    released_ = total;
    return true;
  }
  std::uint64_t posted_count() const { return posted_; }

  // The full count whose low 31 bits are in `immediate`, at or after `known` (counts only grow,
  // and never by 2^31 or more between two credits: the window is far smaller).
  static std::uint64_t widen(std::uint64_t known, std::uint32_t immediate) {
    const std::uint64_t low = immediate & kCountMask;
    return known + ((low - known) & kCountMask);
  }

  // ---- Receiver
  // A write arrived with this immediate: it must be the next message in order.
  bool received(std::uint32_t immediate) {
    if ((immediate & kCreditFlag) != 0 || immediate != (received_ & kCountMask)) return false;
    ++received_;
    return true;
  }
  bool has_message() const { return consumed_ < received_; }
  std::uint64_t oldest_slot() const { return consumed_ % slots_; }
  // Releases the oldest message; returns the credit's immediate data.
  std::uint32_t release() {
    ++consumed_;
    return kCreditFlag | static_cast<std::uint32_t>(consumed_ & kCountMask);
  }

 private:
  std::uint64_t slots_;
  std::uint64_t posted_ = 0, write_done_ = 0, released_ = 0;  // sender
  std::uint64_t received_ = 0, consumed_ = 0;                 // receiver
};

}  // namespace loom::transport::ibverbs
