// The primitives every algorithm is written in. Each moves `bytes` through the slots in slices
// of one slot, so a long chunk flows through the next hop before it is complete. Both ends of a
// connection slice identically, and every received slot is checked for its size and tag.
// A slice small enough for the connection's inline channel travels there instead (one cache
// line holds the flag and the first bytes); both ends choose by size, so they agree.
#pragma once

#include <cstddef>

#include "algorithms/engine.hpp"
#include "algorithms/waiter.hpp"

namespace loom::algorithms {

class Primitives {
 public:
  // recv_from or send_to may be null when the primitive in use does not need it.
  Primitives(Engine& engine, transport::Connection* recv_from, transport::Connection* send_to);

  // Elements per slice: the most whole elements that fit one slot.
  std::size_t slice_elems() const { return slice_elems_; }
  // Host copies in and out of the slots stream past the caches: for calls whose buffers, on all
  // of a host's ranks, outgrow its last-level cache (engine.beyond_cache()).
  void stream_copies(bool on) { streaming_ = on; }
  // Only the copies out of the slots into the caller's buffers stream past the caches; those
  // into the slots stay cached, where the peer reads them next. For calls whose buffers outgrow
  // the host's last-level cache: the stream saves reading each output line before writing it
  // (all-reduce on 2 cores: 2 ranks at 8-64 MiB, 4 and 8 ranks at 4-64 MiB, 1.1-1.7x faster;
  // below the cache, 0.7x; where ranks outnumber cores, from half the cache on:
  // Engine::ring_outputs_beyond_cache). A result reduced for the next hop goes into its send slot
  // first, then from there into the output (recv_reduce_copy). Not for outputs the call reads
  // again.
  void stream_outputs(bool on) { streaming_out_ = on; }
  // The transport may read a source and write a destination of host memory directly, at any
  // time until the call ends (TCP: no copy into or out of a slot). For algorithms whose sources
  // stay unchanged until then and whose destinations are not read before their data arrives.
  Primitives& use_caller_memory(bool on);

  void send(const void* src, std::size_t count);
  void recv(void* dst, std::size_t count);
  // next = local op received.
  void recv_reduce_send(const void* local, std::size_t count);
  // r = local op received (divided by `divisor` for avg); r goes to dst and, if send, to next
  // (with caller memory: sent from dst, which must then stay unchanged until the call ends).
  void recv_reduce_copy(const void* local, void* dst, std::size_t count, bool send, int divisor);
  // received goes to dst and to next.
  void recv_copy_send(void* dst, std::size_t count);
  // Sends `send_count` elements to send_to while receiving `recv_count` from recv_from, slices
  // interleaved as each side allows (a pairwise exchange). empty_message: an empty transfer is
  // still one (empty) message, so that counts that differ between the ends are a mismatch.
  void send_recv(const void* src, std::size_t send_count, void* dst, std::size_t recv_count,
                 bool empty_message);
  // The same where either side may be left out (sends / receives false): the single copy's
  // steps, whose other block is read in place.
  void send_recv_sides(const void* src, std::size_t send_count, bool sends, void* dst,
                       std::size_t recv_count, bool receives);
  // The same exchange, each slice received reduced with `local` into dst (dst = local op
  // received; local may be dst).
  void send_recv_reduce(const void* src, std::size_t send_count, const void* local, void* dst,
                        std::size_t recv_count);
  // Without waiting: the slices of a `count`-element send (receive) from element `done` on, as
  // far as the connection allows; returns the elements done now. For operations that progress
  // side by side (PointToPointBatch).
  std::size_t send_some(const void* src, std::size_t count, std::size_t done);
  std::size_t recv_some(void* dst, std::size_t count, std::size_t done);
  // One message of `bytes` (at most a slot) between host memory: control messages of the
  // in-place algorithms (direct.cpp), whatever the call's buffers are.
  void send_message(const void* src, std::size_t bytes);
  void recv_message(void* dst, std::size_t bytes);
  // recv_message without waiting: false when the message has not arrived.
  bool try_recv_message(void* dst, std::size_t bytes);

 private:
  // send_recv and send_recv_reduce: received slices copied to dst (local null) or reduced.
  void exchange(const void* src, std::size_t send_count, const void* local, void* dst,
                std::size_t recv_count, bool empty_message, bool sends = true,
                bool receives = true);
  // Send side: a slot (or inline mailbox) for `bytes`, then its post.
  std::byte* try_send(std::size_t bytes);
  std::byte* wait_send(std::size_t bytes);
  void post(std::size_t bytes);
  // Receive side: the next message, checked to be `bytes` of this call, then its release.
  std::optional<transport::RecvSlot> try_recv(std::size_t bytes);
  transport::RecvSlot wait_recv(std::size_t bytes);
  void release();
  // The message waiting on the channel not expected, if any: it means the peer runs another call.
  std::optional<transport::RecvSlot> other_channel(bool inline_expected);
  [[noreturn]] void mismatch(const transport::RecvSlot& slot, std::size_t expected_bytes) const;
  // Caller memory: posts a message from src (after try_send), or copies it into the slot.
  void post_from(std::byte* slot, const std::byte* src, std::size_t bytes);
  // Steers the receive slices [steered, total) of a transfer into `dst`, as far as the window
  // allows; `received` slices of it have arrived. Returns the new `steered`.
  std::size_t steer(std::byte* dst, std::size_t count, std::size_t received, std::size_t steered);
  // A received slice to its destination, unless the transport put it there already. may_stream:
  // false where the call reads the destination again at once (it stays cached).
  void copy_out(std::byte* dst, const transport::RecvSlot& slot, std::size_t bytes,
                bool may_stream = true) {
    if (slot.data == dst) return;
    if (may_stream && streaming_out_ && !device_)
      host_.copy_streaming(dst, slot.data, bytes);
    else
      copy(dst, slot.data, bytes);
  }

  // The data path: the host's (HostDataPath is final, so its calls are devirtualised and inline
  // on the latency path), or the GPU path of a call on device buffers.
  void copy(void* dst, const void* src, std::size_t bytes) {
    if (device_)
      device_->copy(dst, src, bytes);
    else if (streaming_)
      host_.copy_streaming(dst, src, bytes);
    else
      host_.copy(dst, src, bytes);
  }
  void reduce(void* dst, const void* a, const void* b, std::size_t n, DataType t, ReduceOp op) {
    if (device_)
      device_->reduce(dst, a, b, n, t, op);
    else
      host_.reduce(dst, a, b, n, t, op);
  }
  void reduce_copy(void* dst, void* dst2, const void* a, const void* b, std::size_t n, DataType t,
                   ReduceOp op, int divisor) {
    if (device_)
      device_->reduce_copy(dst, dst2, a, b, n, t, op, divisor);
    else
      host_.reduce_copy(dst, dst2, a, b, n, t, op, divisor);
  }
  // Before a slot written by the path is posted, or one read by it is released.
  void complete() {
    if (device_) device_->complete();
  }

  Engine& engine_;
  transport::Connection* recv_from_;
  transport::Connection* send_to_;
  Waiter waiter_;
  DataPath* device_;  // null for host buffers
  HostDataPath host_;
  std::size_t elem_;
  std::size_t slice_elems_;
  std::size_t send_inline_max_;  // 0 when send_to has no inline channel
  std::size_t recv_inline_max_;
  bool streaming_ = false;
  bool streaming_out_ = false;
  // use_caller_memory, where send_to_ (recv_from_) can: the transport moves the caller's
  // memory itself (post_send_from, steer_recv).
  bool send_from_caller_ = false;
  bool recv_into_caller_ = false;
  bool send_inline_ = false;  // the channel of the message being sent / received
  bool recv_inline_ = false;
};

}  // namespace loom::algorithms
