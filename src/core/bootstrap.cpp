// init(): builds a communicator from the launcher's environment.
#include <fmt/format.h>

#include "core/config.hpp"
#include "core/logging.hpp"
#include "loom/loom.hpp"
#include "loom/store.hpp"

namespace loom {

void attach_store_server(Communicator::Impl& impl, std::unique_ptr<StoreServer> server);

namespace {

long long required_int(const char* name, long long lo, long long hi) {
  auto v = core::env_int(name, lo, hi);
  if (!v)
    throw InvalidArgument(
        fmt::format("init: environment variable {} is not set (launch with loomrun, "
                    "torchrun-style variables, or set RANK and WORLD_SIZE)",
                    name));
  return *v;
}

struct HostPort {
  std::string host;
  std::uint16_t port;
};

HostPort parse_tcp_url(const std::string& url) {
  std::string rest = url.substr(6);  // after tcp://
  auto colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0)
    throw InvalidArgument(fmt::format("init: '{}' is not tcp://host:port", url));
  std::string host = rest.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  long long port = -1;
  try {
    port = std::stoll(rest.substr(colon + 1));
  } catch (const std::exception&) {
  }
  if (port < 1 || port > 65535)
    throw InvalidArgument(fmt::format("init: '{}' has no valid port", url));
  return {host, static_cast<std::uint16_t>(port)};
}

}  // namespace

Communicator init(Options options) {
  const int rank = static_cast<int>(required_int("RANK", 0, 1 << 24));
  const int size = static_cast<int>(required_int("WORLD_SIZE", 1, 1 << 24));
  const std::string method = core::env_string("LOOM_INIT_METHOD").value_or("env://");
  auto timeout = core::Config::resolve(options, size).timeout;

  std::shared_ptr<Store> store;
  std::unique_ptr<StoreServer> server;
  if (method.rfind("file://", 0) == 0) {
    core::log().info("init: rank {}/{} rendezvous through file store {}", rank, size,
                     method.substr(7));
    store = std::make_shared<FileStore>(method.substr(7));
  } else {
    HostPort at;
    if (method.rfind("tcp://", 0) == 0) {
      at = parse_tcp_url(method);
    } else if (method == "env://") {
      auto addr = core::env_string("MASTER_ADDR");
      if (!addr)
        throw InvalidArgument(
            "init: environment variable MASTER_ADDR is not set (env:// rendezvous)");
      at = {*addr, static_cast<std::uint16_t>(required_int("MASTER_PORT", 1, 65535))};
    } else {
      throw InvalidArgument(fmt::format(
          "init: LOOM_INIT_METHOD='{}' is not env://, tcp://host:port or file://path", method));
    }
    // Rank 0 hosts the store unless a launcher (loomrun) already does.
    if (rank == 0 && !core::env_string("LOOM_STORE_HOSTED")) {
      try {
        server = std::make_unique<StoreServer>(at.host, at.port);
      } catch (const std::exception&) {
        server = std::make_unique<StoreServer>("0.0.0.0",
                                               at.port);  // MASTER_ADDR names another interface
      }
    }
    core::log().info("init: rank {}/{} rendezvous through store {}:{}{}", rank, size, at.host,
                     at.port, server ? " (hosted by this rank)" : "");
    store = std::make_shared<TcpStore>(at.host, at.port, timeout);
  }
  Communicator comm(store, rank, size, options);
  if (server) attach_store_server(*comm.impl_, std::move(server));
  return comm;
}

}  // namespace loom
