// libFuzzer: an abort record, as any process that can write the store may have left it. decode
// must refuse it or return a record that encodes back to an equal one, never crash.
#include <cstdint>

#include "base/abort_record.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using loom::base::AbortRecord;
  const auto record = AbortRecord::decode(loom::Bytes(data, data + size));
  if (!record) return 0;
  const auto again = AbortRecord::decode(record->encode());
  if (!again || again->kind != record->kind || again->reporter != record->reporter ||
      again->failed != record->failed || again->cause != record->cause)
    __builtin_trap();
  return 0;
}
