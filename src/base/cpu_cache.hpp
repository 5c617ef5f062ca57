// The size of this machine's last-level cache, for choices between copies that stay cached and
// copies that stream past the caches.
#pragma once

#include <cstddef>

namespace loom::base {

// The largest data cache of CPU 0 as sysfs lists it (glibc's sysconf adds up the L3 of every
// chiplet on some AMD machines), else sysconf's; 32 MiB when neither knows. Read once.
std::size_t last_level_cache_bytes();

// The size of CPU 0's level-2 data cache as sysfs lists it, else sysconf's; 0 when neither knows.
std::size_t core_cache_bytes();

}  // namespace loom::base
