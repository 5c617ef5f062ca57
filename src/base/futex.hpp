// Sleeping on a 32-bit word with a timeout (std::atomic::wait has none).
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
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

// One word of several that a sleep watches (futex_wait_any_shared): shared between processes.
struct FutexWord {
  std::atomic<std::uint32_t>* word;
  std::uint32_t expected;
};

// Returns when any word != its expected value, a wake arrives on any, or timeout_ms passes
// (spurious returns happen: callers re-check). At most 128 words (the kernel's limit; more are
// not watched). Returns false, without sleeping, where the kernel has no futex_waitv (before
// Linux 5.16, or a filter refuses it): the caller then sleeps on one word.
inline bool futex_wait_any_shared(const FutexWord* words, std::size_t n, int timeout_ms) {
#ifdef SYS_futex_waitv
  static std::atomic<bool> refused{false};
  if (refused.load(std::memory_order_relaxed)) return false;
  constexpr std::size_t kMax = 128;  // FUTEX_WAITV_MAX
  futex_waitv waiters[kMax];
  n = n < kMax ? n : kMax;
  for (std::size_t i = 0; i < n; ++i)
    waiters[i] = futex_waitv{words[i].expected, reinterpret_cast<std::uintptr_t>(words[i].word),
                             FUTEX_32, 0};
  timespec until{};
  ::clock_gettime(CLOCK_MONOTONIC, &until);  // futex_waitv's timeout is absolute
  until.tv_sec += timeout_ms / 1000;
  until.tv_nsec += static_cast<long>(timeout_ms % 1000) * 1000000L;
  if (until.tv_nsec >= 1000000000L) until.tv_sec += 1, until.tv_nsec -= 1000000000L;
  if (::syscall(SYS_futex_waitv, waiters, n, 0, &until, CLOCK_MONOTONIC) < 0 &&
      (errno == ENOSYS || errno == EPERM)) {
    refused.store(true, std::memory_order_relaxed);
    return false;
  }
  return true;
#else
  (void)words, (void)n, (void)timeout_ms;
  return false;
#endif
}

}  // namespace loom::base
