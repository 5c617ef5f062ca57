// The primitives every algorithm is written in. Each moves `bytes` through the slots in slices
// of one slot, so a long chunk flows through the next hop before it is complete. Both ends of a
// connection slice identically, and every received slot is checked for its size and tag.
#pragma once

#include <cstddef>

#include "algorithms/collective.hpp"
#include "algorithms/waiter.hpp"

namespace loom::algorithms {

class Primitives {
 public:
  // recv_from or send_to may be null when the primitive in use does not need it.
  Primitives(Engine& engine, transport::Connection* recv_from, transport::Connection* send_to);

  // Elements per slice: the most whole elements that fit one slot.
  std::size_t slice_elems() const { return slice_elems_; }

  void send(const void* src, std::size_t count);
  void recv(void* dst, std::size_t count);
  // next = local op received.
  void recv_reduce_send(const void* local, std::size_t count);
  // r = local op received (divided by `divisor` for avg); r goes to dst and, if send, to next.
  void recv_reduce_copy(const void* local, void* dst, std::size_t count, bool send, int divisor);
  // received goes to dst and to next.
  void recv_copy_send(void* dst, std::size_t count);

 private:
  transport::RecvSlot wait_recv(std::size_t expected_bytes);
  std::byte* wait_send();
  [[noreturn]] void mismatch(const transport::RecvSlot& slot, std::size_t expected_bytes) const;

  Engine& engine_;
  transport::Connection* recv_from_;
  transport::Connection* send_to_;
  Waiter waiter_;
  std::size_t elem_;
  std::size_t slice_elems_;
};

}  // namespace loom::algorithms
