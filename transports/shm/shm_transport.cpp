#include "transports/shm/shm_transport.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <new>
#include <thread>

#include <fmt/format.h>

#include "base/auth.hpp"
#include "base/cpu_cache.hpp"
#include "base/logging.hpp"
#include "base/process_memory.hpp"

namespace loom::transport::shm {
namespace {

constexpr const char* kShmDirectory = "/dev/shm";
constexpr std::size_t kRandomHexDigits = 32;
// A segment without size and lock may be one whose creator is between shm_open and flock.
constexpr auto kUnsizedSegmentGrace = std::chrono::seconds(60);
// How long a transport being destroyed waits for live peers to map the segments it created.
constexpr auto kLingerForPeers = std::chrono::seconds(5);

void* map_fd(int fd, std::size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? nullptr : p;
}

std::string random_hex() {
  const base::Nonce random = base::random_nonce();
  std::string out;
  for (std::size_t i = 0; i < kRandomHexDigits / 2; ++i) out += fmt::format("{:02x}", random[i]);
  return out;
}

bool is_hex(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// Takes the creator's shared lock; a sweeper may hold the lock exclusively for a moment.
bool lock_shared(int fd) {
  for (int attempt = 0; attempt < 200; ++attempt) {
    if (::flock(fd, LOCK_SH | LOCK_NB) == 0) return true;
    if (errno != EWOULDBLOCK && errno != EINTR) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

// Whether the segment `name` in /dev/shm is this user's and left over: no creator holds it.
bool orphaned(const std::string& name) {
  const std::string path = fmt::format("{}/{}", kShmDirectory, name);
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false;
  struct stat st {};
  bool orphan = false;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid() &&
      ::flock(fd, LOCK_EX | LOCK_NB) == 0) {
    const auto age =
        std::chrono::system_clock::now() - std::chrono::system_clock::from_time_t(st.st_ctime);
    orphan = st.st_size > 0 || age > kUnsizedSegmentGrace;  // sized only after the lock is held
  }
  ::close(fd);
  return orphan;
}

}  // namespace

bool is_segment_name(std::string_view name) {
  if (name.rfind("loom-", 0) != 0 || name.size() < 5 + 16 + 1 + kRandomHexDigits) return false;
  const std::string_view random = name.substr(name.size() - kRandomHexDigits);
  return name[name.size() - kRandomHexDigits - 1] == '-' && is_hex(random) &&
         is_hex(name.substr(5, 16));
}

int sweep_orphaned_segments() {
  std::vector<std::string> names;
  if (DIR* dir = ::opendir(kShmDirectory)) {
    while (const dirent* entry = ::readdir(dir))
      if (is_segment_name(entry->d_name)) names.emplace_back(entry->d_name);
    ::closedir(dir);
  }
  int removed = 0;
  for (const std::string& name : names) {
    if (!orphaned(name) || ::shm_unlink(("/" + name).c_str()) != 0) continue;
    base::log().debug("shm: removed the left-over segment {}", name);
    ++removed;
  }
  return removed;
}

ShmTransport::ShmTransport(const Setup& setup, std::vector<int> pids, store::keys::Space space)
    : store_(setup.store),
      rank_(setup.rank),
      job_token_(setup.token),
      link_(setup.link),
      pacing_(setup.pacing),
      pids_(std::move(pids)),
      space_(space) {
  if (const int removed = sweep_orphaned_segments(); removed > 0)
    base::log().info("shm: rank {} removed {} segment(s) left over by processes that died", rank_,
                     removed);
}

ShmTransport::~ShmTransport() {
  // A segment's creator may be done with it before the peer has mapped it: its last message to the
  // peer waits in a slot (Bruck's all-gather, a broadcast's chain). Unlinking the name now would
  // lose that message, so wait, a bounded time and only while the peer lives and nothing failed,
  // until the peer has mapped it (it unlinks the name then).
  const auto until = std::chrono::steady_clock::now() + kLingerForPeers;
  for (const auto& [peer, segment] : created_) {
    const int pid = pids_[static_cast<std::size_t>(peer)];
    const std::string path = std::string(kShmDirectory) + segment.name;
    while (!aborted_ && ::access(path.c_str(), F_OK) == 0 &&
           std::chrono::steady_clock::now() < until && (pid <= 0 || base::process_alive(pid)))
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  connections_.clear();
  // Normally the opener has unlinked the name already; a peer that died before mapping leaves
  // it to the creator, and a creator that died before the peer mapped to the sweep.
  for (auto& [peer, segment] : created_) {
    ::shm_unlink(segment.name.c_str());
    ::close(segment.fd);
  }
  sweep_orphaned_segments();
}

void ShmTransport::abort() {
  aborted_ = true;
  for (auto& [peer, conn] : connections_) conn->close();
}

std::string ShmTransport::name_prefix(int peer) const {
  const std::string kind =
      space_ == store::keys::Space::shm ? "" : fmt::format("-{}", store::keys::name(space_));
  return fmt::format("/loom-{:016x}{}-{}-{}-", job_token_, kind, std::min(rank_, peer),
                     std::max(rank_, peer));
}

Connection& ShmTransport::connect(int peer, const base::Deadline& deadline,
                                  const base::Halt& halt) {
  if (auto it = connections_.find(peer); it != connections_.end()) return *it->second;
  const int low = std::min(rank_, peer), high = std::max(rank_, peer);
  const std::string key = store::keys::shm_segment(space_, low, high);
  const std::size_t slot_bytes = link_.slot_bytes();
  const std::size_t slots = static_cast<std::size_t>(link_.slots);
  const std::size_t bytes = segment_bytes(slot_bytes, slots);
  std::string name;
  void* base = nullptr;
  int fd = -1;  // the connection's own, to reserve its slots' pages with
  if (rank_ == low) {
    name = name_prefix(peer) + random_hex();
    base = create_segment(peer, name, bytes);
    // CUDA IPC's control connections keep their data in device memory: their slots are never
    // written, so their pages need no reserving.
    if (space_ != store::keys::Space::cudaipc_control) {
      fd = ::fcntl(created_[peer].fd, F_DUPFD_CLOEXEC, 0);
      if (fd < 0)
        throw PeerError(fmt::format("shm: rank {} with rank {}: duplicate the descriptor of {}: {}",
                                    rank_, peer, name, std::strerror(errno)));
    }
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
    try {
      store_.set(key, name);
    } catch (...) {
      if (fd >= 0) ::close(fd);
      throw;
    }
  } else {
    name = await_segment_name(peer, key, deadline, halt);
    const std::string prefix = name_prefix(peer);
    if (name.size() != prefix.size() + kRandomHexDigits || name.rfind(prefix, 0) != 0 ||
        !is_hex(name.substr(prefix.size())))
      throw PeerError(fmt::format("shm: rank {} with rank {}: the store names segment '{}', not "
                                  "one of this pair",
                                  rank_, peer, name),
                      peer);
    base = open_segment(peer, name, bytes, fd);
    if (space_ == store::keys::Space::cudaipc_control) ::close(fd), fd = -1;
    auto* h = static_cast<SegmentHeader*>(base);
    const std::uint64_t magic = read_once(h->magic);
    const std::uint64_t their_slot_bytes = read_once(h->slot_bytes);
    const std::uint32_t their_slots = read_once(h->slots);
    if (magic != kSegmentMagic || their_slot_bytes != slot_bytes || their_slots != slots) {
      ::munmap(base, bytes);
      ::close(fd);
      throw PeerError(fmt::format("shm: rank {} with rank {}: segment {} has another layout", rank_,
                                  peer, name),
                      peer);
    }
  }
  auto conn = std::make_unique<ShmConnection>(rank_, peer, pids_[static_cast<std::size_t>(peer)],
                                              base, bytes, slot_bytes, slots, rank_ == low ? 0 : 1,
                                              name, fd, placement_span(slots));
  base::log().debug("connected: {}", conn->describe());
  return *(connections_[peer] = std::move(conn));
}

std::size_t ShmTransport::placement_span(std::size_t slots) const {
  // Small messages pass twice the peer core's own cache before a line is rewritten: measured on
  // 2 ranks with 2 cores, where 1 MiB of passing (its L2) gained half of what 2 MiB did. Where
  // ranks share cores, a rank often reads on the core that wrote, and the longer path only
  // spread the messages over more of the cache: 8 ranks on 2 cores ran up to 2x slower with it.
  if (pacing_.oversubscribed || space_ == store::keys::Space::cudaipc_control) return 0;
  return 2 * base::core_cache_bytes() / slots;
}

void* ShmTransport::create_segment(int peer, const std::string& name, std::size_t bytes) {
  auto fail = [&](const std::string& what, int err) {
    return PeerError(fmt::format("shm: rank {} with rank {}: {} {}: {}", rank_, peer, what, name,
                                 std::strerror(err)));
  };
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) throw fail("create", errno);
  auto discard = [&](const std::string& what, int err) {
    ::shm_unlink(name.c_str());
    ::close(fd);
    return fail(what, err);
  };
  if (!lock_shared(fd)) throw discard("lock", errno);
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) throw discard("size", errno);
  // The pages every message touches are reserved now, so that a full /dev/shm is this error
  // rather than SIGBUS at a first touch; each slot's pages when its sender first fills it
  // (ShmConnection), so that a communicator of small messages costs a few pages, not its slots.
  const std::size_t slot_bytes = link_.slot_bytes();
  const std::size_t slots = static_cast<std::size_t>(link_.slots);
  const std::size_t mail = mailboxes_offset(slot_bytes, slots);
  for (const auto& [from, length] :
       {std::pair{std::size_t{0}, 3 * kPage}, std::pair{mail, bytes - mail}})
    if (const int err = reserve_pages(fd, from, length); err != 0)
      throw discard(fmt::format("cannot reserve {} bytes (is /dev/shm large enough?) for", length),
                    err);
  void* base = map_fd(fd, bytes);
  if (!base) throw discard("map", errno);
  created_[peer] = Created{name, fd};
  return base;
}

void* ShmTransport::open_segment(int peer, const std::string& name, std::size_t bytes,
                                 int& fd_out) {
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0)
    throw PeerError(fmt::format("shm: rank {} with rank {}: open {}: {}", rank_, peer, name,
                                std::strerror(errno)),
                    peer);
  struct stat st {};
  std::string wrong;
  if (::fstat(fd, &st) != 0)
    wrong = fmt::format("fstat: {}", std::strerror(errno));
  else if (st.st_uid != ::geteuid())
    wrong = fmt::format("belongs to uid {}, not to this process's uid {}", st.st_uid, ::geteuid());
  else if (static_cast<std::size_t>(st.st_size) != bytes)
    wrong =
        fmt::format("has {} bytes, expected {} (LOOM_BUFFSIZE or LOOM_SLOTS differ between ranks)",
                    st.st_size, bytes);
  void* base = wrong.empty() ? map_fd(fd, bytes) : nullptr;
  const int map_error = errno;
  if (!base) ::close(fd);
  if (!wrong.empty())
    throw PeerError(
        fmt::format("shm: rank {} with rank {}: segment {} {}", rank_, peer, name, wrong), peer);
  ::shm_unlink(name.c_str());
  if (!base)
    throw PeerError(fmt::format("shm: rank {} with rank {}: map {}: {}", rank_, peer, name,
                                std::strerror(map_error)),
                    peer);
  fd_out = fd;
  return base;
}

std::string ShmTransport::await_segment_name(int peer, const std::string& key,
                                             const base::Deadline& deadline,
                                             const base::Halt& halt) {
  const int pid = pids_[static_cast<std::size_t>(peer)];
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    if (store_.check({key}).front())
      return store_.get_string(
          key, std::chrono::milliseconds(std::max(1000, deadline.remaining_ms(1 << 30))));
    if (halt.triggered())
      halt.raise(
          fmt::format("shm: rank {} (waiting for rank {} to create the segment)", rank_, peer));
    if (pid > 0 && !base::process_alive(pid))
      throw PeerError(fmt::format("shm: rank {} with rank {}: the peer's process {} is gone "
                                  "(exited or crashed) before it created the segment",
                                  rank_, peer, pid),
                      peer);
    if (deadline.expired())
      throw TimeoutError(fmt::format(
          "shm: rank {} timed out waiting for rank {} to create the segment (is rank {} in the "
          "same collective?)",
          rank_, peer, peer));
    const auto wait =
        std::min(pause, std::chrono::milliseconds(deadline.remaining_ms(kSetupPollMs)));
    if (connect_wait_)
      connect_wait_(static_cast<int>(wait.count()));
    else
      std::this_thread::sleep_for(wait);
    pause = std::min(pause * 2, std::chrono::milliseconds(kSetupPollMs));
  }
}

}  // namespace loom::transport::shm
