#include "algorithms/primitives.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "kernels/cpu/cpu_kernels.hpp"

namespace loom::algorithms {

Primitives::Primitives(Engine& engine, transport::Connection* recv_from,
                       transport::Connection* send_to)
    : engine_(engine),
      recv_from_(recv_from),
      send_to_(send_to),
      waiter_(engine),
      device_(engine.device_path()),
      elem_(size_of(engine.call().dtype)),
      send_inline_max_(send_to ? send_to->inline_capacity() : 0),
      recv_inline_max_(recv_from ? recv_from->inline_capacity() : 0) {
  std::size_t slot = std::min(recv_from ? recv_from->slot_bytes() : SIZE_MAX,
                              send_to ? send_to->slot_bytes() : SIZE_MAX);
  if (engine.slice_bytes() != 0) slot = std::min(slot, engine.slice_bytes());
  slice_elems_ = std::max<std::size_t>(1, slot / elem_);
}

Primitives& Primitives::use_caller_memory(bool on) {
  send_from_caller_ =
      on && device_ == nullptr && send_to_ != nullptr && send_to_->moves_caller_memory();
  recv_into_caller_ =
      on && device_ == nullptr && recv_from_ != nullptr && recv_from_->moves_caller_memory();
  return *this;
}

void Primitives::post_from(std::byte* slot, const std::byte* src, std::size_t bytes) {
  if (send_from_caller_ && !send_inline_) {
    send_to_->post_send_from(src, bytes, engine_.call().tag());
    return;
  }
  {
    const WorkTimer timed(engine_, Engine::Work::into_slots, bytes);
    copy(slot, src, bytes);
  }
  complete();
  post(bytes);
}

std::size_t Primitives::steer(std::byte* dst, std::size_t count, std::size_t received,
                              std::size_t steered) {
  if (!recv_into_caller_) return steered;
  const std::size_t slices = (count + slice_elems_ - 1) / slice_elems_;
  for (; steered < slices; ++steered) {
    const std::size_t off = steered * slice_elems_;
    const std::size_t bytes = std::min(slice_elems_, count - off) * elem_;
    if (bytes <= recv_inline_max_) continue;  // the inline channel is never steered
    if (!recv_from_->steer_recv(steered - received, dst + off * elem_, bytes, engine_.call().tag()))
      break;
  }
  return steered;
}

std::byte* Primitives::try_send(std::size_t bytes) {
  send_inline_ = send_inline_max_ > 0 && bytes <= send_inline_max_;  // 0: no inline channel
  return send_inline_ ? send_to_->try_acquire_inline() : send_to_->try_acquire_send_slot(bytes);
}

std::byte* Primitives::wait_send(std::size_t bytes) {
  std::byte* slot = nullptr;
  waiter_.until([&] { return (slot = try_send(bytes)) != nullptr; }, send_to_->peer(),
                send_inline_max_ > 0 && bytes <= send_inline_max_ ? "a free inline mailbox to"
                                                                  : "a free send slot to");
  return slot;
}

void Primitives::post(std::size_t bytes) {
  if (send_inline_)
    send_to_->post_inline(bytes, engine_.call().tag());
  else
    send_to_->post_send(bytes, engine_.call().tag());
}

std::optional<transport::RecvSlot> Primitives::other_channel(bool inline_expected) {
  if (recv_inline_max_ == 0) return std::nullopt;  // one channel only
  return inline_expected ? recv_from_->try_recv_slot() : recv_from_->try_recv_inline();
}

std::optional<transport::RecvSlot> Primitives::try_recv(std::size_t bytes) {
  recv_inline_ = recv_inline_max_ > 0 && bytes <= recv_inline_max_;
  auto expected = [&] {
    return recv_inline_ ? recv_from_->try_recv_inline() : recv_from_->try_recv_slot();
  };
  std::optional<transport::RecvSlot> slot = expected();
  if (!slot) {
    // The peer posts in order: if a later message shows on the other channel, the expected one,
    // posted before it, is visible now or was never sent (the peer runs another call).
    auto other = other_channel(recv_inline_);
    if (!other) return std::nullopt;
    if (!(slot = expected())) mismatch(*other, bytes);
  }
  if (slot->bytes != bytes || slot->tag != engine_.call().tag()) mismatch(*slot, bytes);
  return slot;
}

transport::RecvSlot Primitives::wait_recv(std::size_t bytes) {
  std::optional<transport::RecvSlot> slot;
  waiter_.until([&] { return (slot = try_recv(bytes)).has_value(); }, recv_from_->peer(),
                "data from");
  return *slot;
}

void Primitives::release() {
  if (recv_inline_)
    recv_from_->release_inline();
  else
    recv_from_->release_recv_slot();
}

void Primitives::mismatch(const transport::RecvSlot& slot, std::size_t expected_bytes) const {
  const Collective& c = engine_.call();
  // Against this rank's call of the same number, when it has run it already.
  const transport::Tag* own = engine_.own_call_like(slot.tag);
  const transport::Tag& ours = own ? *own : c.tag();
  std::string detail =
      slot.tag == c.tag()
          ? fmt::format(
                "rank {} sent {} bytes where {} were expected (the ranks disagree on the call's "
                "counts, or LOOM_BUFFSIZE or LOOM_SLOTS differ between them)",
                recv_from_->peer(), slot.bytes, expected_bytes)
          : fmt::format("rank {} called {} while rank {} called {}", recv_from_->peer(),
                        describe_tag(slot.tag), engine_.rank(), describe_tag(ours));
  throw CollectiveMismatch(
      fmt::format("{}: rank {}: collective mismatch: {}", c.describe(), engine_.rank(), detail),
      detail);
}

void Primitives::send(const void* src, std::size_t count) {
  auto* s = static_cast<const std::byte*>(src);
  for (std::size_t off = 0; off < count; off += slice_elems_) {
    const std::size_t bytes = std::min(slice_elems_, count - off) * elem_;
    post_from(wait_send(bytes), s + off * elem_, bytes);
  }
}

void Primitives::recv(void* dst, std::size_t count) {
  auto* d = static_cast<std::byte*>(dst);
  std::size_t steered = 0, received = 0;
  for (std::size_t off = 0; off < count; off += slice_elems_, ++received) {
    steered = steer(d, count, received, steered);
    const std::size_t bytes = std::min(slice_elems_, count - off) * elem_;
    const transport::RecvSlot slot = wait_recv(bytes);
    {
      const WorkTimer timed(engine_, Engine::Work::out_of_slots, bytes);
      copy_out(d + off * elem_, slot, bytes);
    }
    complete();
    release();
  }
}

std::size_t Primitives::send_some(const void* src, std::size_t count, std::size_t done) {
  auto* s = static_cast<const std::byte*>(src);
  while (done < count) {
    const std::size_t bytes = std::min(slice_elems_, count - done) * elem_;
    std::byte* slot = try_send(bytes);
    if (slot == nullptr) break;
    {
      const WorkTimer timed(engine_, Engine::Work::into_slots, bytes);
      copy(slot, s + done * elem_, bytes);
    }
    complete();
    post(bytes);
    done += bytes / elem_;
  }
  return done;
}

std::size_t Primitives::recv_some(void* dst, std::size_t count, std::size_t done) {
  auto* d = static_cast<std::byte*>(dst);
  while (done < count) {
    const std::size_t bytes = std::min(slice_elems_, count - done) * elem_;
    auto slot = try_recv(bytes);
    if (!slot) break;
    {
      const WorkTimer timed(engine_, Engine::Work::out_of_slots, bytes);
      copy(d + done * elem_, slot->data, bytes);
    }
    complete();
    release();
    done += bytes / elem_;
  }
  return done;
}

void Primitives::recv_reduce_send(const void* local, std::size_t count) {
  const Collective& c = engine_.call();
  auto* l = static_cast<const std::byte*>(local);
  for (std::size_t off = 0; off < count; off += slice_elems_) {
    const std::size_t n = std::min(slice_elems_, count - off);
    auto slot = wait_recv(n * elem_);
    std::byte* out = wait_send(n * elem_);
    {
      const WorkTimer timed(engine_, Engine::Work::out_of_slots, n * elem_);
      reduce(out, l + off * elem_, slot.data, n, c.dtype, c.op);
    }
    complete();
    post(n * elem_);
    release();
  }
}

void Primitives::recv_reduce_copy(const void* local, void* dst, std::size_t count, bool send,
                                  int divisor) {
  const Collective& c = engine_.call();
  auto* l = static_cast<const std::byte*>(local);
  auto* d = static_cast<std::byte*>(dst);
  for (std::size_t off = 0; off < count; off += slice_elems_) {
    const std::size_t n = std::min(slice_elems_, count - off);
    auto slot = wait_recv(n * elem_);
    std::byte* out = send ? wait_send(n * elem_) : nullptr;
    if (send && send_from_caller_ && !send_inline_) {  // host memory only: nothing to complete
      // The transport sends the result from dst: one write pass instead of two.
      {
        const WorkTimer timed(engine_, Engine::Work::out_of_slots, n * elem_);
        reduce_copy(d + off * elem_, nullptr, l + off * elem_, slot.data, n, c.dtype, c.op,
                    divisor);
      }
      release();
      post_from(out, d + off * elem_, n * elem_);
      continue;
    }
    {
      const WorkTimer timed(engine_, Engine::Work::out_of_slots, n * elem_);
      if (send && streaming_out_ && !device_) {
        // Beyond the cache: the result goes to the send slot, cached, where the peer reads it
        // next, and from there past the caches into dst, whose lines are then never read before
        // being written. Shared memory, in one launch alternating with the fused pass: 2 ranks
        // 1.03-1.05x at 16 MiB, 1.06-1.09x at 64 MiB; 4 ranks 1.00-1.08x at 4-64 MiB.
        host_.reduce_copy(out, nullptr, l + off * elem_, slot.data, n, c.dtype, c.op, divisor);
        host_.copy_streaming(d + off * elem_, out, n * elem_);
      } else {
        reduce_copy(d + off * elem_, out, l + off * elem_, slot.data, n, c.dtype, c.op, divisor);
      }
    }
    complete();
    if (send) post(n * elem_);
    release();
  }
}

void Primitives::recv_copy_send(void* dst, std::size_t count) {
  auto* d = static_cast<std::byte*>(dst);
  std::size_t steered = 0, received = 0;
  for (std::size_t off = 0; off < count; off += slice_elems_, ++received) {
    steered = steer(d, count, received, steered);
    const std::size_t bytes = std::min(slice_elems_, count - off) * elem_;
    auto slot = wait_recv(bytes);
    std::byte* out = wait_send(bytes);
    if (send_from_caller_ && !send_inline_) {  // host memory only: nothing to complete
      {
        const WorkTimer timed(engine_, Engine::Work::out_of_slots, bytes);
        copy_out(d + off * elem_, slot, bytes, false);  // forwarded from where it lands
      }
      release();
      post_from(out, d + off * elem_, bytes);
      continue;
    }
    {
      const WorkTimer timed(engine_, Engine::Work::out_of_slots, bytes);
      copy_out(d + off * elem_, slot, bytes);
      copy(out, slot.data, bytes);
    }
    complete();
    post(bytes);
    release();
  }
}

void Primitives::send_recv(const void* src, std::size_t send_count, void* dst,
                           std::size_t recv_count, bool empty_message) {
  exchange(src, send_count, nullptr, dst, recv_count, empty_message);
}

void Primitives::send_recv_sides(const void* src, std::size_t send_count, bool sends, void* dst,
                                 std::size_t recv_count, bool receives) {
  exchange(src, send_count, nullptr, dst, recv_count, true, sends, receives);
}

void Primitives::send_recv_reduce(const void* src, std::size_t send_count, const void* local,
                                  void* dst, std::size_t recv_count) {
  exchange(src, send_count, local, dst, recv_count, false);
}

void Primitives::exchange(const void* src, std::size_t send_count, const void* local, void* dst,
                          std::size_t recv_count, bool empty_message, bool sends, bool receives) {
  const Collective& c = engine_.call();
  auto* s = static_cast<const std::byte*>(src);
  auto* l = static_cast<const std::byte*>(local);
  auto* d = static_cast<std::byte*>(dst);
  // Each side in slices; an empty transfer is one empty message where asked for, so that a peer
  // expecting data finds a mismatch instead of waiting.
  auto slices = [&](std::size_t count) {
    return count == 0 ? (empty_message ? 1 : 0) : (count + slice_elems_ - 1) / slice_elems_;
  };
  const std::size_t to_send = sends ? slices(send_count) : 0;
  const std::size_t to_receive = receives ? slices(recv_count) : 0;
  std::size_t sent = 0, received = 0, steered = 0;
  // Slices go out and come in as each side allows: sending everything before receiving would
  // deadlock exchanges whose FIFOs fill up, each rank waiting for the next to receive.
  while (sent < to_send || received < to_receive) {
    waiter_.until(
        [&] {
          bool moved = false;
          if (sent < to_send) {
            const std::size_t off = sent * slice_elems_;
            const std::size_t bytes = std::min(slice_elems_, send_count - off) * elem_;
            if (std::byte* slot = try_send(bytes)) {
              post_from(slot, s + off * elem_, bytes);
              ++sent, moved = true;
            }
          }
          if (received < to_receive) {
            if (l == nullptr) steered = steer(d, recv_count, received, steered);
            const std::size_t off = received * slice_elems_;
            const std::size_t n = std::min(slice_elems_, recv_count - off);
            const std::size_t bytes = n * elem_;
            if (auto slot = try_recv(bytes)) {
              {
                const WorkTimer timed(engine_, Engine::Work::out_of_slots, bytes);
                if (l != nullptr)
                  reduce(d + off * elem_, l + off * elem_, slot->data, n, c.dtype, c.op);
                else
                  copy_out(d + off * elem_, *slot, bytes);
              }
              complete();
              release();
              ++received, moved = true;
            }
          }
          return moved;
        },
        received < to_receive ? recv_from_->peer() : send_to_->peer(), "an exchange with");
  }
}

void Primitives::send_message(const void* src, std::size_t bytes) {
  std::byte* slot = wait_send(bytes);
  kernels::copy(slot, src, bytes);
  post(bytes);
}

void Primitives::recv_message(void* dst, std::size_t bytes) {
  const auto slot = wait_recv(bytes);
  kernels::copy(dst, slot.data, bytes);
  release();
}

bool Primitives::try_recv_message(void* dst, std::size_t bytes) {
  const auto slot = try_recv(bytes);
  if (!slot) return false;
  kernels::copy(dst, slot->data, bytes);
  release();
  return true;
}

}  // namespace loom::algorithms
