#include "snapshot_format.hpp"

#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <utility>

#include <fmt/format.h>

namespace loom::ddp::snapshot {
namespace {

constexpr char kMagic[kMagicBytes] = {'L', 'O', 'O', 'M', 'S', 'N', 'A', 'P'};

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
  Reader(const unsigned char* data, std::size_t size, const std::string& source)
      : data_(data), size_(size), source_(source) {}
  template <typename T>
  T get() {
    T v;
    get_bytes(&v, sizeof(T));
    return v;
  }
  void get_bytes(void* out, std::size_t n) {
    if (n > size_ - at_) throw InvalidArgument(fmt::format("{}: truncated", source_));
    if (n > 0) std::memcpy(out, data_ + at_, n);
    at_ += n;
  }
  std::size_t left() const { return size_ - at_; }

 private:
  const unsigned char* data_;
  std::size_t size_, at_ = 0;
  const std::string& source_;
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
  if (h.version >= 4) h.state.fence = r.get<std::uint64_t>();
  h.optimizer_steps = r.get<std::int64_t>();
  h.lr = r.get<double>();
  h.tensors = r.get<std::uint64_t>();
  return h;
}

}  // namespace

Header read_header(const unsigned char* bytes, std::size_t size, const std::string& source) {
  if (size < kMagicBytes || std::memcmp(bytes, kMagic, kMagicBytes) != 0)
    throw InvalidArgument(fmt::format("{}: not a Loom snapshot (or truncated)", source));
  Reader r(bytes + kMagicBytes, size - kMagicBytes, source);
  return read_header(r, source);
}

std::size_t encoded_size(Module& model, Optimizer& optimizer, const std::string& run_id,
                         std::uint32_t version) {
  std::size_t n = kMaxHeaderBytes - kMaxRunId + run_id.size() + 4;
  if (version < 4) n -= 8;  // no fence
  if (version < 3) n -= 8;  // no samples_in_epoch
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
  w.put(state.fence);
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

TrainingState decode(const std::vector<unsigned char>& bytes, const std::string& source,
                     Module& model, Optimizer& optimizer) {
  if (bytes.size() < kMagicBytes + 4 + 4 || std::memcmp(bytes.data(), kMagic, kMagicBytes) != 0)
    throw InvalidArgument(fmt::format("{}: not a Loom snapshot (or truncated)", source));
  std::uint32_t stored_crc;
  std::memcpy(&stored_crc, bytes.data() + bytes.size() - 4, 4);
  if (crc32_of(bytes.data(), bytes.size() - 4) != stored_crc)
    throw InvalidArgument(fmt::format("{}: checksum mismatch (corrupt or truncated)", source));
  Reader r(bytes.data() + kMagicBytes, bytes.size() - kMagicBytes - 4, source);
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
    if (!values[i].empty())
      std::memcpy(tensors[i].tensor->data(), values[i].data(), values[i].size() * sizeof(float));
  optimizer.set_steps(header.optimizer_steps);
  optimizer.set_lr(header.lr);
  return header.state;
}

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

}  // namespace loom::ddp::snapshot
