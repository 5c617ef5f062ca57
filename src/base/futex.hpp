// Sleeping on a 32-bit word with a timeout (std::atomic::wait has none).
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <ctime>

namespace loom::base {

// Returns when *word != expected, a wake arrives, or timeout_ms passes (spurious returns happen:
// callers re-check their condition).
inline void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected, int timeout_ms) {
  timespec ts{timeout_ms / 1000, static_cast<long>(timeout_ms % 1000) * 1000000L};
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected, &ts,
            nullptr, 0);
}

inline void futex_wake_all(std::atomic<std::uint32_t>& word) {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE_PRIVATE, INT32_MAX,
            nullptr, nullptr, 0);
}

}  // namespace loom::base
