// Communicator::alloc and free: the shared host windows (core/host_windows.hpp). Both are
// collective, through this communicator's own calls, so that every rank numbers the windows
// alike and agrees whether each is shared.
#include <cstring>

#include <fmt/format.h>

#include "base/logging.hpp"
#include "core/communicator_impl.hpp"

namespace loom {

using algorithms::Kind;

namespace {

// What a peer needs to map this rank's window; ok = 0: there is none to map.
struct Offer {
  base::SharedFileId id;
  std::uint64_t ok = 0;
  std::uint64_t error = 0;  // its errno when not ok
};

constexpr std::uint64_t kNotAWindow = ~std::uint64_t{0};

}  // namespace

void* Communicator::Impl::alloc(std::size_t bytes) {
  int err = 0;
  base::SharedFile own = base::SharedFile::create(bytes, &err);
  const Offer mine{own.id(), own.valid() ? 1u : 0u, static_cast<std::uint64_t>(err)};
  std::vector<Offer> offers(static_cast<std::size_t>(size_));
  run_own(Kind::all_gather, &mine, offers.data(), sizeof(Offer), DataType::u8);
  const std::uint64_t number = windows_->next_number();  // the same on every rank: collective

  // Why the peers' windows are not mapped, if they are not: no ranks to share with (start()), or
  // one of them could not make or map its window.
  std::string why = windows_->why_not_shared();
  for (int r = 0; r < size_ && why.empty(); ++r)
    if (offers[static_cast<std::size_t>(r)].ok == 0)
      why = fmt::format("{} could not create its window ({})", who(r),
                        std::strerror(static_cast<int>(offers[static_cast<std::size_t>(r)].error)));
  std::vector<base::SharedFile> peers;
  if (why.empty()) {
    peers.resize(static_cast<std::size_t>(size_));
    for (int r = 0; r < size_ && why.empty(); ++r) {
      if (r == rank_) continue;
      peers[static_cast<std::size_t>(r)] =
          base::SharedFile::open(offers[static_cast<std::size_t>(r)].id, &err);
      if (!peers[static_cast<std::size_t>(r)].valid())
        why = fmt::format("{} cannot map the window of {} ({})", who(rank_), who(r),
                          std::strerror(err));
    }
  }
  // Shared only if every rank mapped every other's: a call in place needs all of them.
  const std::int32_t mapped = why.empty() ? 1 : 0;
  std::int32_t everywhere = 0;
  run_own(Kind::all_reduce, &mapped, &everywhere, 1, DataType::i32, ReduceOp::min);
  if (!own.valid())
    throw Error(fmt::format("alloc of {} bytes: {}: memfd_create/mmap failed: {}", bytes,
                            who(rank_), std::strerror(static_cast<int>(mine.error))));
  if (everywhere == 0) {
    peers.clear();
    if (!why.empty())
      base::log().info(
          "alloc: window {} of {} bytes is not shared ({}): calls on it go through the "
          "slots",
          number, bytes, why);
  }
  void* p = own.data();
  windows_->add(number, core::HostWindows::Window{
                            std::make_shared<base::SharedFile>(std::move(own)), std::move(peers)});
  return p;
}

std::shared_ptr<void> Communicator::Impl::alloc_shared(std::size_t bytes) {
  return windows_->owner_of(alloc(bytes));
}

void Communicator::Impl::free(void* p) {
  const std::uint64_t mine = windows_->number_of(p).value_or(kNotAWindow);
  if (queue_
          ->closed()) {  // no calls any more: the peers have unmapped theirs, or will at their end
    if (mine == kNotAWindow)
      throw InvalidArgument(
          fmt::format("free: {}: {} is not memory alloc() returned", who(rank_), fmt::ptr(p)));
    windows_->remove(mine);
    return;
  }
  std::vector<std::uint64_t> numbers(static_cast<std::size_t>(size_));
  run_own(Kind::all_gather, &mine, numbers.data(), 1, DataType::u64);
  // Every rank sees the same numbers, so every rank frees, or every rank raises.
  for (int r = 0; r < size_; ++r) {
    const std::uint64_t theirs = numbers[static_cast<std::size_t>(r)];
    if (theirs == kNotAWindow)
      throw InvalidArgument(fmt::format("free: {}: {} passes memory alloc() did not return{}",
                                        who(rank_), who(r), r == rank_ ? "" : " (nothing freed)"));
    if (theirs != numbers.front())
      throw InvalidArgument(fmt::format(
          "free: {}: {} frees window {} of this communicator and {} window {} (nothing freed)",
          who(rank_), who(0), numbers.front(), who(r), theirs));
  }
  // The exchange came after every earlier call on every rank: no peer still reads this window.
  windows_->remove(mine);
}

}  // namespace loom
