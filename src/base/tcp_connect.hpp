#pragma once

#include <cstdint>
#include <string>

#include "base/deadline.hpp"

namespace loom::base {

// Connects to host:port. With retry_refused, refused connections are retried until the deadline
// (the listener may not be up yet); without, a refusal returns at once. Returns a non-blocking fd
// with TCP_NODELAY set, or -1 with `error` describing why.
int connect_tcp(const std::string& host, std::uint16_t port, const Deadline& deadline,
                std::string& error, bool retry_refused = true);

}  // namespace loom::base
