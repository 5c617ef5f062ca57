// libFuzzer: the store client's reading of a reply, whatever a server (or whoever answers in its
// place) sends. It must raise StoreError or decode within the bytes received, never crash or
// read past the input.
#include <cstddef>
#include <cstdint>

#include "loom/loom.hpp"
#include "store/store_protocol.hpp"

namespace {

template <typename Decode>
void try_decode(Decode&& decode) {
  try {
    decode();
  } catch (const loom::StoreError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace loom::store::protocol;
  Reply reply;
  try {
    reply = parse_reply(data, size);
  } catch (const loom::StoreError&) {
    return 0;
  }
  if (reply.status > Status::error || reply.payload.size() + 1 != size) __builtin_trap();
  try_decode([&] { reply_empty(reply); });
  try_decode([&] {
    if (reply_value(reply).size() + 4 != reply.payload.size()) __builtin_trap();
  });
  try_decode([&] { reply_integer(reply); });
  try_decode([&] { reply_flag(reply); });
  try_decode([&] {
    const std::size_t count = size > 1 ? data[1] : 0;
    if (reply_flags(reply, count).size() != count) __builtin_trap();
  });
  try_decode([&] {
    if (reply_error(reply).size() + 4 != reply.payload.size()) __builtin_trap();
  });
  return 0;
}
