// The word a rank keeps in memory for one call of the single-copy algorithms, so that a peer that
// reads or writes its memory by pid (process_vm_readv, process_vm_writev) first checks that the
// pid names that rank: ranks in different pid namespaces may see another process under it, and
// then the check fails, never the data.
#pragma once

#include <sys/types.h>

#include <cstdint>

namespace loom::algorithms {

// A random word, never 0.
std::uint64_t fresh_nonce();

// 0 where process `pid` holds `nonce` at `address`, else the errno of the failure (ESRCH: the word
// there is another). `write_back`: the word is also written back as it is, for a peer that will
// write the rank's memory (a filter may refuse writes alone).
int check_peer_word(pid_t pid, std::uint64_t address, std::uint64_t nonce, bool write_back);

}  // namespace loom::algorithms
