// FileStore: an append-only log of set/remove records in one shared file
// (store/file_store_log.hpp), serialised by flock on a companion lock file, and rewritten as one
// record per key when it has grown past twice that.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <thread>

#include <fmt/format.h>

#include "base/deadline.hpp"
#include "base/logging.hpp"
#include "loom/store.hpp"
#include "store/file_store_log.hpp"
#include "store/store_protocol.hpp"

namespace loom {
namespace {

using store::file_log::Contents;
using store::file_log::Record;

// The log is compacted once it is larger than this and than twice its live records.
constexpr std::size_t kCompactAtLeastBytes = 64 << 10;

std::string errno_text() {
  return std::strerror(errno);
}

// A descriptor closed when it goes out of scope.
class Descriptor {
 public:
  explicit Descriptor(int fd) : fd_(fd) {}
  ~Descriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Opens a file of the store: only this user's regular file, writable by nobody else, is
// accepted (whoever can write it controls the rendezvous), and never through a symbolic link.
int open_checked(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    const int err = errno;
    throw StoreError(fmt::format("file store {}: open: {}{}", path, std::strerror(err),
                                 err == ELOOP ? " (a symbolic link is not accepted)" : ""));
  }
  using FileStatus = struct stat;
  FileStatus st{};
  std::string wrong;
  if (::fstat(fd, &st) != 0)
    wrong = "fstat: " + errno_text();
  else if (!S_ISREG(st.st_mode))
    wrong = "not a regular file";
  else if (st.st_uid != ::geteuid())
    wrong = fmt::format("owned by uid {}, not by this user (uid {})", st.st_uid, ::geteuid());
  else if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
    wrong =
        fmt::format("writable by group or others (mode {:04o}; chmod go-w it)", st.st_mode & 07777);
  if (!wrong.empty()) {
    ::close(fd);
    throw StoreError(fmt::format("file store {}: refused: {}", path, wrong));
  }
  return fd;
}

// Polls the lock rather than blocking on it: a holder that is stopped or hung (an NFS lock
// server) costs an operation its deadline, not forever.
void lock_until(int fd, const std::string& path, const base::Deadline& deadline) {
  auto pause = std::chrono::milliseconds(1);
  const auto started = std::chrono::steady_clock::now();
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR)
      throw StoreError(fmt::format("file store {}: lock: {}", path, errno_text()));
    if (deadline.expired()) {
      const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::steady_clock::now() - started);
      throw TimeoutError(fmt::format(
          "file store {}: another process held the lock for all of {} ms (stopped or hung "
          "while holding it?)",
          path, waited.count()));
    }
    std::this_thread::sleep_for(
        std::min(pause, std::chrono::milliseconds(deadline.remaining_ms(50))));
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

// The log open for one operation, under the lock of `<path>.lock`. The lock has a file of its
// own because compaction replaces the log: a lock on the log itself would be on the old file for
// whoever waited for it meanwhile (and on NFS, on a stale handle).
class LockedFile {
 public:
  LockedFile(const std::string& path, const base::Deadline& deadline)
      : path_(path), lock_(open_checked(path + ".lock")) {
    lock_until(lock_.get(), path + ".lock", deadline);
    fd_ = open_checked(path);
  }
  ~LockedFile() { ::close(fd_); }  // then the lock's descriptor: that releases the lock
  LockedFile(const LockedFile&) = delete;
  LockedFile& operator=(const LockedFile&) = delete;

  // The records; a torn last record is cut off the file here, so that the next append does
  // not follow garbage.
  Contents load() {
    std::vector<std::uint8_t> all;
    std::uint8_t buf[1 << 16];
    for (off_t at = 0;;) {
      const ssize_t n = ::pread(fd_, buf, sizeof(buf), at);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw StoreError(fmt::format("file store {}: read: {}", path_, errno_text()));
      if (n == 0) break;
      all.insert(all.end(), buf, buf + n);
      at += n;
    }
    Contents contents;
    try {
      contents = store::file_log::replay(all.data(), all.size());
    } catch (const StoreError& e) {
      throw StoreError(fmt::format("file store {}: corrupt file: {}", path_, e.what()));
    }
    size_ = contents.valid_bytes;
    if (contents.valid_bytes < all.size()) {
      base::log().warn(
          "file store {}: dropped a last record cut short ({} bytes; its writer "
          "died or ran out of space mid-write)",
          path_, all.size() - contents.valid_bytes);
      truncate_to(contents.valid_bytes);
    }
    return contents;
  }

  // After load(): appends a record, then compacts the log if it has grown too large.
  void append(Record type, const std::string& key, const Bytes& value, const Contents& after) {
    const auto record = store::file_log::encode(type, key, value);
    if (!write_all(fd_, record, size_)) {
      const std::string why = errno_text();
      truncate_to(size_);  // no half record is left behind
      throw StoreError(fmt::format("file store {}: write: {}", path_, why));
    }
    size_ += record.size();
    std::size_t live_bytes = 0;
    for (const auto& [k, v] : after.entries) live_bytes += store::file_log::encoded_size(k, v);
    if (size_ > std::max(kCompactAtLeastBytes, 2 * live_bytes)) compact(after);
  }

 private:
  static bool write_all(int fd, const std::vector<std::uint8_t>& bytes, off_t at) {
    for (std::size_t done = 0; done < bytes.size();) {
      const ssize_t n =
          ::pwrite(fd, bytes.data() + done, bytes.size() - done, at + static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return false;
      done += static_cast<std::size_t>(n);
    }
    return true;
  }

  void truncate_to(std::size_t bytes) {
    if (::ftruncate(fd_, static_cast<off_t>(bytes)) != 0)
      throw StoreError(fmt::format("file store {}: truncate: {}", path_, errno_text()));
  }

  // Writes the live records to a new file and renames it over the log: a process killed
  // mid-way leaves the old log whole. Failing to compact is not an error of the operation.
  void compact(const Contents& contents) {
    static std::atomic<unsigned> counter{0};
    const std::string temp = fmt::format("{}.compact-{}-{}", path_, ::getpid(), ++counter);
    const int out =
        ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    bool ok = out >= 0;
    off_t at = 0;
    for (auto it = contents.entries.begin(); ok && it != contents.entries.end(); ++it) {
      const auto record = store::file_log::encode(Record::set, it->first, it->second);
      ok = write_all(out, record, at);
      at += static_cast<off_t>(record.size());
    }
    const std::string why = errno_text();
    if (out >= 0) ::close(out);
    if (ok && ::rename(temp.c_str(), path_.c_str()) == 0) return;
    if (out >= 0) ::unlink(temp.c_str());
    base::log().warn("file store {}: cannot compact the log ({}); it keeps growing", path_,
                     ok ? errno_text() : why);
  }

  std::string path_;
  Descriptor lock_;
  int fd_ = -1;
  std::size_t size_ = 0;  // bytes of complete records
};

void check_key(const std::string& key) {
  if (key.size() > store::protocol::kMaxKeyBytes)
    throw InvalidArgument(fmt::format("file store: key of {} bytes exceeds {}", key.size(),
                                      store::protocol::kMaxKeyBytes));
}

void check_value(const std::string& key, const Bytes& value) {
  if (value.size() > store::protocol::kMaxMessageBytes)
    throw InvalidArgument(fmt::format("file store: value of '{}' has {} bytes, more than {}", key,
                                      value.size(), store::protocol::kMaxMessageBytes));
}

// Reads the file until `done` says so; the lock, too, is waited for only until the deadline.
void poll_until(const std::string& path, std::chrono::milliseconds timeout, const std::string& key,
                const std::function<bool(const Contents&)>& done) {
  base::Deadline deadline(timeout);
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    {
      LockedFile f(path, deadline);
      if (done(f.load())) return;
    }
    if (deadline.expired())
      throw TimeoutError(fmt::format("file store {}: wait for '{}' timed out", path, key));
    std::this_thread::sleep_for(
        std::min(pause, std::chrono::milliseconds(deadline.remaining_ms(50))));
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

}  // namespace

FileStore::FileStore(std::string path, std::chrono::milliseconds timeout)
    : path_(std::move(path)), timeout_(timeout) {
  LockedFile probe(path_, base::Deadline(timeout_));
  probe.load();
}

std::shared_ptr<Store> FileStore::clone() const {
  return std::make_shared<FileStore>(path_, timeout_);
}
std::shared_ptr<Store> FileStore::clone_bounded(std::chrono::milliseconds request_timeout) const {
  return std::make_shared<FileStore>(path_, request_timeout);
}

void FileStore::set(const std::string& key, const Bytes& value) {
  check_key(key);
  check_value(key, value);
  LockedFile f(path_, base::Deadline(timeout_));
  Contents c = f.load();
  c.entries[key] = value;
  f.append(Record::set, key, value, c);
}

Bytes FileStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  check_key(key);
  Bytes value;
  poll_until(path_, timeout, key, [&](const Contents& c) {
    auto it = c.entries.find(key);
    if (it == c.entries.end()) return false;
    value = it->second;
    return true;
  });
  return value;
}

std::int64_t FileStore::add(const std::string& key, std::int64_t delta) {
  check_key(key);
  LockedFile f(path_, base::Deadline(timeout_));
  Contents c = f.load();
  std::int64_t old = 0, value = 0;
  auto it = c.entries.find(key);
  if (it != c.entries.end()) {
    std::string s(it->second.begin(), it->second.end());
    std::size_t used = 0;
    try {
      old = std::stoll(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != s.size())
      throw StoreError(fmt::format("file store add('{}'): value is not an integer", key));
  }
  if (__builtin_add_overflow(old, delta, &value))
    throw StoreError(
        fmt::format("file store add('{}'): {} + {} overflows a 64-bit integer", key, old, delta));
  if (delta == 0 && it != c.entries.end()) return value;  // a read: nothing to append
  std::string text = std::to_string(value);
  Bytes bytes(text.begin(), text.end());
  c.entries[key] = bytes;
  f.append(Record::set, key, bytes, c);
  return value;
}

Bytes FileStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  check_key(key);
  check_value(key, desired);
  LockedFile f(path_, base::Deadline(timeout_));
  Contents c = f.load();
  auto it = c.entries.find(key);
  bool matches = (it == c.entries.end()) ? expected.empty() : it->second == expected;
  if (matches) {
    c.entries[key] = desired;
    f.append(Record::set, key, desired, c);
    return desired;
  }
  return it == c.entries.end() ? Bytes{} : it->second;
}

bool FileStore::remove(const std::string& key) {
  check_key(key);
  LockedFile f(path_, base::Deadline(timeout_));
  Contents c = f.load();
  if (!c.entries.erase(key)) return false;
  f.append(Record::remove, key, {}, c);
  return true;
}

void FileStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  for (const auto& k : keys) check_key(k);
  poll_until(path_, timeout, keys.empty() ? "" : keys[0], [&](const Contents& c) {
    return std::all_of(keys.begin(), keys.end(),
                       [&](const std::string& k) { return c.entries.count(k) != 0; });
  });
}

std::vector<bool> FileStore::check(const std::vector<std::string>& keys) {
  for (const auto& k : keys) check_key(k);
  LockedFile f(path_, base::Deadline(timeout_));
  Contents c = f.load();
  std::vector<bool> out;
  for (const auto& k : keys) out.push_back(c.entries.count(k) != 0);
  return out;
}

}  // namespace loom
