#include "base/local_address.hpp"

#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>

#include <cstring>

namespace loom::base {

std::optional<bool> is_local_address(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return std::nullopt;
  ifaddrs* interfaces = nullptr;
  if (::getifaddrs(&interfaces) != 0) {
    ::freeaddrinfo(found);
    return std::nullopt;
  }
  bool local = false;
  for (const addrinfo* a = found; a && !local; a = a->ai_next)
    for (const ifaddrs* i = interfaces; i && !local; i = i->ifa_next) {
      if (!i->ifa_addr || i->ifa_addr->sa_family != a->ai_family) continue;
      if (a->ai_family == AF_INET)
        local = reinterpret_cast<const sockaddr_in*>(a->ai_addr)->sin_addr.s_addr ==
                reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr;
      else if (a->ai_family == AF_INET6)
        local = std::memcmp(&reinterpret_cast<const sockaddr_in6*>(a->ai_addr)->sin6_addr,
                            &reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)->sin6_addr,
                            sizeof(in6_addr)) == 0;
    }
  ::freeifaddrs(interfaces);
  ::freeaddrinfo(found);
  return local;
}

}  // namespace loom::base
