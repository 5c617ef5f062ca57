#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include "loom/loom.hpp"
#include "transports/tcp/tcp_transport.hpp"

namespace loom::transport::tcp {
namespace {

std::string ipv4_text(const sockaddr* sa) {
  char buf[INET_ADDRSTRLEN] = {0};
  inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof(buf));
  return buf;
}

// The source address the kernel would use to reach host; connecting a UDP socket sends nothing.
std::string route_source(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), "9", &hints, &res) != 0 || res == nullptr) return {};
  std::string out;
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0)
      out = ipv4_text(reinterpret_cast<sockaddr*>(&ss));
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(res);
  return out;
}

}  // namespace

std::string choose_local_address(const std::string& ifname, const std::string& route_hint,
                                 bool single_host) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return "127.0.0.1";
  std::string named, first_external;
  std::vector<std::string> seen;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP))
      continue;
    std::string name = i->ifa_name;
    seen.push_back(name);
    if (!ifname.empty() && named.empty() && name.rfind(ifname, 0) == 0)
      named = ipv4_text(i->ifa_addr);
    if (first_external.empty() && !(i->ifa_flags & IFF_LOOPBACK))
      first_external = ipv4_text(i->ifa_addr);
  }
  ::freeifaddrs(list);
  if (!ifname.empty()) {
    if (named.empty())
      throw InvalidArgument(
          fmt::format("LOOM_SOCKET_IFNAME={}: no IPv4 interface of that name is up (have: {})",
                      ifname, fmt::join(seen, ", ")));
    return named;
  }
  if (!route_hint.empty()) {
    std::string via = route_source(route_hint);
    if (!via.empty()) return via;
  }
  return single_host || first_external.empty() ? "127.0.0.1" : first_external;
}

}  // namespace loom::transport::tcp
