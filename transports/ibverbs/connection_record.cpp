#include "transports/ibverbs/connection_record.hpp"

#include <cstring>

#include <fmt/format.h>

namespace loom::transport::ibverbs {
namespace {

constexpr std::uint32_t kMagic = 0x4c4f4942;  // "LOIB"
constexpr std::uint32_t kVersion = 1;
constexpr std::size_t kSize = 4 + 4 + 2 + 16 + 1 + 4 + 4 + 4 + 8 + 4 + 8 + 4;

template <typename T>
void put(std::string& out, T value) {
  for (std::size_t i = 0; i < sizeof(T); ++i)
    out.push_back(static_cast<char>((static_cast<std::uint64_t>(value) >> (8 * i)) & 0xff));
}

template <typename T>
T take(std::string_view& in) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i)
    v |= static_cast<std::uint64_t>(static_cast<unsigned char>(in[i])) << (8 * i);
  in.remove_prefix(sizeof(T));
  return static_cast<T>(v);
}

}  // namespace

std::string encode(const ConnectionRecord& r) {
  std::string out;
  out.reserve(kSize);
  put(out, kMagic);
  put(out, kVersion);
  put(out, r.lid);
  for (std::uint8_t b : r.gid) put(out, b);
  put(out, static_cast<std::uint8_t>(r.ethernet));
  put(out, r.qpn);
  put(out, r.psn);
  put(out, r.mtu);
  put(out, r.slots_addr);
  put(out, r.slots_rkey);
  put(out, r.slot_stride);
  put(out, r.slots);
  return out;
}

std::optional<ConnectionRecord> decode(std::string_view in, std::string* why) {
  auto fail = [&](std::string reason) -> std::optional<ConnectionRecord> {
    if (why) *why = std::move(reason);
    return std::nullopt;
  };
  if (in.size() != kSize)
    return fail(fmt::format("a connection record has {} bytes, not {}", in.size(), kSize));
  if (take<std::uint32_t>(in) != kMagic) return fail("not a connection record (bad magic)");
  if (const auto v = take<std::uint32_t>(in); v != kVersion)
    return fail(fmt::format("connection record version {} (this build speaks {})", v, kVersion));
  ConnectionRecord r;
  r.lid = take<std::uint16_t>(in);
  for (auto& b : r.gid) b = take<std::uint8_t>(in);
  const auto ethernet = take<std::uint8_t>(in);
  if (ethernet > 1) return fail("connection record: bad link layer flag");
  r.ethernet = ethernet == 1;
  r.qpn = take<std::uint32_t>(in);
  r.psn = take<std::uint32_t>(in);
  r.mtu = take<std::uint32_t>(in);
  r.slots_addr = take<std::uint64_t>(in);
  r.slots_rkey = take<std::uint32_t>(in);
  r.slot_stride = take<std::uint64_t>(in);
  r.slots = take<std::uint32_t>(in);
  if (r.qpn == 0 || r.qpn > 0xffffff) return fail(fmt::format("bad queue pair number {}", r.qpn));
  if (r.psn > 0xffffff) return fail(fmt::format("bad packet sequence number {}", r.psn));
  if (r.mtu < 1 || r.mtu > 5) return fail(fmt::format("bad path MTU code {}", r.mtu));
  if (r.slots == 0 || r.slot_stride == 0 || r.slots_addr == 0)
    return fail("connection record without slots");
  if (!r.ethernet && r.lid == 0) return fail("InfiniBand record without a LID");
  bool gid_set = false;
  for (auto b : r.gid) gid_set |= b != 0;
  if (r.ethernet && !gid_set) return fail("RoCE record without a GID");
  return r;
}

namespace {
base::Mac record_mac(std::string_view record, std::string_view secret,
                     const RecordBinding& binding) {
  const std::string pair =
      fmt::format("{:016x}:{}->{}", binding.job_token, binding.from, binding.to);
  return base::hmac(secret, {"loom-ib-record", pair, record});
}
}  // namespace

std::string seal(const ConnectionRecord& record, std::string_view secret,
                 const RecordBinding& binding) {
  std::string out = encode(record);
  const base::Mac mac = record_mac(out, secret, binding);
  out.append(reinterpret_cast<const char*>(mac.data()), mac.size());
  return out;
}

std::optional<ConnectionRecord> unseal(std::string_view bytes, std::string_view secret,
                                       const RecordBinding& binding, std::string* why) {
  base::Mac got{};
  if (bytes.size() != kSize + got.size()) {
    if (why)
      *why = fmt::format("a sealed connection record has {} bytes, not {}", bytes.size(),
                         kSize + got.size());
    return std::nullopt;
  }
  const std::string_view record = bytes.substr(0, kSize);
  std::memcpy(got.data(), bytes.data() + kSize, got.size());
  if (!base::macs_equal(got, record_mac(record, secret, binding))) {
    if (why)
      *why = fmt::format(
          "the connection record for rank {} -> rank {} is not sealed with this job's secret "
          "(HMAC mismatch: altered, replayed, or another job's)",
          binding.from, binding.to);
    return std::nullopt;
  }
  return decode(record, why);
}

}  // namespace loom::transport::ibverbs
