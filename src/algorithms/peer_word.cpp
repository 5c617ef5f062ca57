#include "algorithms/peer_word.hpp"

#include <cerrno>
#include <random>

#include "base/process_memory.hpp"

namespace loom::algorithms {

std::uint64_t fresh_nonce() {
  thread_local std::mt19937_64 generator{std::random_device{}()};
  std::uint64_t n = 0;
  while (n == 0) n = generator();
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
