#include "transports/shm/shm_transport.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <thread>

#include <fmt/format.h>

#include "base/logging.hpp"

namespace loom::transport::shm {
namespace {

void* map_fd(int fd, std::size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? nullptr : p;
}

}  // namespace

ShmTransport::ShmTransport(Store& store, int rank, std::uint64_t job_token,
                           const base::Config& config, std::vector<int> pids,
                           store::keys::Space space)
    : store_(store),
      rank_(rank),
      job_token_(job_token),
      config_(config),
      pids_(std::move(pids)),
      space_(space) {}

ShmTransport::~ShmTransport() {
  connections_.clear();
  // Normally every name is gone already (the mapping side unlinks it). A peer that died before
  // mapping, or a creator that died before the peer mapped, leaves one: either end removes it.
  for (std::size_t peer = 0; peer < pids_.size(); ++peer)
    if (static_cast<int>(peer) != rank_ && pids_[peer] > 0)
      ::shm_unlink(segment_name(static_cast<int>(peer)).c_str());
}

void ShmTransport::abort() {
  for (auto& [peer, conn] : connections_) conn->close();
}

std::string ShmTransport::segment_name(int peer) const {
  const std::string kind =
      space_ == store::keys::Space::shm ? "" : fmt::format("-{}", store::keys::name(space_));
  return fmt::format("/loom-{:016x}{}-{}-{}", job_token_, kind, std::min(rank_, peer),
                     std::max(rank_, peer));
}

Connection& ShmTransport::connect(int peer, const base::Deadline& deadline,
                                  const base::Halt& halt) {
  if (auto it = connections_.find(peer); it != connections_.end()) return *it->second;
  const int low = std::min(rank_, peer), high = std::max(rank_, peer);
  const std::string name = segment_name(peer);
  const std::string key = store::keys::shm_segment(space_, low, high);
  const std::size_t slot_bytes = config_.buffer_bytes / static_cast<std::size_t>(config_.slots);
  const std::size_t slots = static_cast<std::size_t>(config_.slots);
  const std::size_t bytes = segment_bytes(slot_bytes, slots);
  auto fail = [&](const char* what, int err) {
    return PeerError(fmt::format("shm: rank {} with rank {}: {} {}: {}", rank_, peer, what, name,
                                 std::strerror(err)));
  };
  void* base = nullptr;
  if (rank_ == low) {
    int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) throw fail("create", errno);
    if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      int err = errno;
      ::close(fd);
      throw fail("size", err);
    }
    base = map_fd(fd, bytes);
    ::close(fd);
    if (!base) throw fail("map", errno);
    auto* h = new (base) SegmentHeader{};
    h->magic = kSegmentMagic;
    h->slot_bytes = slot_bytes;
    h->slots = static_cast<std::uint32_t>(slots);
    new (static_cast<std::byte*>(base) + kPage) FifoControl{};
    new (static_cast<std::byte*>(base) + 2 * kPage) FifoControl{};
    auto* mail = reinterpret_cast<Mailbox*>(static_cast<std::byte*>(base) + 3 * kPage +
                                            2 * slot_bytes * slots);
    for (std::size_t i = 0; i < 2 * slots; ++i) new (mail + i) Mailbox{};
    // Never wait here for the peer to map: connections are made lazily in ring order, and a
    // creator that waited could close a cycle of waits. The peer unlinks the name once mapped.
    store_.set(key, name);
  } else {
    await_segment(peer, key, deadline, halt);
    int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) throw fail("open", errno);
    struct stat st {};
    if (::fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) != bytes) {
      ::close(fd);
      throw PeerError(fmt::format(
          "shm: rank {} with rank {}: segment {} has {} bytes, expected {} (LOOM_BUFFSIZE or "
          "LOOM_SLOTS differ between ranks)",
          rank_, peer, name, st.st_size, bytes));
    }
    base = map_fd(fd, bytes);
    ::close(fd);
    ::shm_unlink(name.c_str());
    if (!base) throw fail("map", errno);
    auto* h = static_cast<SegmentHeader*>(base);
    if (h->magic != kSegmentMagic || h->slot_bytes != slot_bytes || h->slots != slots) {
      ::munmap(base, bytes);
      throw PeerError(fmt::format("shm: rank {} with rank {}: segment {} has another layout", rank_,
                                  peer, name));
    }
  }
  auto conn = std::make_unique<ShmConnection>(rank_, peer, pids_[static_cast<std::size_t>(peer)],
                                              base, bytes, rank_ == low ? 0 : 1, name);
  base::log().debug("connected: {}", conn->describe());
  return *(connections_[peer] = std::move(conn));
}

void ShmTransport::await_segment(int peer, const std::string& key, const base::Deadline& deadline,
                                 const base::Halt& halt) {
  const int pid = pids_[static_cast<std::size_t>(peer)];
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    if (store_.check({key}).front()) return;
    if (halt.triggered())
      halt.raise(
          fmt::format("shm: rank {} (waiting for rank {} to create the segment)", rank_, peer));
    if (pid > 0 && !process_alive(pid))
      throw PeerError(fmt::format("shm: rank {} with rank {}: the peer's process {} is gone "
                                  "(exited or crashed) before it created the segment",
                                  rank_, peer, pid),
                      peer);
    if (deadline.expired())
      throw TimeoutError(fmt::format(
          "shm: rank {} timed out waiting for rank {} to create the segment (is rank {} in the "
          "same collective?)",
          rank_, peer, peer));
    std::this_thread::sleep_for(
        std::min(pause, std::chrono::milliseconds(deadline.remaining_ms(kSetupPollMs))));
    pause = std::min(pause * 2, std::chrono::milliseconds(kSetupPollMs));
  }
}

}  // namespace loom::transport::shm
