#include "base/cpu_cache.hpp"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>

namespace loom::base {
namespace {

// "32768K" or "1M" as sysfs writes cache sizes; 0 when unreadable.
std::size_t parse_cache_size(const std::string& text) {
  std::size_t value = 0, i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9')
    value = value * 10 + (text[i++] - '0');
  if (i < text.size() && text[i] == 'K') value <<= 10;
  if (i < text.size() && text[i] == 'M') value <<= 20;
  return value;
}

std::size_t from_sysfs(int only_level = 0) {
  std::size_t largest = 0;
  for (int index = 0; index < 8; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index);
    std::ifstream type_file(dir + "/type"), size_file(dir + "/size");
    std::string type, size;
    if (!(type_file >> type) || !(size_file >> size)) break;
    if (type == "Instruction") continue;
    if (only_level != 0) {
      std::ifstream level_file(dir + "/level");
      int level = 0;
      if (!(level_file >> level) || level != only_level) continue;
    }
    largest = std::max(largest, parse_cache_size(size));
  }
  return largest;
}

}  // namespace

std::size_t last_level_cache_bytes() {
  static const std::size_t bytes = [] {
    if (const std::size_t b = from_sysfs(); b > 0) return b;
    for (int name : {_SC_LEVEL3_CACHE_SIZE, _SC_LEVEL2_CACHE_SIZE})
      if (const long b = ::sysconf(name); b > 0) return static_cast<std::size_t>(b);
    return std::size_t{32} << 20;
  }();
  return bytes;
}

std::size_t core_cache_bytes() {
  static const std::size_t bytes = [] {
    if (const std::size_t b = from_sysfs(2); b > 0) return b;
    const long b = ::sysconf(_SC_LEVEL2_CACHE_SIZE);
    return b > 0 ? static_cast<std::size_t>(b) : std::size_t{0};
  }();
  return bytes;
}

}  // namespace loom::base
