// libFuzzer: a line of a tuning table (a file any job of the user reads, and rank 0's entries
// travel to every rank in its topology record). parse must refuse it or return an entry whose
// line() parses to the same entry, never crash.
#include <cstdint>
#include <string>

#include "core/tuning_table.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using loom::core::TuningEntry;
  const std::string line(reinterpret_cast<const char*>(data), size);
  const auto entry = TuningEntry::parse(line);
  if (!entry) return 0;
  if (entry->machine.cores < 1) __builtin_trap();
  const auto again = TuningEntry::parse(entry->line());
  if (!again || !(again->machine == entry->machine) || again->transport != entry->transport ||
      again->shape != entry->shape || again->rules != entry->rules)
    __builtin_trap();
  return 0;
}
