// libFuzzer: the slot headers a receiver decodes. The input is (a) the byte stream a TCP peer
// sends, read through a TcpConnection over a socketpair, and (b) the shared FIFO control, slot
// metadata and inline mailboxes a shared-memory peer writes, read through a ShmConnection. Every
// slot handed to the engine must lie within its slot; bad input may only raise PeerError.
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>

#include "loom/loom.hpp"
#include "transports/shm/shm_connection.hpp"
#include "transports/tcp/tcp_connection.hpp"

namespace {

constexpr std::size_t kSlotBytes = 4096;
constexpr int kSlots = 4;

// A message lies within its own slot (it may be placed anywhere in it).
void check_slot(const loom::transport::RecvSlot& slot, const std::byte* slot_begin) {
  if (slot.bytes > kSlotBytes || slot.data < slot_begin ||
      slot.data + slot.bytes > slot_begin + kSlotBytes)
    __builtin_trap();
}

void tcp_stream(const std::uint8_t* data, std::size_t size) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return;
  std::size_t sent = 0;
  while (sent < size) {
    const ssize_t n = ::send(fds[1], data + sent, size - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<std::size_t>(n);
  }
  ::shutdown(fds[1], SHUT_WR);
  loom::transport::tcp::TcpConnection conn(0, 1, {fds[0]}, kSlotBytes, kSlots, kSlotBytes / 2,
                                           "fuzz");
  try {
    for (int round = 0; round < 64; ++round) {
      bool moved = conn.progress();
      while (auto slot = conn.try_recv_slot()) {
        if (slot->bytes > kSlotBytes) __builtin_trap();
        conn.release_recv_slot();
        moved = true;
      }
      if (!moved) break;
    }
  } catch (const loom::PeerError&) {
  }
  ::close(fds[1]);
}

void shm_segment(const std::uint8_t* data, std::size_t size) {
  using namespace loom::transport::shm;
  const std::size_t bytes = segment_bytes(kSlotBytes, kSlots);
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) return;
  auto* b = static_cast<std::byte*>(base);
  auto* header = new (b) SegmentHeader{};
  header->magic = kSegmentMagic;
  header->slot_bytes = kSlotBytes;
  header->slots = kSlots;
  // The peer (side 1) writes the FIFO high -> low (page 2) and its mailboxes: fill them.
  const std::size_t control = std::min(size, kPage);
  std::memcpy(b + 2 * kPage, data, control);
  std::byte* mail = b + 3 * kPage + 2 * kSlotBytes * kSlots + sizeof(Mailbox) * kSlots;
  std::memcpy(mail, data + control, std::min(size - control, sizeof(Mailbox) * kSlots));
  header->closed[1] = 1;  // whatever was posted is read, then the connection ends
  std::byte* recv_data = b + 3 * kPage + kSlotBytes * kSlots;
  int received = 0;
  try {
    ShmConnection conn(0, 1, ::getpid(), base, bytes, kSlotBytes, kSlots, 0, "fuzz", -1);
    for (int i = 0; i < 2 * kSlots; ++i) {
      if (auto slot = conn.try_recv_slot()) {
        check_slot(*slot, recv_data + static_cast<std::size_t>(received++ % kSlots) * kSlotBytes);
        conn.release_recv_slot();
      }
      if (auto slot = conn.try_recv_inline()) {
        if (slot->bytes > kInlineCapacity) __builtin_trap();
        conn.release_inline();
      }
    }
  } catch (const loom::PeerError&) {
  }  // the connection's destructor unmaps the segment
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  if (data[0] & 1)
    tcp_stream(data + 1, size - 1);
  else
    shm_segment(data + 1, size - 1);
  return 0;
}
