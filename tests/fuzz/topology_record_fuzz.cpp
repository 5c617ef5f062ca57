// libFuzzer: a rank's topology record, whatever the store holds. Reading it must raise
// StoreError or add exactly one rank's fields, never crash (the machine rates, settings and tuning
// lines in it included).
#include <cstdint>
#include <string>

#include "core/topology.hpp"
#include "loom/loom.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const int rank = data[0] & 1;  // rank 0's record may carry the tuning table's lines
  const std::string record(reinterpret_cast<const char*>(data + 1), size - 1);
  loom::core::Topology t;
  try {
    loom::core::add_topology_record(t, rank, record, "pid:[4026531836]");
  } catch (const loom::StoreError&) {
    return 0;
  }
  if (t.pid_of_rank.size() != 1 || t.host_of_rank.size() != 1 || t.cores_of_rank.size() != 1 ||
      t.rates_of_rank.size() != 1 || t.settings_of_rank.size() != 1 || t.cores_of_rank[0] < 1 ||
      t.pid_of_rank[0] < 0)
    __builtin_trap();
  return 0;
}
