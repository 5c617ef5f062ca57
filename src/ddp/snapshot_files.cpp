#include "snapshot_files.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <limits>
#include <mutex>
#include <set>
#include <string_view>
#include <thread>

#include <fmt/format.h>

#include "loom/util.hpp"

namespace loom::ddp::snapshot {
namespace {

namespace fs = std::filesystem;
using FileStatus = struct stat;

// A temporary file of another host's writer is left alone for this long: no save takes it, and
// the writer's liveness cannot be checked from here.
constexpr std::time_t kForeignTempAgeS = 3600;
// How long the fence file's lock is waited for: its holders only rename a file or write a number.
constexpr auto kFenceLockWait = std::chrono::seconds(60);

std::string errno_text(int err) {
  return std::strerror(err);
}

const char* type_of(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

// Why the opened file may not be used, or "" where it may.
std::string wrong_with(int fd) {
  FileStatus st{};
  if (::fstat(fd, &st) != 0) return "fstat: " + errno_text(errno);
  if (!S_ISREG(st.st_mode)) return fmt::format("{}, not a regular file", type_of(st.st_mode));
  if (st.st_uid != ::geteuid())
    return fmt::format("owned by uid {}, not by this user (uid {})", st.st_uid, ::geteuid());
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
    return fmt::format("writable by group or others (mode {:04o}; chmod go-w it)",
                       st.st_mode & 07777);
  return "";
}

[[noreturn]] void refuse(const std::string& operation, const std::string& path,
                         const std::string& why) {
  throw Error(fmt::format(
      "{}: {}: refused: {} (only this user's regular files, writable by no one else and not "
      "through a symbolic link, are used as snapshots; see docs/reliability.md)",
      operation, path, why));
}

// open(2) with `flags` plus O_NOFOLLOW|O_NONBLOCK|O_CLOEXEC, then the checks; -1 for a file that
// is not there (ENOENT) where `missing_ok`.
Fd open_with(const std::string& path, int flags, const std::string& operation, bool missing_ok) {
  Fd fd(::open(path.c_str(), flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600));
  if (fd.get() < 0) {
    const int err = errno;
    if (err == ENOENT && missing_ok) return fd;
    refuse(operation, path, err == ELOOP ? "a symbolic link" : "cannot open: " + errno_text(err));
  }
  if (const std::string why = wrong_with(fd.get()); !why.empty()) refuse(operation, path, why);
  return fd;
}

std::optional<std::pair<std::string, std::uint64_t>> parse_run_and_step(std::string_view text) {
  const auto dash = text.rfind('-');
  const std::string_view digits = dash == std::string_view::npos ? text : text.substr(dash + 1);
  std::uint64_t step = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size())
    return std::nullopt;
  return std::pair{std::string(dash == std::string_view::npos ? "" : text.substr(0, dash)), step};
}

// Reads up to n bytes at offset 0; fewer only at the end of the file.
std::vector<unsigned char> read_prefix(int fd, std::size_t n, const std::string& path) {
  std::vector<unsigned char> bytes(n);
  std::size_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd, bytes.data() + got, n - got, static_cast<off_t>(got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw InvalidArgument(fmt::format("{}: cannot read: {}", path, errno_text(errno)));
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
  }
  bytes.resize(got);
  return bytes;
}

bool process_alive(long pid) {
  return pid > 0 && pid <= std::numeric_limits<pid_t>::max() &&
         (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
}

// A temporary file's step part and writer ("<pid>.<host>"), or nullopt for other names.
struct TempName {
  std::string run_id;
  long pid = 0;
  std::string host;
};
std::optional<TempName> parse_temp(const std::string& name) {
  constexpr std::string_view kPrefix = ".snapshot-", kTmp = ".tmp.";
  if (!name.starts_with(kPrefix)) return std::nullopt;
  const auto tmp = name.find(kTmp, kPrefix.size());
  if (tmp == std::string::npos) return std::nullopt;
  const auto parsed =
      parse_run_and_step(std::string_view(name).substr(kPrefix.size(), tmp - kPrefix.size()));
  const std::string_view writer = std::string_view(name).substr(tmp + kTmp.size());
  const auto dot = writer.find('.');
  if (!parsed || dot == std::string_view::npos) return std::nullopt;
  long pid = 0;
  auto [end, ec] = std::from_chars(writer.data(), writer.data() + dot, pid);
  if (ec != std::errc() || end != writer.data() + dot) return std::nullopt;
  return TempName{parsed->first, pid, std::string(writer.substr(dot + 1))};
}

}  // namespace

Fd::~Fd() {
  if (fd_ >= 0) ::close(fd_);
}

int Fd::close() {
  return ::close(std::exchange(fd_, -1));
}

Fd open_checked(const std::string& path, const std::string& operation) {
  return open_with(path, O_RDONLY, operation, false);
}

std::string run_and_step(const std::string& run_id, std::uint64_t step) {
  return run_id.empty() ? fmt::format("{}", step) : fmt::format("{}-{}", run_id, step);
}

std::vector<std::pair<std::uint64_t, std::string>> snapshots_of(const std::string& dir,
                                                                const std::string& run_id) {
  constexpr std::string_view kPrefix = "snapshot-", kSuffix = ".loom";
  std::vector<std::pair<std::uint64_t, std::string>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() <= kPrefix.size() + kSuffix.size() || !name.starts_with(kPrefix) ||
        !name.ends_with(kSuffix))
      continue;
    const auto parsed = parse_run_and_step(std::string_view(name).substr(
        kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size()));
    if (parsed && parsed->first == run_id)
      found.emplace_back(parsed->second, entry.path().string());
  }
  std::sort(found.rbegin(), found.rend());
  return found;
}

Header header_of(int fd, const std::string& path) {
  const auto bytes = read_prefix(fd, kMaxHeaderBytes, path);
  return read_header(bytes.data(), bytes.size(), path);
}

std::vector<unsigned char> read_candidate(const std::string& path, const std::string& run_id,
                                          Module& model, Optimizer& optimizer,
                                          const std::string& operation) {
  Fd fd = open_with(path, O_RDONLY, operation, true);
  if (fd.get() < 0)  // removed since it was listed
    throw InvalidArgument(fmt::format("{}: removed meanwhile", path));
  const Header header = header_of(fd.get(), path);
  if (header.run_id != run_id)
    throw InvalidArgument(
        fmt::format("{}: written by run '{}', this is run '{}'", path, header.run_id, run_id));
  FileStatus st{};
  if (::fstat(fd.get(), &st) != 0)
    throw InvalidArgument(fmt::format("{}: cannot stat: {}", path, errno_text(errno)));
  const std::size_t expected = encoded_size(model, optimizer, run_id, header.version);
  if (static_cast<std::size_t>(st.st_size) != expected)
    throw InvalidArgument(fmt::format("{}: {} bytes, where a snapshot of this model takes {}", path,
                                      st.st_size, expected));
  auto bytes = read_prefix(fd.get(), expected, path);
  if (bytes.size() != expected) throw InvalidArgument(fmt::format("{}: truncated", path));
  return bytes;
}

Listed list_headers(const std::string& dir, const std::string& run_id,
                    const std::string& operation) {
  Listed listed;
  for (const auto& [step, path] : snapshots_of(dir, run_id)) {
    Fd fd = open_with(path, O_RDONLY, operation, true);
    if (fd.get() < 0) continue;  // removed since it was listed
    try {
      const Header header = header_of(fd.get(), path);
      if (header.run_id != run_id) continue;
      if (!listed.newest_step) listed.newest_step = step;
      listed.highest_fence = std::max(listed.highest_fence, header.state.fence);
    } catch (const InvalidArgument&) {
      // Not a snapshot this build reads: resume skips it with a warning.
    }
  }
  return listed;
}

void warn_if_shared(const std::string& dir) {
  static std::mutex mu;
  static std::set<std::string> warned;
  FileStatus st{};
  if (::stat(dir.c_str(), &st) != 0 || (st.st_mode & (S_IWGRP | S_IWOTH)) == 0 ||
      (st.st_mode & S_ISVTX) != 0)
    return;
  std::lock_guard lock(mu);
  if (!warned.insert(dir).second) return;
  loom::log(LogLevel::warn,
            fmt::format("snapshots: folder {} is writable by group or others (mode {:04o}) "
                        "without the sticky bit: they can remove or rename its snapshots "
                        "(chmod go-w or +t it)",
                        dir, st.st_mode & 07777));
}

void remove_stale_temps(const std::string& dir, const std::string& run_id,
                        const std::string& host) {
  std::error_code ec;
  const std::time_t now = std::time(nullptr);
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const auto temp = parse_temp(name);
    FileStatus st{};
    if (!temp || ::lstat(entry.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode) ||
        st.st_uid != ::geteuid())
      continue;
    bool stale;
    if (temp->host != host)
      stale = now - st.st_mtime > kForeignTempAgeS;
    else if (temp->run_id == run_id)  // a run has one writer: this process, or one that is gone
      stale = temp->pid == ::getpid() || !process_alive(temp->pid);
    else
      stale = !process_alive(temp->pid);
    if (stale && ::unlink(entry.path().c_str()) == 0)
      loom::log(LogLevel::info,
                fmt::format("save_snapshot: removed {}, left by a writer that is gone", name));
  }
}

void write_new_file(const std::string& temp, const std::vector<unsigned char>& bytes) {
  Fd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (fd.get() < 0)
    throw Error(fmt::format("save_snapshot: creating {}: {}", temp, errno_text(errno)));
  try {
    const unsigned char* p = bytes.data();
    std::size_t n = bytes.size();
    while (n > 0) {
      const ssize_t w = ::write(fd.get(), p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0)
        throw Error(fmt::format("save_snapshot: writing {}: {}", temp, errno_text(errno)));
      p += w, n -= static_cast<std::size_t>(w);
    }
    if (::fsync(fd.get()) != 0)
      throw Error(fmt::format("save_snapshot: fsync {}: {}", temp, errno_text(errno)));
    if (fd.close() != 0)
      throw Error(fmt::format("save_snapshot: closing {}: {}", temp, errno_text(errno)));
  } catch (...) {
    ::unlink(temp.c_str());
    throw;
  }
}

void fsync_folder(const std::string& dir) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0)
    throw Error(fmt::format("save_snapshot: opening folder {}: {}", dir, errno_text(errno)));
  // EINVAL: the file system has no such sync.
  if (::fsync(fd.get()) != 0 && errno != EINVAL)
    throw Error(fmt::format("save_snapshot: fsync of folder {}: {}", dir, errno_text(errno)));
}

std::string host_name() {
  char host[256] = {0};
  if (::gethostname(host, sizeof(host) - 1) != 0) return "unknown";
  return host;
}

FenceFile::FenceFile(const std::string& dir, const std::string& run_id, bool create,
                     const std::string& operation)
    : path_(run_id.empty() ? fmt::format("{}/.snapshot.fence", dir)
                           : fmt::format("{}/.snapshot-{}.fence", dir, run_id)),
      operation_(operation),
      fd_(open_with(path_, O_RDWR | (create ? O_CREAT : 0), operation, !create)) {
  if (fd_.get() < 0) return;
  // Polled, not blocking: a holder that is stopped costs this its deadline, not forever.
  const auto deadline = std::chrono::steady_clock::now() + kFenceLockWait;
  auto pause = std::chrono::milliseconds(1);
  while (::flock(fd_.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR)
      throw Error(fmt::format("{}: {}: lock: {}", operation, path_, errno_text(errno)));
    if (std::chrono::steady_clock::now() >= deadline)
      throw TimeoutError(fmt::format(
          "{}: {}: another process held the lock for all of {} s (stopped while saving?)",
          operation, path_, kFenceLockWait.count()));
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

std::uint64_t FenceFile::read() const {
  if (!exists()) return 0;
  const auto bytes = read_prefix(fd_.get(), 64, path_);
  std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  if (text.empty()) return 0;
  std::uint64_t fence = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), fence);
  if (ec != std::errc() || end != text.data() + text.size() || bytes.size() == 64)
    throw Error(
        fmt::format("{}: {}: not a fence file (one decimal number expected)", operation_, path_));
  return fence;
}

void FenceFile::write(std::uint64_t fence) {
  const std::string text = fmt::format("{:020}\n", fence);  // always as long: no torn mix
  const ssize_t w = ::pwrite(fd_.get(), text.data(), text.size(), 0);
  if (w != static_cast<ssize_t>(text.size()) ||
      ::ftruncate(fd_.get(), static_cast<off_t>(text.size())) != 0 || ::fsync(fd_.get()) != 0)
    throw Error(fmt::format("{}: {}: writing the fence: {}", operation_, path_,
                            w < 0 ? errno_text(errno) : "short write"));
}

}  // namespace loom::ddp::snapshot
