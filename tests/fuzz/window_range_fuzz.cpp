// libFuzzer: the range a peer's hello names in a shared window (the direct path), and how much of
// it the call touches. map must raise PeerError or return memory wholly inside the peer's window,
// never an address outside it.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "base/shared_file.hpp"
#include "core/host_windows.hpp"
#include "loom/loom.hpp"

namespace {

struct Windows {
  loom::core::HostWindows windows{2, ""};
  const std::byte* base = nullptr;
  std::size_t size = 0;
  Windows() {
    int err = 0;
    std::vector<loom::base::SharedFile> peers(2);
    peers[1] = loom::base::SharedFile::create(8192, &err);
    base = static_cast<const std::byte*>(peers[1].data());
    size = peers[1].size();
    auto own = std::make_shared<loom::base::SharedFile>(loom::base::SharedFile::create(4096, &err));
    windows.add(0, loom::core::HostWindows::Window{own, std::move(peers)});
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static Windows w;
  loom::algorithms::PeerMemory::Range range;
  std::uint64_t bytes = 0;
  const int peer = size > 0 ? data[0] % 3 - 1 : 1;  // -1, 0 (this rank) or 1
  if (size > 1) std::memcpy(range.bytes.data(), data + 1, std::min(size - 1, range.bytes.size()));
  if (size > 1 + range.bytes.size())
    std::memcpy(&bytes, data + 1 + range.bytes.size(),
                std::min<std::size_t>(size - 1 - range.bytes.size(), sizeof bytes));
  try {
    const auto* p = static_cast<const std::byte*>(w.windows.map(peer, range, bytes));
    if (p < w.base || p > w.base + w.size || bytes > static_cast<std::size_t>(w.base + w.size - p))
      __builtin_trap();
  } catch (const loom::PeerError&) {
  }
  return 0;
}
