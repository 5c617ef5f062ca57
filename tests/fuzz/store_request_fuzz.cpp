// libFuzzer: the store's request parser takes any bytes a client may send. It must raise
// StoreError or return a request within the limits, never crash, read past the input or
// allocate what a length field merely claims.
#include <cstddef>
#include <cstdint>

#include "loom/loom.hpp"
#include "store/store_protocol.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace loom::store::protocol;
  try {
    const Request req = parse_request(data, size);
    std::size_t bytes = req.value.size() + req.expected.size();
    for (const auto& k : req.keys) {
      if (k.size() > kMaxKeyBytes) __builtin_trap();
      bytes += k.size();
    }
    if (bytes > size || req.keys.size() > kMaxKeysPerWait) __builtin_trap();
  } catch (const loom::StoreError&) {
  }
  return 0;
}
