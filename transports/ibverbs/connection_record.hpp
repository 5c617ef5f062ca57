// What two ranks exchange through the store to connect their RC queue pairs: the addressing of
// the port (LID for InfiniBand, GID for RoCE), the queue pair's number and first packet sequence
// number, the path MTU, and where the receiver's slots are (address, rkey, geometry) so that the
// sender can RDMA-write into them.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/auth.hpp"

namespace loom::transport::ibverbs {

struct ConnectionRecord {
  std::uint16_t lid = 0;
  std::array<std::uint8_t, 16> gid{};  // all zero: no GID (InfiniBand without routing)
  bool ethernet = false;               // RoCE: address by GID
  std::uint32_t qpn = 0;
  std::uint32_t psn = 0;  // 24 bits
  std::uint32_t mtu = 0;  // enum ibv_mtu
  std::uint64_t slots_addr = 0;
  std::uint32_t slots_rkey = 0;
  std::uint64_t slot_stride = 0;  // bytes from one slot to the next (header + payload)
  std::uint32_t slots = 0;
  bool operator==(const ConnectionRecord&) const = default;
};

// A fixed little-endian layout behind a magic and a version, so a record from another build or
// a corrupted store value is refused rather than misread.
std::string encode(const ConnectionRecord& record);
// nullopt, with the reason in `why`, unless `bytes` is a whole, valid record.
std::optional<ConnectionRecord> decode(std::string_view bytes, std::string* why);

// Whom a record in the store is for: a sealed record is good for one job and one direction of
// one pair only.
struct RecordBinding {
  std::uint64_t job_token;
  int from;
  int to;
};
// The record as published: encode(record), then an HMAC-SHA256 under the job secret over it and
// the binding. The record says where the sender may RDMA-write: a store writer without the
// secret must not be able to point a rank at other memory or another queue pair.
std::string seal(const ConnectionRecord& record, std::string_view secret,
                 const RecordBinding& binding);
// The record, when `bytes` was sealed under `secret` for `binding`; else nullopt with the
// reason in `why`. The MAC is checked before any field is read.
std::optional<ConnectionRecord> unseal(std::string_view bytes, std::string_view secret,
                                       const RecordBinding& binding, std::string* why);

}  // namespace loom::transport::ibverbs
