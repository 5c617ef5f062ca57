#pragma once

#include <cstdint>
#include <string>

#include "core/deadline.hpp"

namespace loom::core {

// Connects to host:port, retrying refused connections (the listener may not be up yet) until the
// deadline. Returns a non-blocking fd with TCP_NODELAY set, or -1 with `error` describing why.
int connect_tcp(const std::string& host, std::uint16_t port, const Deadline& deadline,
                std::string& error);

}  // namespace loom::core
