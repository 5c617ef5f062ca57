// libFuzzer: a snapshot's bytes, whatever is in the file. read_header and decode must raise
// InvalidArgument or read within the bytes, never crash; the model is changed only by a snapshot
// that decodes, and one of this version encodes back to the same bytes. Each input is tried as
// it is and with its CRC made right, so that the parse behind the checksum is reached.
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "ddp/snapshot_format.hpp"
#include "loom/ddp/layers.hpp"
#include "loom/ddp/optim.hpp"

namespace {

using namespace loom::ddp;

void try_one(std::vector<unsigned char> bytes) {
  static Sequential model = make_mlp({3, 4, 2}, 1);
  static Sgd sgd(model.parameters(), SgdOptions{0.1, 0.9});
  try {
    const snapshot::Header h = snapshot::read_header(bytes.data(), bytes.size(), "fuzz");
    if (h.run_id.size() > snapshot::kMaxRunId) __builtin_trap();
  } catch (const loom::InvalidArgument&) {
  }
  try {
    const TrainingState st = snapshot::decode(bytes, "fuzz", model, sgd);
    const snapshot::Header h = snapshot::read_header(bytes.data(), bytes.size(), "fuzz");
    if (h.version == snapshot::kVersion && snapshot::encode(model, sgd, st, h.run_id) != bytes)
      __builtin_trap();
  } catch (const loom::InvalidArgument&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<unsigned char> bytes(data, data + size);
  try_one(bytes);
  if (size >= 4) {
    const auto crc =
        static_cast<std::uint32_t>(crc32(crc32(0L, Z_NULL, 0), data, static_cast<uInt>(size - 4)));
    std::memcpy(bytes.data() + size - 4, &crc, 4);
    try_one(std::move(bytes));
  }
  return 0;
}
