// libFuzzer: a shrink's decision as the store holds it (the first byte picks the communicator's
// size). decode must raise StoreError or return increasing ranks below the size, in the one form
// encode writes, never crash.
#include <cstdint>

#include "core/shrink_decision.hpp"
#include "loom/loom.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const int ranks = 1 + data[0] % 64;
  const loom::Bytes bytes(data + 1, data + size);
  try {
    const auto d = loom::core::decode_shrink_decision(bytes, ranks);
    for (std::size_t i = 0; i < d.members.size(); ++i)
      if (d.members[i] < 0 || d.members[i] >= ranks || (i > 0 && d.members[i] <= d.members[i - 1]))
        __builtin_trap();
    if (loom::core::encode(d) != bytes) __builtin_trap();  // one form only
  } catch (const loom::StoreError&) {
  }
  return 0;
}
