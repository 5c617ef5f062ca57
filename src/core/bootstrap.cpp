// init(): builds a communicator from the launcher's environment.
#include <fmt/format.h>

#include "base/config.hpp"
#include "base/logging.hpp"
#include "core/communicator_impl.hpp"
#include "core/launch_env.hpp"
#include "loom/loom.hpp"
#include "loom/store.hpp"

namespace loom {

namespace {

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
  const core::LaunchEnv launch = core::detect_launch_env();
  const int rank = launch.rank;
  const int size = launch.world_size;
  const std::string& method = launch.init_method;
  auto timeout = base::Config::resolve(options, size).timeout;
  base::log().info("init: {}", launch.describe());

  std::shared_ptr<Store> store;
  std::unique_ptr<StoreServer> server;
  if (method.rfind("file://", 0) == 0) {
    store = std::make_shared<FileStore>(method.substr(7));
  } else {
    HostPort at;
    if (method.rfind("tcp://", 0) == 0) {
      at = parse_tcp_url(method);
    } else if (method == "env://") {
      at = {launch.master_addr, static_cast<std::uint16_t>(launch.master_port)};
    } else {
      throw InvalidArgument(fmt::format(
          "init: LOOM_INIT_METHOD='{}' is not env://, tcp://host:port or file://path", method));
    }
    // Rank 0 hosts the store unless a launcher (loomrun) already does.
    if (rank == 0 && !launch.store_hosted_by_launcher) {
      try {
        server = std::make_unique<StoreServer>(at.host, at.port);
      } catch (const std::exception&) {
        server = std::make_unique<StoreServer>("0.0.0.0",
                                               at.port);  // MASTER_ADDR names another interface
      }
    }
    store = std::make_shared<TcpStore>(at.host, at.port, timeout);
  }
  Communicator comm(store, rank, size, options);
  if (server) comm.impl_->hosted_server = std::move(server);
  return comm;
}

}  // namespace loom
