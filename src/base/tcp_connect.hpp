#pragma once

#include <netdb.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "base/deadline.hpp"

namespace loom::base {

using AddressList = std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)>;
// getaddrinfo's signature; what it returns is released with freeaddrinfo.
using Resolver = std::function<int(const char* host, const char* service, const addrinfo* hints,
                                   addrinfo** found)>;

// The TCP addresses of host:port, or null with `error` saying why. A numeric address is taken
// as is; a name is resolved on a helper thread, so that a resolver that does not answer cannot
// hold the caller past the deadline.
AddressList resolve_tcp(const std::string& host, std::uint16_t port, const Deadline& deadline,
                        std::string& error, const Resolver& resolver = ::getaddrinfo);

// Connects to host:port. With retry_refused, refused connections are retried until the deadline
// (the listener may not be up yet); without, a refusal returns at once. Returns a non-blocking,
// close-on-exec fd with TCP_NODELAY set, or -1 with `error` describing why.
int connect_tcp(const std::string& host, std::uint16_t port, const Deadline& deadline,
                std::string& error, bool retry_refused = true);

}  // namespace loom::base
