// The store server's listening socket and the process limits it depends on.
#pragma once

#include <cstdint>
#include <string>

namespace loom::store {

// A socket listening on host:port (port 0: a free one), close-on-exec from its creation so that
// no process this one execs holds the port, and non-blocking. Raises StoreError naming the
// address on failure.
int listen_tcp(const std::string& host, std::uint16_t port, int backlog);
// The same properties for a listening socket made elsewhere.
void make_close_on_exec_and_nonblocking(int fd);
// Raises the soft RLIMIT_NOFILE to the hard limit, once per process: a server holds a
// descriptor per client, and the usual soft limit (1024) is far below what the system allows.
void raise_descriptor_limit_once();

}  // namespace loom::store
