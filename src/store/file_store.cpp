// FileStore: an append-only log of set/remove records in one shared file, serialised by flock.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <thread>

#include <fmt/format.h>

#include "base/deadline.hpp"
#include "base/wire.hpp"
#include "loom/store.hpp"

namespace loom {
namespace {

enum class Record : std::uint8_t { set = 1, remove = 2 };
using Map = std::map<std::string, Bytes>;

// Holds the file open and locked for one operation.
class LockedFile {
 public:
  explicit LockedFile(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd_ < 0)
      throw StoreError(fmt::format("file store {}: open: {}", path, std::strerror(errno)));
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno != EINTR) {
        ::close(fd_);
        throw StoreError(fmt::format("file store {}: lock: {}", path, std::strerror(errno)));
      }
    }
  }
  ~LockedFile() {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
  Map load() {
    std::vector<std::uint8_t> all;
    std::uint8_t buf[1 << 16];
    ::lseek(fd_, 0, SEEK_SET);
    for (ssize_t n; (n = ::read(fd_, buf, sizeof(buf))) != 0;) {
      if (n < 0) {
        if (errno == EINTR) continue;
        throw StoreError(fmt::format("file store {}: read: {}", path_, std::strerror(errno)));
      }
      all.insert(all.end(), buf, buf + n);
    }
    Map map;
    base::WireReader r(all.data(), all.size());
    try {
      while (!r.done()) {
        auto type = static_cast<Record>(r.u8());
        std::string key = r.str();
        Bytes value = r.blob();
        if (type == Record::set)
          map[key] = std::move(value);
        else if (type == Record::remove)
          map.erase(key);
        else
          throw StoreError("unknown record type");
      }
    } catch (const StoreError& e) {
      throw StoreError(fmt::format("file store {}: corrupt file: {}", path_, e.what()));
    }
    return map;
  }
  void append(Record type, const std::string& key, const Bytes& value) {
    base::WireWriter w;
    w.u8(static_cast<std::uint8_t>(type));
    w.str(key);
    w.blob(value);
    ::lseek(fd_, 0, SEEK_END);
    const auto& b = w.buffer();
    std::size_t off = 0;
    while (off < b.size()) {
      ssize_t n = ::write(fd_, b.data() + off, b.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0)
        throw StoreError(fmt::format("file store {}: write: {}", path_, std::strerror(errno)));
      off += static_cast<std::size_t>(n);
    }
  }

 private:
  std::string path_;
  int fd_;
};

}  // namespace

std::shared_ptr<Store> FileStore::clone() const {
  return std::make_shared<FileStore>(path_);
}

FileStore::FileStore(std::string path) : path_(std::move(path)) {
  LockedFile probe(path_);
}

void FileStore::set(const std::string& key, const Bytes& value) {
  LockedFile f(path_);
  f.append(Record::set, key, value);
}

Bytes FileStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  wait({key}, timeout);
  LockedFile f(path_);
  Map m = f.load();
  auto it = m.find(key);
  if (it == m.end()) throw StoreError(fmt::format("file store {}: key '{}' vanished", path_, key));
  return it->second;
}

std::int64_t FileStore::add(const std::string& key, std::int64_t delta) {
  LockedFile f(path_);
  Map m = f.load();
  std::int64_t value = 0;
  if (auto it = m.find(key); it != m.end()) {
    std::string s(it->second.begin(), it->second.end());
    try {
      value = std::stoll(s);
    } catch (const std::exception&) {
      throw StoreError(fmt::format("file store add('{}'): value is not an integer", key));
    }
  }
  value += delta;
  std::string text = std::to_string(value);
  f.append(Record::set, key, Bytes(text.begin(), text.end()));
  return value;
}

Bytes FileStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  LockedFile f(path_);
  Map m = f.load();
  auto it = m.find(key);
  bool matches = (it == m.end()) ? expected.empty() : it->second == expected;
  if (matches) {
    f.append(Record::set, key, desired);
    return desired;
  }
  return it == m.end() ? Bytes{} : it->second;
}

bool FileStore::remove(const std::string& key) {
  LockedFile f(path_);
  Map m = f.load();
  if (!m.count(key)) return false;
  f.append(Record::remove, key, {});
  return true;
}

void FileStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  base::Deadline deadline(timeout);
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    auto present = check(keys);
    if (std::all_of(present.begin(), present.end(), [](bool b) { return b; })) return;
    if (deadline.expired())
      throw TimeoutError(fmt::format("file store {}: wait for '{}' timed out", path_,
                                     keys.empty() ? "" : keys[0]));
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

std::vector<bool> FileStore::check(const std::vector<std::string>& keys) {
  LockedFile f(path_);
  Map m = f.load();
  std::vector<bool> out;
  for (const auto& k : keys) out.push_back(m.count(k) != 0);
  return out;
}

}  // namespace loom
