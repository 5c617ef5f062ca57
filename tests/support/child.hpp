// A body run in a forked child process, for tests that change what only that process should see
// (a mount namespace, resource limits).
#pragma once

#include <sys/mount.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sched.h>

#include <cstddef>
#include <cstdio>
#include <functional>
#include <string>

namespace loom::testing {

// Runs `body` in a child process; its exit code, or -1 when it died by a signal.
inline int in_child(const std::function<int()>& body) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(body());
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// In a child (in_child): gives this process and those it forks a /dev/shm of their own, a tmpfs
// of `size` ("1m"); false where mount namespaces are not permitted.
inline bool own_dev_shm(const std::string& size) {
  return ::unshare(CLONE_NEWNS) == 0 &&
         ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 &&
         ::mount("tmpfs", "/dev/shm", "tmpfs", 0, ("size=" + size).c_str()) == 0;
}

// Bytes of the /dev/shm this process sees that are in use.
inline std::size_t dev_shm_used() {
  struct statvfs fs {};
  ::statvfs("/dev/shm", &fs);
  return static_cast<std::size_t>((fs.f_blocks - fs.f_bfree) * fs.f_frsize);
}

}  // namespace loom::testing
