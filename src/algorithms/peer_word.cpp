#include "algorithms/peer_word.hpp"

#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <random>

#include "base/process_memory.hpp"

namespace loom::algorithms {

// From the kernel's generator on every call: a generator kept in the process would hand ranks
// forked from one parent after its first use the same words.
std::uint64_t fresh_nonce() {
  std::uint64_t n = 0;
  while (n == 0) {
    if (::getrandom(&n, sizeof n, 0) == static_cast<ssize_t>(sizeof n)) continue;
    if (errno == EINTR) continue;
    // No getrandom (an old kernel, a filter): the clock and the pid, different per process.
    std::random_device device;
    n = (std::uint64_t{device()} << 32 | device()) ^ static_cast<std::uint64_t>(::getpid()) ^
        static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }
  return n;
}

int check_peer_word(pid_t pid, std::uint64_t address, std::uint64_t nonce, bool write_back) {
  std::uint64_t seen = 0;
  int err =
      base::read_process_memory(pid, reinterpret_cast<const void*>(address), &seen, sizeof seen);
  if (err == 0 && seen != nonce) err = ESRCH;  // another process under that pid
  if (err == 0 && write_back)
    err = base::write_process_memory(pid, reinterpret_cast<void*>(address), &seen, sizeof seen);
  return err;
}

}  // namespace loom::algorithms
