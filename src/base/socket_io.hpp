// Timed I/O on non-blocking sockets, for handshakes and the store client.
#pragma once

#include <cstddef>
#include <string>

#include "base/deadline.hpp"

namespace loom::base {

enum class IoResult { ok, timeout, closed, error };

// Waits until fd is readable (events = POLLIN) or writable (POLLOUT), or the deadline passes.
IoResult wait_fd(int fd, short events, const Deadline& deadline);
IoResult read_exact(int fd, void* buf, std::size_t n, const Deadline& deadline);
IoResult write_exact(int fd, const void* buf, std::size_t n, const Deadline& deadline);
void set_nonblocking(int fd);
std::string describe(IoResult r);
// "host:port" of the far end of a connected socket, for error messages.
std::string peer_address(int fd);

}  // namespace loom::base
