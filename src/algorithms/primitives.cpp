#include "algorithms/primitives.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "reduce.hpp"

namespace loom::algorithms {

Primitives::Primitives(Engine& engine, transport::Connection* recv_from,
                       transport::Connection* send_to)
    : engine_(engine),
      recv_from_(recv_from),
      send_to_(send_to),
      waiter_(engine),
      elem_(size_of(engine.call().dtype)) {
  std::size_t slot = std::min(recv_from ? recv_from->slot_bytes() : SIZE_MAX,
                              send_to ? send_to->slot_bytes() : SIZE_MAX);
  slice_elems_ = std::max<std::size_t>(1, slot / elem_);
}

std::byte* Primitives::wait_send() {
  std::byte* slot = nullptr;
  waiter_.until([&] { return (slot = send_to_->try_acquire_send_slot()) != nullptr; },
                send_to_->peer(), "a free send slot to");
  return slot;
}

transport::RecvSlot Primitives::wait_recv(std::size_t expected_bytes) {
  std::optional<transport::RecvSlot> slot;
  waiter_.until([&] { return (slot = recv_from_->try_recv_slot()).has_value(); },
                recv_from_->peer(), "data from");
  if (slot->bytes != expected_bytes || slot->tag != engine_.call().tag())
    mismatch(*slot, expected_bytes);
  return *slot;
}

void Primitives::mismatch(const transport::RecvSlot& slot, std::size_t expected_bytes) const {
  const Collective& c = engine_.call();
  std::uint64_t their_seq = slot.tag >> 32;
  std::uint64_t our_seq = c.tag() >> 32;
  std::string detail =
      their_seq != our_seq
          ? fmt::format("rank {} sent data for its call #{}", recv_from_->peer(),
                        their_seq & 0x7fffffff)
          : fmt::format(
                "rank {} called it with a different operation, type, count or root ({} "
                "bytes where {} were expected)",
                recv_from_->peer(), slot.bytes, expected_bytes);
  throw CollectiveMismatch(
      fmt::format("{}: rank {}: collective mismatch: {}", c.describe(), engine_.rank(), detail));
}

void Primitives::send(const void* src, std::size_t count) {
  auto* s = static_cast<const std::byte*>(src);
  for (std::size_t off = 0; off < count; off += slice_elems_) {
    std::size_t n = std::min(slice_elems_, count - off);
    std::memcpy(wait_send(), s + off * elem_, n * elem_);
    send_to_->post_send(n * elem_, engine_.call().tag());
  }
}

void Primitives::recv(void* dst, std::size_t count) {
  auto* d = static_cast<std::byte*>(dst);
  for (std::size_t off = 0; off < count; off += slice_elems_) {
    std::size_t n = std::min(slice_elems_, count - off);
    auto slot = wait_recv(n * elem_);
    std::memcpy(d + off * elem_, slot.data, n * elem_);
    recv_from_->release_recv_slot();
  }
}

void Primitives::recv_reduce_send(const void* local, std::size_t count) {
  const Collective& c = engine_.call();
  auto* l = static_cast<const std::byte*>(local);
  for (std::size_t off = 0; off < count; off += slice_elems_) {
    std::size_t n = std::min(slice_elems_, count - off);
    auto slot = wait_recv(n * elem_);
    std::byte* out = wait_send();
    kernels::reduce(out, l + off * elem_, slot.data, n, c.dtype, c.op);
    send_to_->post_send(n * elem_, c.tag());
    recv_from_->release_recv_slot();
  }
}

void Primitives::recv_reduce_copy(const void* local, void* dst, std::size_t count, bool send,
                                  int divisor) {
  const Collective& c = engine_.call();
  auto* l = static_cast<const std::byte*>(local);
  auto* d = static_cast<std::byte*>(dst);
  for (std::size_t off = 0; off < count; off += slice_elems_) {
    std::size_t n = std::min(slice_elems_, count - off);
    auto slot = wait_recv(n * elem_);
    std::byte* out = send ? wait_send() : nullptr;
    kernels::reduce_copy(d + off * elem_, out, l + off * elem_, slot.data, n, c.dtype, c.op,
                         divisor);
    if (send) send_to_->post_send(n * elem_, c.tag());
    recv_from_->release_recv_slot();
  }
}

void Primitives::recv_copy_send(void* dst, std::size_t count) {
  auto* d = static_cast<std::byte*>(dst);
  for (std::size_t off = 0; off < count; off += slice_elems_) {
    std::size_t n = std::min(slice_elems_, count - off);
    auto slot = wait_recv(n * elem_);
    std::byte* out = wait_send();
    std::memcpy(out, slot.data, n * elem_);
    std::memcpy(d + off * elem_, slot.data, n * elem_);
    send_to_->post_send(n * elem_, engine_.call().tag());
    recv_from_->release_recv_slot();
  }
}

}  // namespace loom::algorithms
