// A seccomp filter a test installs in its own process, as some containers refuse system calls.
#pragma once

namespace loom::testing {

// From now on the system call `call` (process_vm_readv, ...) fails with EPERM in every thread of
// this process. A test failure where the filter cannot be installed; x86-64 only (the filter
// names the architecture).
void refuse_system_call(long call);

}  // namespace loom::testing
