// libFuzzer: replaying a FileStore log, whatever the file holds (a torn write, another
// program's bytes). Replay must raise StoreError or account for every byte it kept: the
// complete records lie within the input, and the entries written back as a log replay to the
// same entries at the size it announced.
#include <cstddef>
#include <cstdint>

#include "loom/loom.hpp"
#include "store/file_store_log.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace loom::store::file_log;
  Contents contents;
  try {
    contents = replay(data, size);
  } catch (const loom::StoreError&) {
    return 0;
  }
  if (contents.valid_bytes > size) __builtin_trap();
  Bytes compacted;
  for (const auto& [key, value] : contents.entries) {
    const Bytes record = encode(Record::set, key, value);
    compacted.insert(compacted.end(), record.begin(), record.end());
  }
  if (compacted.size() != contents.live_bytes) __builtin_trap();
  const Contents again = replay(compacted.data(), compacted.size());
  if (again.entries != contents.entries || again.valid_bytes != compacted.size()) __builtin_trap();
  // The kept prefix replays alone to the same entries: nothing after it mattered.
  const Contents prefix = replay(data, contents.valid_bytes);
  if (prefix.entries != contents.entries) __builtin_trap();
  return 0;
}
