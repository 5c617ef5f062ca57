#include "algorithms/collective.hpp"

#include <fmt/format.h>

namespace loom::algorithms {
namespace {
constexpr std::uint64_t kRootMask = kMaxWorldSize - 1;
static_assert((kRootMask & (kRootMask + 1)) == 0 && kRootMask < (1u << 20));
}  // namespace

std::string_view to_string(Kind kind) {
  for (const KindNames& k : kKindNames)
    if (k.kind == kind) return k.name;
  return "?";
}

std::size_t Collective::bytes() const {
  return count * size_of(dtype);
}

// The tag's word: bit 63..33 sequence number (31 bits), bit 32 set for send/recv (numbered per
// peer, in a space of their own), 31..28 kind, 27..24 dtype, 23..20 reduction, 19..0 root, whole
// since ranks are fewer than kMaxWorldSize (the peer's rank for send/recv is left out: the two
// ends see different ones). Never 0: kind >= 1.
transport::Tag Collective::compute_tag() const {
  const bool p2p = is_point_to_point(kind);
  const Kind k = kind == Kind::recv ? Kind::send : kind;  // the two halves of one transfer
  std::uint64_t word = (seq & 0x7fffffffull) << 33 | static_cast<std::uint64_t>(p2p) << 32 |
                       static_cast<std::uint64_t>(k) << 28 |
                       static_cast<std::uint64_t>(dtype) << 24 |
                       static_cast<std::uint64_t>(op) << 20 |
                       (p2p ? 0 : static_cast<std::uint64_t>(root) & kRootMask);
  return transport::Tag{word, count};
}

std::string describe_tag(const transport::Tag& tag) {
  const auto seq = tag.word >> 33;
  const bool p2p = (tag.word >> 32) & 1;
  const auto kind = static_cast<Kind>((tag.word >> 28) & 0xf);
  const auto dtype = static_cast<DataType>((tag.word >> 24) & 0xf);
  const auto op = static_cast<ReduceOp>((tag.word >> 20) & 0xf);
  const auto root = tag.word & kRootMask;
  const bool known_type = static_cast<int>(dtype) <= static_cast<int>(DataType::u64);
  const std::string type = known_type ? std::string(loom::to_string(dtype)) : "?";
  const std::string reduction = static_cast<int>(op) <= static_cast<int>(ReduceOp::avg)
                                    ? std::string(loom::to_string(op))
                                    : "?";
  std::string call;
  switch (kind) {
    case Kind::barrier:
      call = "barrier()";
      break;
    case Kind::all_gather:
    case Kind::all_to_all:
    case Kind::all_gather_v:
      call = fmt::format("{}({} x {})", to_string(kind), type, tag.count);
      break;
    case Kind::all_to_all_v:
      call = fmt::format("all_to_all_v({})", type);
      break;
    case Kind::broadcast:
    case Kind::gather:
    case Kind::scatter:
      call = fmt::format("{}({} x {}, root {})", to_string(kind), type, tag.count, root);
      break;
    case Kind::reduce:
      call = fmt::format("reduce({} x {}, {}, root {})", type, tag.count, reduction, root);
      break;
    case Kind::all_reduce:
    case Kind::reduce_scatter:
    case Kind::reduce_scatter_v:
      call = fmt::format("{}({} x {}, {})", to_string(kind), type, tag.count, reduction);
      break;
    case Kind::send:
    case Kind::recv:
      call = fmt::format("send({} x {})", type, tag.count);
      break;
    default:
      return fmt::format("an unknown call (tag {:#x})", tag.word);
  }
  return fmt::format("{} as {} #{}", call, p2p ? "message" : "collective", seq);
}

std::string Collective::describe() const {
  switch (kind) {
    case Kind::barrier:
      return fmt::format("barrier #{}", seq);
    case Kind::all_gather:
    case Kind::all_to_all:
    case Kind::all_gather_v:
      return fmt::format("{} #{} ({} x {})", to_string(kind), seq, loom::to_string(dtype), count);
    case Kind::all_to_all_v:
      return fmt::format("all_to_all_v #{} ({})", seq, loom::to_string(dtype));
    case Kind::send:
    case Kind::recv:
      return fmt::format("{} #{} ({} x {}, peer {})", to_string(kind), seq, loom::to_string(dtype),
                         count, root);
    case Kind::broadcast:
    case Kind::gather:
    case Kind::scatter:
      return fmt::format("{} #{} ({} x {}, root {})", to_string(kind), seq, loom::to_string(dtype),
                         count, root);
    case Kind::reduce:
      return fmt::format("reduce #{} ({} x {}, {}, root {})", seq, loom::to_string(dtype), count,
                         loom::to_string(op), root);
    default:
      return fmt::format("{} #{} ({} x {}, {})", to_string(kind), seq, loom::to_string(dtype),
                         count, loom::to_string(op));
  }
}

}  // namespace loom::algorithms
