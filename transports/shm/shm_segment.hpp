// The shared-memory segment of one pair of ranks: both directions' slot FIFOs. The lower rank
// creates it, the higher maps it and unlinks the name at once (shm_transport.hpp: what a crash
// before that leaves, and who removes it).
//
//   page 0   SegmentHeader
//   page 1   control of the FIFO low -> high     page 2   control of the FIFO high -> low
//   then     slots of low -> high, slots of high -> low,
//            mailboxes of low -> high, mailboxes of high -> low (the inline channel)
#pragma once

#include <fcntl.h>

#include <cerrno>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace loom::transport::shm {

// "LOOMSHM2": the slot metadata holds the message's place (a peer of another build is refused).
inline constexpr std::uint64_t kSegmentMagic = 0x4c4f4f4d53484d32ull;
inline constexpr std::size_t kMaxSlots = 64;
inline constexpr std::size_t kPage = 4096;

// A message of `bytes` at `offset` in its slot.
struct SlotMeta {
  std::uint64_t bytes;
  std::uint64_t offset;
  std::uint64_t tag_word;
  std::uint64_t tag_count;
};
// Where a slot's next message goes, past the last one, in steps of a page (the reduction kernels
// and non-temporal copies like aligned data). Messages that fill their slot always start at 0.
inline constexpr std::size_t kPlacementStep = 4096;
inline constexpr std::size_t kPlacedMax = 64 << 10;

// Counters on separate cache lines: the sender writes head, the receiver tail and acked.
struct alignas(64) FifoControl {
  alignas(64) std::atomic<std::uint64_t> head;   // slots posted
  alignas(64) std::atomic<std::uint64_t> tail;   // slots released
  alignas(64) std::atomic<std::uint64_t> acked;  // inline messages released
  alignas(64) SlotMeta meta[kMaxSlots];
};
static_assert(sizeof(FifoControl) <= kPage);

struct alignas(64) SegmentHeader {
  std::uint64_t magic;
  std::uint64_t slot_bytes;
  std::uint32_t slots;
  // Side s sleeps on bell[s] with waiting[s] set; the other side rings it after posting to s or
  // releasing s's slots, and side s's own other threads to end its sleep (wake_sleep).
  alignas(64) std::atomic<std::uint32_t> bell[2];
  alignas(64) std::atomic<std::uint32_t> waiting[2];
  // Side s has gone (destroyed or aborted): the other side stops waiting for it.
  std::atomic<std::uint32_t> closed[2];
};
static_assert(sizeof(SegmentHeader) <= kPage);

// One message of the inline channel. The flag (the message's number, 1, 2, ...) is stored last,
// with release ordering, in the same cache line as the tag, the size and the first 32 bytes of
// data: a receiver polling the flag has a small message in hand when it sees the number.
inline constexpr std::size_t kInlineCapacity = 1024;
struct alignas(64) Mailbox {
  std::atomic<std::uint64_t> flag;
  std::uint64_t tag_word;
  std::uint64_t tag_count;
  std::uint64_t bytes;
  std::byte data[kInlineCapacity];
};
static_assert(offsetof(Mailbox, data) == 32 && sizeof(Mailbox) % 64 == 0);

// One load of a field that the peer's process may change at any time: the value checked is the
// value used (a plain read may be repeated by the compiler).
template <typename T>
T read_once(const T& field) {
  return std::atomic_ref<T>(const_cast<T&>(field)).load(std::memory_order_relaxed);
}

// Allocates [from, from + length) of the segment's file: 0, or the error number.
inline int reserve_pages(int fd, std::size_t from, std::size_t length) {
  int err = 0;
  do err = ::posix_fallocate(fd, static_cast<off_t>(from), static_cast<off_t>(length));
  while (err == EINTR);  // a handled signal (a profiler's, Python's SIGINT) interrupts it
  return err;
}

// Layout: the header page, the two FIFO control pages, the slots low-to-high then high-to-low,
// then the mailboxes of both directions.
inline std::size_t segment_bytes(std::size_t slot_bytes, std::size_t slots) {
  return 3 * kPage + 2 * (slot_bytes + sizeof(Mailbox)) * slots;
}
inline std::size_t slot_offset(int direction, std::size_t slot, std::size_t slot_bytes,
                               std::size_t slots) {
  return 3 * kPage + (static_cast<std::size_t>(direction) * slots + slot) * slot_bytes;
}
inline std::size_t mailboxes_offset(std::size_t slot_bytes, std::size_t slots) {
  return 3 * kPage + 2 * slot_bytes * slots;
}

}  // namespace loom::transport::shm
