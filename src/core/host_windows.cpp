#include "core/host_windows.hpp"

#include <cstring>

#include <fmt/format.h>

#include "loom/loom.hpp"

namespace loom::core {
namespace {

struct RangeLayout {
  std::uint64_t window;
  std::uint64_t offset;
  std::uint64_t bytes;
};
static_assert(sizeof(RangeLayout) <= sizeof(algorithms::PeerMemory::Range::bytes));

}  // namespace

void HostWindows::add(std::uint64_t number, Window window) {
  const bool shared = !window.peers.empty();
  {
    std::lock_guard lock(mu_);
    windows_.emplace(number, std::move(window));
  }
  // Once some window was shared, the calls keep asking for the direct rows (a call on any other
  // buffer falls back on every rank alike).
  if (shared) any_.store(true, std::memory_order_release);
}

std::optional<std::uint64_t> HostWindows::number_of(const void* p) const {
  std::lock_guard lock(mu_);
  for (const auto& [number, w] : windows_)
    if (w.own->data() == p) return number;
  return std::nullopt;
}

std::shared_ptr<void> HostWindows::owner_of(const void* p) const {
  std::lock_guard lock(mu_);
  for (const auto& [number, w] : windows_)
    if (w.own->data() == p) return std::shared_ptr<void>(w.own, w.own->data());
  return nullptr;
}

void HostWindows::remove(std::uint64_t number) {
  Window gone;
  {
    std::lock_guard lock(mu_);
    auto it = windows_.find(number);
    if (it == windows_.end()) return;
    gone = std::move(it->second);
    windows_.erase(it);
  }
  // Unmapped outside the lock: munmap of a large range takes a while.
}

std::optional<HostWindows::Range> HostWindows::share(const void* p, std::size_t bytes) {
  const auto* at = static_cast<const std::byte*>(p);
  std::lock_guard lock(mu_);
  for (const auto& [number, w] : windows_) {
    const auto* base = static_cast<const std::byte*>(w.own->data());
    if (w.peers.empty() || at < base || at + bytes > base + w.own->size()) continue;
    Range range;
    const RangeLayout layout{number, static_cast<std::uint64_t>(at - base), bytes};
    std::memcpy(range.bytes.data(), &layout, sizeof layout);
    return range;
  }
  return std::nullopt;
}

void* HostWindows::map(int peer, const Range& range, std::size_t bytes) {
  RangeLayout layout;
  std::memcpy(&layout, range.bytes.data(), sizeof layout);
  std::lock_guard lock(mu_);
  auto it = windows_.find(layout.window);
  // Windows are made and freed collectively: a peer's window this rank does not know, or a
  // range past its end (compared without a sum that could wrap), is a bug or a peer that sends
  // what it should not, never the user's input.
  const base::SharedFile* theirs =
      it == windows_.end() || it->second.peers.empty() || peer < 0 || peer >= size_
          ? nullptr
          : &it->second.peers[static_cast<std::size_t>(peer)];
  if (theirs == nullptr || !theirs->valid() || layout.offset > theirs->size() ||
      layout.bytes > theirs->size() - layout.offset || bytes > layout.bytes)
    throw PeerError(fmt::format("shared window {} of rank {}: the range at {} of {} bytes ({} "
                                "used) is not in it",
                                layout.window, peer, layout.offset, layout.bytes, bytes),
                    peer);
  return static_cast<std::byte*>(theirs->data()) + layout.offset;
}

}  // namespace loom::core
