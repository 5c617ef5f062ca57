// The transport interface: a connection to a peer is a FIFO of fixed-size slots in each
// direction, not a message API. The engine writes (or reduces) straight into a send slot and
// reads straight from a receive slot, so a transport that shares memory moves no extra copy.
//
// A connection is used by one thread at a time (the communicator's engine) and never blocks:
// the engine waits through Waiter, which drives progress() of the connections it needs and
// sleeps in poll() on their descriptors after a bounded spin.
#pragma once

#include <poll.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "base/deadline.hpp"
#include "base/halt.hpp"

namespace loom::transport {

// What carries a connection: the cost model prices each kind differently.
enum class TransportKind : std::uint8_t { shm, tcp, ibverbs, cudaipc };
inline std::string_view to_string(TransportKind kind) {
  switch (kind) {
    case TransportKind::shm:
      return "shm";
    case TransportKind::tcp:
      return "tcp";
    case TransportKind::ibverbs:
      return "ibverbs";
    case TransportKind::cudaipc:
      return "cudaipc";
  }
  return "?";
}

// Connection setup waits in polls of at most this many milliseconds and looks at the halt
// between them: abort() or another rank's failure ends it within about that long.
inline constexpr int kSetupPollMs = 50;

// Set by the sender on every slot: which call the bytes belong to (an opaque signature the engine
// encodes: sequence number, operation, type, reduction, root, count).
struct Tag {
  std::uint64_t word = 0;
  std::uint64_t count = 0;
  bool operator==(const Tag&) const = default;
};

struct RecvSlot {
  const std::byte* data;
  std::size_t bytes;
  Tag tag;
};

class Connection {
 public:
  virtual ~Connection() = default;
  virtual int peer() const = 0;
  // Capacity of every slot, in bytes.
  virtual std::size_t slot_bytes() const = 0;

  // Sender side. Where the next message of `bytes` (at most slot_bytes()) goes, in the next free
  // slot, or nullptr while every slot is in flight. A transport may place the message anywhere
  // in its slot. Calling it again with the same size before post_send returns the same place;
  // post_send then sends at most `bytes` from there.
  virtual std::byte* try_acquire_send_slot(std::size_t bytes) = 0;
  // The next free slot, whole.
  std::byte* try_acquire_send_slot() { return try_acquire_send_slot(slot_bytes()); }
  virtual void post_send(std::size_t bytes, Tag tag) = 0;

  // Receiver side. The oldest filled slot, or nullopt. Stays valid until release_recv_slot().
  virtual std::optional<RecvSlot> try_recv_slot() = 0;
  virtual void release_recv_slot() = 0;

  // The inline channel: a second FIFO for messages of at most inline_capacity() bytes (0: this
  // transport has none), used with the same four calls as the slots. Its ready flag shares the
  // first cache line with the data, so a receiver sees a small message in one load instead of a
  // counter, a slot header and the data (NCCL's LL protocol has the same aim). Both ends pick
  // the channel of a message by its size, so they always agree.
  virtual std::size_t inline_capacity() const { return 0; }
  virtual std::byte* try_acquire_inline() { return nullptr; }
  virtual void post_inline(std::size_t, Tag) { no_inline_channel(); }
  virtual std::optional<RecvSlot> try_recv_inline() { return std::nullopt; }
  virtual void release_inline() { no_inline_channel(); }

  // Caller memory. A transport that copies through the kernel anyway (TCP) can send straight
  // from the caller's buffer and receive straight into it, saving the copy into and out of a
  // slot at each end. The engine opts in per algorithm, where a source stays unchanged until
  // the call ends and a destination is not read before its message arrives.
  virtual bool moves_caller_memory() const { return false; }
  // Posts the message of the slot just acquired (try_acquire_send_slot) from `src` instead of the
  // slot: the bytes at src are read until send_idle(), or until settle_sends() copies what is left.
  virtual void post_send_from(const std::byte* src, std::size_t bytes, Tag tag) {
    (void)src, (void)bytes, (void)tag;
    no_caller_memory();
  }
  // Copies what posted sends have not yet handed over from the caller's memory into their slots,
  // so that the caller may reuse it (a call that fails before its sends drain).
  virtual void settle_sends() {}
  // The message `ahead` places after the oldest unreleased receive slot goes to `dst` instead of
  // its slot, provided it has exactly `bytes` and `tag` and none of it has been read yet; then
  // try_recv_slot() returns it with data == dst. Returns false when that message is beyond the
  // receive window (ask again once slots are released); true when it is steered or can no longer
  // be (already read, or arriving in the slot).
  virtual bool steer_recv(std::size_t ahead, std::byte* dst, std::size_t bytes, Tag tag) {
    (void)ahead, (void)dst, (void)bytes, (void)tag;
    return true;
  }
  // Forgets every steered receive not yet arrived: its message arrives in its slot.
  virtual void unsteer() {}
  // Moves bytes without blocking; returns whether anything moved. Raises PeerError when the
  // peer is gone or breaks the protocol.
  virtual bool progress() = 0;
  // True once every posted slot has been handed over (to the kernel or the peer's memory), so
  // the peer receives it without further progress() calls.
  virtual bool send_idle() const = 0;
  // Descriptors and events whose readiness means progress() can move something.
  virtual void add_poll_fds(std::vector<pollfd>& fds) const = 0;
  // Sleeping without missing a wake-up: prepare_sleep() records what the peer has written so
  // far; the caller then looks once more for what it waits for, and sleep() returns at once if
  // anything moved since prepare_sleep(), else when the peer posts or releases something or
  // timeout_ms passes.
  virtual void prepare_sleep() {}
  virtual void sleep(int timeout_ms) = 0;
  // From another thread of this process: ends this rank's sleep() on this connection, or makes
  // the next one return at once where it has begun since prepare_sleep(). Where a transport has
  // no way to, the sleep ends at its timeout.
  virtual void wake_sleep() {}
  // Whether wake_sleep() ends a sleep() here (else a waiter that must be woken sleeps elsewhere).
  virtual bool sleep_wakeable() const { return false; }
  virtual std::string describe() const = 0;

  // The host memory that slot and inline pointers point into, so that a GPU data path knows to
  // stage those through device memory for its kernels. Empty for a transport whose slots are
  // device memory.
  struct Region {
    void* base;
    std::size_t bytes;
  };
  virtual std::vector<Region> host_regions() const = 0;

 private:
  [[noreturn]] static void no_inline_channel() {
    throw std::logic_error("this transport has no inline channel (inline_capacity() is 0)");
  }
  [[noreturn]] static void no_caller_memory() {
    throw std::logic_error("this transport does not move caller memory (moves_caller_memory())");
  }
};

class Transport {
 public:
  virtual ~Transport() = default;
  // The kind of transport that reaches `peer` for calls on host buffers.
  virtual TransportKind kind_to(int peer) const = 0;
  // The connection to `peer`, set up on first use; both ranks must ask for it. Setting it up
  // waits in short polls that end at the deadline (TimeoutError) or once `halt` is triggered
  // (its error), like every wait of a call.
  virtual Connection& connect(int peer, const base::Deadline& deadline, const base::Halt& halt) = 0;
  // The connection for calls on GPU buffers: one whose slots are device memory where the
  // transport has one for this peer (CUDA IPC), else the host connection (slots staged).
  virtual Connection& connect_device(int peer, const base::Deadline& deadline,
                                     const base::Halt& halt) {
    return connect(peer, deadline, halt);
  }
  // After a failure: tell every connected peer, so that none of them waits for this rank.
  virtual void abort() = 0;
  // Lets peers that are connecting to this rank progress for up to `timeout_ms` (TCP: accepts
  // and moves their handshakes), while this rank waits for a connection of another transport.
  // Else a rank waiting as a segment's opener, whose creator dials a third rank that dials this
  // one, would close a cycle of waits. By default it only sleeps.
  virtual void serve_connecting_peers(int timeout_ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms));
  }
  // What this transport does while its own connect waits for a peer (serve_connecting_peers of
  // another transport of this rank); by default it sleeps.
  virtual void set_connect_wait(std::function<void(int timeout_ms)>) {}
};

}  // namespace loom::transport
