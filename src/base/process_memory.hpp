// Other processes of this host: whether one still runs, and reading or writing its memory in one
// copy (Linux cross-memory attach: the kernel copies from the peer's pages straight into ours,
// where shared-memory slots copy twice).
#pragma once

#include <sys/types.h>

#include <cstddef>

namespace loom::base {

// Whether process `pid` runs: not gone, and not a zombie waiting to be reaped (a launcher may
// keep its dead workers unreaped). Without /proc, what kill(pid, 0) says.
bool process_alive(int pid);

// Whether this process may call process_vm_readv at all (a seccomp filter, as in some
// containers, refuses it); checked once, by reading its own memory.
bool cross_memory_attach_available();

// Copies `bytes` from `remote` in process `pid` to `local`. Returns 0, or the errno of the
// failure (EPERM: not allowed to read that process; ESRCH: it is gone; EFAULT: no such range).
int read_process_memory(pid_t pid, const void* remote, void* local, std::size_t bytes);

// Copies `bytes` from `local` to `remote` in process `pid` (process_vm_writev): 0, or the errno of
// the failure, as read_process_memory.
int write_process_memory(pid_t pid, void* remote, const void* local, std::size_t bytes);

}  // namespace loom::base
