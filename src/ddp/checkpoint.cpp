#include "loom/ddp/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include <fmt/format.h>

#include "base/logging.hpp"

namespace loom::ddp {
namespace {

namespace fs = std::filesystem;

//   "LOOMSNAP" | u32 version | TrainingState (4 x u64) | i64 optimizer steps | f64 lr |
//   u64 tensor count | per tensor: u64 name length, name, u64 elements, floats |
//   u32 CRC32 of everything before it
constexpr char kMagic[8] = {'L', 'O', 'O', 'M', 'S', 'N', 'A', 'P'};
constexpr std::uint32_t kVersion = 1;

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

std::vector<unsigned char> encode(Module& model, Optimizer& optimizer, const TrainingState& state) {
  Writer w;
  w.put_bytes(kMagic, sizeof(kMagic));
  w.put(kVersion);
  w.put(state.epoch), w.put(state.step_in_epoch), w.put(state.global_step), w.put(state.seed);
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
  if (auto v = r.get<std::uint32_t>(); v != kVersion)
    throw InvalidArgument(fmt::format("{}: version {}, this build reads {}", source, v, kVersion));
  TrainingState state;
  state.epoch = r.get<std::uint64_t>();
  state.step_in_epoch = r.get<std::uint64_t>();
  state.global_step = r.get<std::uint64_t>();
  state.seed = r.get<std::uint64_t>();
  const auto steps = r.get<std::int64_t>();
  const auto lr = r.get<double>();
  const auto tensors = tensors_of(model, optimizer);
  const auto count = r.get<std::uint64_t>();
  if (count != tensors.size())
    throw InvalidArgument(fmt::format("{}: {} tensors, this model and optimizer have {}", source,
                                      count, tensors.size()));
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
  optimizer.set_steps(steps);
  optimizer.set_lr(lr);
  return state;
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

void fsync_path(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// Snapshots in dir, newest (highest step) first.
std::vector<std::pair<std::uint64_t, std::string>> snapshots_in(const std::string& dir) {
  std::vector<std::pair<std::uint64_t, std::string>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    unsigned long long step = 0;
    char tail[8] = {0};
    if (std::sscanf(name.c_str(), "snapshot-%llu.%7s", &step, tail) == 2 &&
        std::string(tail) == "loom")
      found.emplace_back(step, entry.path().string());
  }
  std::sort(found.rbegin(), found.rend());
  return found;
}

// The newest snapshot's bytes that decode for this model; decode() fills model and optimizer.
std::optional<std::vector<unsigned char>> newest_valid(const std::string& dir, Module& model,
                                                       Optimizer& optimizer) {
  for (const auto& [step, path] : snapshots_in(dir)) {
    std::ifstream in(path, std::ios::binary);
    std::vector<unsigned char> bytes(std::istreambuf_iterator<char>(in), {});
    try {
      decode(bytes, path, model, optimizer);
      base::log().info("resuming from {}", path);
      return bytes;
    } catch (const InvalidArgument& e) {
      base::log().warn("skipping snapshot {}; trying an older one", e.what());
    }
  }
  return std::nullopt;
}

}  // namespace

std::string save_snapshot(const std::string& dir, Module& model, Optimizer& optimizer,
                          const TrainingState& state, int keep) {
  fs::create_directories(dir);
  const auto bytes = encode(model, optimizer, state);
  const std::string path = fmt::format("{}/snapshot-{}.loom", dir, state.global_step);
  const std::string temp =
      fmt::format("{}/.snapshot-{}.tmp.{}", dir, state.global_step, ::getpid());
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    throw Error(fmt::format("save_snapshot: creating {}: {}", temp, std::strerror(errno)));
  try {
    write_fully(fd, bytes.data(), bytes.size(), temp);
    if (::fsync(fd) != 0)
      throw Error(fmt::format("save_snapshot: fsync {}: {}", temp, std::strerror(errno)));
  } catch (...) {
    ::close(fd);
    ::unlink(temp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(temp.c_str(), path.c_str()) != 0)
    throw Error(
        fmt::format("save_snapshot: renaming {} to {}: {}", temp, path, std::strerror(errno)));
  fsync_path(dir, O_RDONLY | O_DIRECTORY);  // the rename itself must survive a crash
  auto all = snapshots_in(dir);
  for (std::size_t i = static_cast<std::size_t>(std::max(keep, 1)); i < all.size(); ++i)
    ::unlink(all[i].second.c_str());
  return path;
}

std::optional<TrainingState> resume_from_newest(const std::string& dir, Module& model,
                                                Optimizer& optimizer) {
  auto bytes = newest_valid(dir, model, optimizer);
  if (!bytes) return std::nullopt;
  return decode(*bytes, dir, model, optimizer);
}

std::optional<TrainingState> resume_from_newest(Communicator& comm, const std::string& dir,
                                                Module& model, Optimizer& optimizer) {
  std::vector<unsigned char> bytes;
  if (comm.rank() == 0)
    if (auto found = newest_valid(dir, model, optimizer)) bytes = std::move(*found);
  std::uint64_t size = bytes.size();
  comm.broadcast(&size, 1, DataType::u64, 0);
  if (size == 0) return std::nullopt;
  bytes.resize(size);
  comm.broadcast(bytes.data(), size, DataType::u8, 0);
  return decode(bytes, fmt::format("{} (from rank 0)", dir), model, optimizer);
}

}  // namespace loom::ddp
