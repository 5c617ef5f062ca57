#include "loom/ddp/checkpoint.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "loom/util.hpp"

namespace loom::ddp {
namespace {

namespace fs = std::filesystem;

//   "LOOMSNAP" | u32 version | u32 run id length, run id | TrainingState (5 x u64; 4 in
//   version 2, which had no samples_in_epoch) |
//   i64 optimizer steps | f64 lr | u64 tensor count |
//   per tensor: u64 name length, name, u64 elements, floats | u32 CRC32 of everything before it
constexpr char kMagic[8] = {'L', 'O', 'O', 'M', 'S', 'N', 'A', 'P'};
constexpr std::uint32_t kVersion = 3;
constexpr std::uint32_t kOldestVersion = 2;  // still read
constexpr std::size_t kMaxRunId = 64;
// Everything up to the tensors, with the longest run id.
constexpr std::size_t kMaxHeaderBytes = sizeof(kMagic) + 4 + 4 + kMaxRunId + 5 * 8 + 8 + 8 + 8;

class Writer {
 public:
  template <typename T>
  void put(const T& v) {
    const auto* p = reinterpret_cast<const unsigned char*>(&v);
    bytes_.insert(bytes_.end(), p, p + sizeof(T));
  }
  void put_bytes(const void* p, std::size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    bytes_.insert(bytes_.end(), b, b + n);
  }
  std::vector<unsigned char>& bytes() { return bytes_; }

 private:
  std::vector<unsigned char> bytes_;
};

class Reader {
 public:
  Reader(const unsigned char* data, std::size_t size, std::string source)
      : data_(data), size_(size), source_(std::move(source)) {}
  template <typename T>
  T get() {
    T v;
    get_bytes(&v, sizeof(T));
    return v;
  }
  void get_bytes(void* out, std::size_t n) {
    if (n > size_ - at_) throw InvalidArgument(fmt::format("{}: truncated", source_));
    std::memcpy(out, data_ + at_, n);
    at_ += n;
  }
  std::size_t left() const { return size_ - at_; }

 private:
  const unsigned char* data_;
  std::size_t size_, at_ = 0;
  std::string source_;
};

struct Named {
  std::string name;
  Tensor* tensor;
};

std::vector<Named> tensors_of(Module& model, Optimizer& optimizer) {
  std::vector<Named> all;
  for (Parameter* p : model.parameters()) all.push_back({p->name, &p->value});
  std::size_t k = 0;
  for (Tensor* t : optimizer.state()) all.push_back({fmt::format("optimizer.{}", k++), t});
  return all;
}

std::uint32_t crc32_of(const unsigned char* data, std::size_t n) {
  uLong crc = crc32(0L, Z_NULL, 0);
  while (n > 0) {  // zlib takes 32-bit lengths
    const uInt chunk = static_cast<uInt>(std::min<std::size_t>(n, 1u << 30));
    crc = crc32(crc, data, chunk);
    data += chunk, n -= chunk;
  }
  return static_cast<std::uint32_t>(crc);
}

// What precedes the tensors: enough to tell whose snapshot a file is and how big it must be.
struct Header {
  std::uint32_t version = kVersion;
  std::string run_id;
  TrainingState state;
  std::int64_t optimizer_steps = 0;
  double lr = 0;
  std::uint64_t tensors = 0;
};

Header read_header(Reader& r, const std::string& source) {
  Header h;
  h.version = r.get<std::uint32_t>();
  if (h.version < kOldestVersion || h.version > kVersion)
    throw InvalidArgument(fmt::format("{}: version {}, this build reads {} to {}", source,
                                      h.version, kOldestVersion, kVersion));
  const auto run_length = r.get<std::uint32_t>();
  if (run_length > kMaxRunId)
    throw InvalidArgument(fmt::format("{}: run id of {} bytes", source, run_length));
  h.run_id.resize(run_length);
  r.get_bytes(h.run_id.data(), run_length);
  h.state.epoch = r.get<std::uint64_t>();
  h.state.step_in_epoch = r.get<std::uint64_t>();
  h.state.global_step = r.get<std::uint64_t>();
  h.state.seed = r.get<std::uint64_t>();
  if (h.version >= 3) h.state.samples_in_epoch = r.get<std::uint64_t>();
  h.optimizer_steps = r.get<std::int64_t>();
  h.lr = r.get<double>();
  h.tensors = r.get<std::uint64_t>();
  return h;
}

// The size of a snapshot of this model and optimizer written by run `run_id` in `version`.
std::size_t encoded_size(Module& model, Optimizer& optimizer, const std::string& run_id,
                         std::uint32_t version = kVersion) {
  std::size_t n = kMaxHeaderBytes - kMaxRunId + run_id.size() + 4 - (version < 3 ? 8 : 0);
  for (const Named& t : tensors_of(model, optimizer))
    n += 8 + t.name.size() + 8 + t.tensor->numel() * sizeof(float);
  return n;
}

std::vector<unsigned char> encode(Module& model, Optimizer& optimizer, const TrainingState& state,
                                  const std::string& run_id) {
  Writer w;
  w.put_bytes(kMagic, sizeof(kMagic));
  w.put(kVersion);
  w.put(static_cast<std::uint32_t>(run_id.size()));
  w.put_bytes(run_id.data(), run_id.size());
  w.put(state.epoch), w.put(state.step_in_epoch), w.put(state.global_step), w.put(state.seed);
  w.put(state.samples_in_epoch);
  w.put(static_cast<std::int64_t>(optimizer.steps()));
  w.put(optimizer.lr());
  const auto tensors = tensors_of(model, optimizer);
  w.put(static_cast<std::uint64_t>(tensors.size()));
  for (const Named& t : tensors) {
    w.put(static_cast<std::uint64_t>(t.name.size()));
    w.put_bytes(t.name.data(), t.name.size());
    w.put(static_cast<std::uint64_t>(t.tensor->numel()));
    w.put_bytes(t.tensor->data(), t.tensor->numel() * sizeof(float));
  }
  w.put(crc32_of(w.bytes().data(), w.bytes().size()));
  return std::move(w.bytes());
}

// Checks everything before touching the model, so that a bad snapshot changes nothing.
TrainingState decode(const std::vector<unsigned char>& bytes, const std::string& source,
                     Module& model, Optimizer& optimizer) {
  if (bytes.size() < sizeof(kMagic) + 4 + 4 ||
      std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0)
    throw InvalidArgument(fmt::format("{}: not a Loom snapshot (or truncated)", source));
  std::uint32_t stored_crc;
  std::memcpy(&stored_crc, bytes.data() + bytes.size() - 4, 4);
  if (crc32_of(bytes.data(), bytes.size() - 4) != stored_crc)
    throw InvalidArgument(fmt::format("{}: checksum mismatch (corrupt or truncated)", source));
  Reader r(bytes.data() + sizeof(kMagic), bytes.size() - sizeof(kMagic) - 4, source);
  const Header header = read_header(r, source);
  const auto tensors = tensors_of(model, optimizer);
  if (header.tensors != tensors.size())
    throw InvalidArgument(fmt::format("{}: {} tensors, this model and optimizer have {}", source,
                                      header.tensors, tensors.size()));
  std::vector<std::vector<float>> values;
  for (const Named& t : tensors) {
    const auto name_length = r.get<std::uint64_t>();
    if (name_length > r.left()) throw InvalidArgument(fmt::format("{}: truncated", source));
    std::string name(name_length, '\0');
    r.get_bytes(name.data(), name.size());
    const auto elements = r.get<std::uint64_t>();
    if (name != t.name || elements != t.tensor->numel())
      throw InvalidArgument(fmt::format("{}: holds {} ({} values) where this model has {} ({})",
                                        source, name, elements, t.name, t.tensor->numel()));
    values.emplace_back(elements);
    r.get_bytes(values.back().data(), elements * sizeof(float));
  }
  if (r.left() != 0) throw InvalidArgument(fmt::format("{}: trailing bytes", source));
  for (std::size_t i = 0; i < tensors.size(); ++i)
    std::memcpy(tensors[i].tensor->data(), values[i].data(), values[i].size() * sizeof(float));
  optimizer.set_steps(header.optimizer_steps);
  optimizer.set_lr(header.lr);
  return header.state;
}

// The run id as it appears in file names: letters, digits, '_' and '-' (no '.', which ends it).
void check_run_id(const std::string& run_id) {
  const bool valid =
      run_id.size() <= kMaxRunId && std::all_of(run_id.begin(), run_id.end(), [](unsigned char c) {
        return std::isalnum(c) || c == '_' || c == '-';
      });
  if (!valid)
    throw InvalidArgument(fmt::format(
        "snapshots: run id '{}' must be at most {} letters, digits, '_' or '-' (LOOM_RUN_ID)",
        run_id, kMaxRunId));
}

// "<run>-<step>", or "<step>" for the unnamed run.
std::string run_and_step(const std::string& run_id, std::uint64_t step) {
  return run_id.empty() ? fmt::format("{}", step) : fmt::format("{}-{}", run_id, step);
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

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  // Closes now, so that the caller sees the error (NFS reports write errors here).
  int close() { return ::close(std::exchange(fd_, -1)); }

 private:
  int fd_;
};

// Reads up to n bytes at offset 0; fewer only at the end of the file.
std::vector<unsigned char> read_prefix(int fd, std::size_t n, const std::string& path) {
  std::vector<unsigned char> bytes(n);
  std::size_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd, bytes.data() + got, n - got, static_cast<off_t>(got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0)
      throw InvalidArgument(fmt::format("{}: cannot read: {}", path, std::strerror(errno)));
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
  }
  bytes.resize(got);
  return bytes;
}

Header header_of(int fd, const std::string& path) {
  const auto bytes = read_prefix(fd, kMaxHeaderBytes, path);
  if (bytes.size() < sizeof(kMagic) || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0)
    throw InvalidArgument(fmt::format("{}: not a Loom snapshot (or truncated)", path));
  Reader r(bytes.data() + sizeof(kMagic), bytes.size() - sizeof(kMagic), path);
  return read_header(r, path);
}

bool written_by(const std::string& path, const std::string& run_id) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return false;
  try {
    return header_of(fd.get(), path).run_id == run_id;
  } catch (const InvalidArgument&) {
    return false;
  }
}

// A file's bytes, once its header shows it is this run's and its size fits this model.
std::vector<unsigned char> read_candidate(const std::string& path, const std::string& run_id,
                                          Module& model, Optimizer& optimizer) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0)
    throw InvalidArgument(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  const Header header = header_of(fd.get(), path);
  if (header.run_id != run_id)
    throw InvalidArgument(
        fmt::format("{}: written by run '{}', this is run '{}'", path, header.run_id, run_id));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    throw InvalidArgument(fmt::format("{}: cannot stat: {}", path, std::strerror(errno)));
  const std::size_t expected = encoded_size(model, optimizer, run_id, header.version);
  if (static_cast<std::size_t>(st.st_size) != expected)
    throw InvalidArgument(fmt::format("{}: {} bytes, where a snapshot of this model takes {}", path,
                                      st.st_size, expected));
  auto bytes = read_prefix(fd.get(), expected, path);
  if (bytes.size() != expected) throw InvalidArgument(fmt::format("{}: truncated", path));
  return bytes;
}

// Run `run_id`'s snapshots in dir by their names, newest (highest step) first.
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

std::string host_name() {
  char host[256] = {0};
  if (::gethostname(host, sizeof(host) - 1) != 0) return "unknown";
  return host;
}

bool process_alive(long pid) {
  return pid > 0 && pid <= std::numeric_limits<pid_t>::max() &&
         (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
}

// Temporary files are ".snapshot-<run>-<step>.tmp.<pid>.<host>". A run has one writer, so a temp
// file of this run is left by a dead one; another run's is stale once its writer on this host
// is gone (a writer on another host cannot be checked, so its file stays).
void remove_stale_temps(const std::string& dir, const std::string& run_id,
                        const std::string& host) {
  constexpr std::string_view kPrefix = ".snapshot-", kTmp = ".tmp.";
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(kPrefix)) continue;
    const auto tmp = name.find(kTmp, kPrefix.size());
    if (tmp == std::string::npos) continue;
    const auto parsed =
        parse_run_and_step(std::string_view(name).substr(kPrefix.size(), tmp - kPrefix.size()));
    const std::string_view writer = std::string_view(name).substr(tmp + kTmp.size());
    const auto dot = writer.find('.');
    if (!parsed || dot == std::string_view::npos) continue;
    long pid = 0;
    auto [end, pid_ec] = std::from_chars(writer.data(), writer.data() + dot, pid);
    if (pid_ec != std::errc() || end != writer.data() + dot) continue;
    const bool on_this_host = writer.substr(dot + 1) == host;
    const bool alive = on_this_host && process_alive(pid);
    const bool stale =
        parsed->first == run_id ? !alive || pid == ::getpid() : on_this_host && !alive;
    if (stale && ::unlink(entry.path().c_str()) == 0)
      loom::log(LogLevel::info,
                fmt::format("save_snapshot: removed {}, left by a writer that is gone", name));
  }
}

void write_fully(int fd, const unsigned char* p, std::size_t n, const std::string& path) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      throw Error(fmt::format("save_snapshot: writing {}: {}", path, std::strerror(errno)));
    p += w, n -= static_cast<std::size_t>(w);
  }
}

// Makes the folder's entries (the rename) durable. EINVAL: the file system has no such sync.
void fsync_folder(const std::string& dir) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0)
    throw Error(fmt::format("save_snapshot: opening folder {}: {}", dir, std::strerror(errno)));
  if (::fsync(fd.get()) != 0 && errno != EINVAL)
    throw Error(fmt::format("save_snapshot: fsync of folder {}: {}", dir, std::strerror(errno)));
}

// The newest snapshot's bytes that decode for this model; decode() fills model and optimizer.
std::optional<std::vector<unsigned char>> newest_valid(const std::string& dir,
                                                       const std::string& run_id, Module& model,
                                                       Optimizer& optimizer) {
  check_run_id(run_id);
  for (const auto& [step, path] : snapshots_of(dir, run_id)) {
    try {
      auto bytes = read_candidate(path, run_id, model, optimizer);
      decode(bytes, path, model, optimizer);
      loom::log(LogLevel::info, fmt::format("resuming from {}", path));
      return bytes;
    } catch (const InvalidArgument& e) {
      loom::log(LogLevel::warn, fmt::format("skipping snapshot {}; trying an older one", e.what()));
    }
  }
  return std::nullopt;
}

}  // namespace

std::string default_run_id() {
  if (const char* id = std::getenv("LOOM_RUN_ID"); id && *id) return id;
  // loomrun's and torchrun's run id (--rdzv-id); "none" is their default, no name.
  if (const char* id = std::getenv("TORCHELASTIC_RUN_ID");
      id && *id && std::string_view(id) != "none")
    return id;
  if (const char* job = std::getenv("SLURM_JOB_ID"); job && *job)
    return fmt::format("slurm-{}", job);
  return "";
}

std::string save_snapshot(const std::string& dir, Module& model, Optimizer& optimizer,
                          const TrainingState& state, int keep, const std::string& run_id) {
  check_run_id(run_id);
  fs::create_directories(dir);
  const std::string host = host_name();
  remove_stale_temps(dir, run_id, host);
  const auto bytes = encode(model, optimizer, state, run_id);
  const std::string name = run_and_step(run_id, state.global_step);
  const std::string path = fmt::format("{}/snapshot-{}.loom", dir, name);
  const std::string temp = fmt::format("{}/.snapshot-{}.tmp.{}.{}", dir, name, ::getpid(), host);
  {
    Fd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (fd.get() < 0)
      throw Error(fmt::format("save_snapshot: creating {}: {}", temp, std::strerror(errno)));
    try {
      write_fully(fd.get(), bytes.data(), bytes.size(), temp);
      if (::fsync(fd.get()) != 0)
        throw Error(fmt::format("save_snapshot: fsync {}: {}", temp, std::strerror(errno)));
      if (fd.close() != 0)
        throw Error(fmt::format("save_snapshot: closing {}: {}", temp, std::strerror(errno)));
    } catch (...) {
      ::unlink(temp.c_str());
      throw;
    }
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temp.c_str());
    throw Error(
        fmt::format("save_snapshot: renaming {} to {}: {}", temp, path, std::strerror(error)));
  }
  fsync_folder(dir);  // the rename itself must survive a crash
  // Older snapshots of this run beyond `keep`; higher steps (a file this run could not resume
  // from) and other runs' files are not this save's to remove.
  int kept = 1;
  for (const auto& [step, older] : snapshots_of(dir, run_id)) {
    if (step >= state.global_step || !written_by(older, run_id)) continue;
    if (kept < std::max(keep, 1))
      ++kept;
    else
      ::unlink(older.c_str());
  }
  return path;
}

std::optional<TrainingState> resume_from_newest(const std::string& dir, Module& model,
                                                Optimizer& optimizer, const std::string& run_id) {
  auto bytes = newest_valid(dir, run_id, model, optimizer);
  if (!bytes) return std::nullopt;
  return decode(*bytes, dir, model, optimizer);
}

namespace {

// Rank 0's bytes (its size first), on every rank.
std::vector<unsigned char> from_rank0(Communicator& comm, std::vector<unsigned char> bytes) {
  std::uint64_t size = bytes.size();
  comm.broadcast(&size, 1, DataType::u64, 0);
  bytes.resize(size);
  if (size > 0) comm.broadcast(bytes.data(), size, DataType::u8, 0);
  return bytes;
}

}  // namespace

std::optional<TrainingState> resume_from_newest(Communicator& comm, const std::string& dir,
                                                Module& model, Optimizer& optimizer,
                                                const std::string& run_id) {
  check_run_id(run_id);  // on every rank, so that all refuse a bad one alike
  std::vector<unsigned char> bytes;
  if (comm.rank() == 0)
    if (auto found = newest_valid(dir, run_id, model, optimizer)) bytes = std::move(*found);
  bytes = from_rank0(comm, std::move(bytes));
  if (bytes.empty()) return std::nullopt;
  return decode(bytes, fmt::format("{} (from rank 0)", dir), model, optimizer);
}

TrainingState adopt_rank0_state(Communicator& comm, Module& model, Optimizer& optimizer,
                                const TrainingState& state) {
  const auto bytes = from_rank0(
      comm, comm.rank() == 0 ? encode(model, optimizer, state, "") : std::vector<unsigned char>{});
  if (comm.rank() == 0) return state;
  return decode(bytes, "the training state of rank 0", model, optimizer);
}

}  // namespace loom::ddp
