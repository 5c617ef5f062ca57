// A TCP connection to one peer over several sockets. Slot sequence number s travels on socket
// s % nsocks as one frame (24-byte header, lead, payload, tail); each socket carries its frames in
// order. The payload is written from a slot or from the caller's memory, and read into a slot or
// into a steered buffer.
//
// Frames keep the kernel's copies in step with the memory they copy. The kernel copies a frame
// into pages that follow the stream (each frame starts where the last one ended, or at a page's
// start), and copies out of them with `rep movsb`, which on an AMD Zen 3 runs about 2.5x slower
// wherever the destination lies 1-31 bytes past the source within a page. A 24-byte header put
// every payload 8 bytes past its source (malloc'd memory starts 16 bytes into a page): each
// frame's padding (lead) puts the payload at its source's offset modulo 64, and its tail makes the
// frame a whole number of 64-byte lines, so that the next frame starts in step too; a slot
// receives at that offset (docs/results/tcp-frames-2026-12-01.md: 2 ranks over TCP on a Zen 3,
// 1-2 MiB, 1.5-3x faster).
//
// Kept in the core's cache where it can be: a frame takes the slot buffer freed last (a stack,
// not a turn through all of them), and the receiver reads frames ahead of the one the engine
// consumes only up to a budget of bytes. The engine runs in one thread, so reading ahead
// overlaps nothing; the kernel holds what waits. Reading eight 60 KiB frames ahead into eight
// buffers in turn evicted each before the engine reduced it. Measured in one launch alternating
// the two call by call (f32 sum all-reduce, 2 cores, 1 MiB L2; docs/results/tcp-cache-*):
// 4 ranks 256 KiB-64 MiB 1.02-1.13x, 2 ranks 1-2 MiB 1.06-1.23x, 3 and 8 ranks 1.04-1.18x;
// 2 ranks at 4-16 MiB 0.98-1.02x.
#pragma once

#include <cstdlib>
#include <memory>
#include <vector>

#include "transports/transport.hpp"

namespace loom::transport::tcp {

inline constexpr std::uint32_t kFrameMagic = 0x4c4f4f4d;  // "LOOM"
// Frames are whole numbers of this many bytes, and a payload lies at its source's offset modulo
// this many bytes in the stream.
inline constexpr std::size_t kFrameAlign = 64;

struct FrameHeader {
  std::uint32_t bytes;
  std::uint32_t check;  // (bytes ^ kFrameMagic) + lead: catches a desynchronised stream early
  std::uint64_t tag_word;
  std::uint64_t tag_count;
};
static_assert(sizeof(FrameHeader) == 24);
// The bytes between the header and the payload (under kFrameAlign; the check word carries them).
inline std::uint32_t frame_lead(const FrameHeader& h) {
  return h.check - (h.bytes ^ kFrameMagic);
}
// The bytes after the payload that end the frame on a kFrameAlign boundary.
inline std::size_t frame_tail(std::size_t lead, std::size_t bytes) {
  return (kFrameAlign - (sizeof(FrameHeader) + lead + bytes) % kFrameAlign) % kFrameAlign;
}
// The whole frame a header begins: header, lead, payload and tail.
inline std::size_t frame_bytes(const FrameHeader& h) {
  return sizeof(FrameHeader) + frame_lead(h) + h.bytes + frame_tail(frame_lead(h), h.bytes);
}
// Whether a received header can be believed: the check word gives a lead within a line (a stream
// out of step, or not from a Loom peer, rarely does) and the payload fits a slot.
inline bool frame_header_valid(const FrameHeader& h, std::size_t slot_bytes) {
  return frame_lead(h) < kFrameAlign && h.bytes <= slot_bytes;
}

class TcpConnection final : public Connection {
 public:
  // readahead_bytes: the frames received beyond the oldest one not yet released stop at this
  // many payload bytes (the oldest is always read; 0: no frame ahead unless none is held).
  TcpConnection(int self, int peer, std::vector<int> fds, std::size_t slot_bytes, int slots,
                std::size_t readahead_bytes, std::string peer_address);
  ~TcpConnection() override;

  int peer() const override { return peer_; }
  std::size_t slot_bytes() const override { return slot_bytes_; }
  using Connection::try_acquire_send_slot;
  std::byte* try_acquire_send_slot(std::size_t bytes) override;
  void post_send(std::size_t bytes, Tag tag) override;
  std::optional<RecvSlot> try_recv_slot() override;
  void release_recv_slot() override;
  bool moves_caller_memory() const override { return true; }
  void post_send_from(const std::byte* src, std::size_t bytes, Tag tag) override;
  void settle_sends() override;
  bool steer_recv(std::size_t ahead, std::byte* dst, std::size_t bytes, Tag tag) override;
  void unsteer() override;
  bool progress() override;
  bool send_idle() const override { return send_done_ == send_posted_; }
  void add_poll_fds(std::vector<pollfd>& fds) const override;
  void sleep(int timeout_ms) override;
  std::string describe() const override;
  std::vector<Region> host_regions() const override {
    return {{send_buffer_.get(), slot_bytes_ * slots_},
            {recv_buffer_.get(), recv_stride_ * slots_}};
  }
  // Ends both directions: the peer sees end of stream at once.
  void shutdown();

 private:
  struct SlotInfo {
    std::size_t bytes = 0;
    Tag tag;
    bool ready = false;  // send: fully written; recv: fully received
    // Send: the caller's memory the payload is written from (null: the slot). Receive: where the
    // payload went once ready.
    const std::byte* data = nullptr;
  };
  // Where a receive slot's message goes instead of the slot, if it comes as expected.
  struct Steer {
    std::byte* dst = nullptr;
    std::size_t bytes = 0;
    Tag tag;
  };
  struct Socket {
    int fd;
    std::uint64_t next_send;      // sequence number this socket writes next
    std::size_t send_offset = 0;  // bytes of the frame written
    std::size_t send_lead = 0;    // the frame's lead and tail, fixed at its first byte
    std::size_t send_tail = 0;
    FrameHeader send_header{};
    std::uint64_t next_recv;
    std::size_t recv_offset = 0;       // bytes of the frame read for next_recv
    std::byte recv_line[kFrameAlign];  // the frame's first line, as read
    FrameHeader recv_header{};         // from recv_line, once it is whole
    std::byte* recv_into = nullptr;    // where next_recv's payload goes, fixed once the line is in
    // Where its frame's bytes after the first line go, as they lie, when the payload is in a slot
    // buffer with room for the lead and tail around it (null: steered, read in pieces).
    std::byte* recv_frame = nullptr;
    bool closed = false;  // end of stream: the peer may close once it has sent all it had to
  };
  void post(std::size_t bytes, Tag tag, const std::byte* from);
  // Bytes of next_recv's payload read so far on s, into recv_into.
  static std::size_t payload_read(const Socket& s);
  // Where next_recv's payload goes: its steered buffer, or a slot buffer at its line offset.
  std::byte* place_payload(Socket& s);
  // The slot buffer freed last.
  static std::byte* take(std::vector<std::byte*>& free);
  // Whether s may read now: a frame under way, the oldest frame, or one within the budget.
  bool may_read(const Socket& s) const;
  bool write_some(Socket& s);
  bool read_some(Socket& s);
  void advance_send_done();
  [[noreturn]] void fail(const std::string& what, int err) const;

  int self_;
  int peer_;
  std::size_t slot_bytes_;
  std::uint64_t slots_;
  std::size_t readahead_bytes_;
  std::string peer_address_;
  std::vector<Socket> sockets_;
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  // A receive slot buffer holds a payload placed up to kFrameAlign - 1 bytes into it, and the
  // frame's bytes after its first line around it: what is left of the lead before, the tail
  // after (at most kFrameAlign - 1 bytes each).
  std::size_t recv_stride_;
  std::unique_ptr<std::byte[], Free> send_buffer_;  // page-aligned, as every slot in it
  std::unique_ptr<std::byte[], Free> recv_buffer_;
  std::vector<SlotInfo> send_slots_;
  std::vector<SlotInfo> recv_slots_;
  std::vector<Steer> steers_;        // per receive slot
  std::uint64_t send_posted_ = 0;    // slots < this are posted
  std::uint64_t send_done_ = 0;      // slots < this are written to the kernel
  std::uint64_t recv_consumed_ = 0;  // slots < this are released by the engine
  // The slot buffer of each frame in flight, by sequence number modulo slots (receive: null
  // while steered or not begun), and the buffers free, the one freed last on top.
  std::vector<std::byte*> send_buffer_of_;
  std::vector<std::byte*> recv_buffer_of_;
  std::vector<std::byte*> free_send_;
  std::vector<std::byte*> free_recv_;
  std::byte* acquired_send_ = nullptr;  // try_acquire_send_slot's answer until the post
  std::size_t held_bytes_ = 0;          // payload of the frames begun and not yet released
};

}  // namespace loom::transport::tcp
