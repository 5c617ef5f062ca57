// init(): builds a communicator from the launcher's environment.
#include <netdb.h>
#include <netinet/in.h>

#include <cstring>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <string_view>
#include <system_error>

#include "base/config.hpp"
#include "base/errors.hpp"
#include "base/local_address.hpp"
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

// A store failure met during init: the store names the call and itself, not the rank that made
// it. Errors that already say "init:" name what they need.
bool needs_the_rank(const Error& e) {
  const std::string_view what = e.what();
  return (e.kind() == ErrorKind::store || what.rfind("store", 0) == 0) &&
         what.rfind("init:", 0) != 0;
}

// Rank 0's store on MASTER_ADDR. Only where MASTER_ADDR is not an address of this host (NAT, a
// floating address) and clients must prove the secret does it serve on every interface instead.
std::unique_ptr<StoreServer> host_store(const HostPort& at, const std::string& secret) {
  if (base::is_local_address(at.host).value_or(true)) {  // else bind will say why
    try {
      return std::make_unique<StoreServer>(at.host, at.port, secret);
    } catch (const std::exception& e) {
      throw StoreError(fmt::format("init: rank 0 cannot host the store on {}:{}: {}", at.host,
                                   at.port, e.what()));
    }
  }
  const std::string why = "it is no address of this host";
  if (secret.empty())
    throw InvalidArgument(fmt::format(
        "init: rank 0 cannot host the store on MASTER_ADDR {}:{}: {}; set MASTER_ADDR to an "
        "address of this host, or set a job secret (LOOM_SECRET, LOOM_SECRET_FILE or "
        "Options::secret) to serve on every interface",
        at.host, at.port, why));
  const std::string any = at.host.find(':') == std::string::npos ? "0.0.0.0" : "::";
  base::log().warn(
      "init: rank 0 cannot host the store on MASTER_ADDR {}:{} ({}); serving on every interface "
      "({}) to clients that prove the job secret",
      at.host, at.port, why, any);
  try {
    return std::make_unique<StoreServer>(any, at.port, secret);
  } catch (const std::exception& e) {
    throw StoreError(fmt::format("init: rank 0 cannot host the store on {}:{} either: {}", any,
                                 at.port, e.what()));
  }
}

// How this rank reaches the job's store: a file, or a TCP store that rank 0 serves unless a
// launcher does.
struct StoreAccess {
  std::shared_ptr<Store> store;
  std::unique_ptr<StoreServer> server;  // this process serves it
  int host = -1;                        // the rank that serves it (-1: a launcher, or a file)
  std::string where;
  std::string route_hint;  // where the store is reached: data connections listen there too
};

StoreAccess reach_store(const core::LaunchEnv& launch, const base::Config& config) {
  const std::string& method = launch.init_method;
  const int rank = launch.rank;
  const int size = launch.world_size;
  // Options::secret, else the environment's, guards the store as it guards data connections.
  const std::string& secret = config.link.secret;
  StoreAccess out;
  if (method.rfind("file://", 0) == 0) {
    out.store = std::make_shared<FileStore>(method.substr(7));
    out.where = method;
    return out;
  }
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
  if (!launch.store_hosted_by_launcher) out.host = 0;
  if (rank == 0 && out.host == 0) out.server = host_store(at, secret);
  // A request to a frozen store host gives up within the job's timeout where that is shorter
  // than the client's minute (LOOM_TIMEOUT=10: a rank is not held 60 s by one set).
  const auto request_timeout =
      std::min<std::chrono::milliseconds>(config.timeout, std::chrono::seconds(60));
  try {
    out.store =
        std::make_shared<TcpStore>(at.host, at.port, config.timeout, secret, request_timeout);
  } catch (const Error& e) {
    if (!needs_the_rank(e)) throw;
    rethrow_with_context(e, fmt::format("init: rank {}/{}", rank, size));
  }
  out.where = fmt::format("{}:{}", at.host, at.port);
  out.route_hint = at.host;
  return out;
}

}  // namespace

Communicator init(Options options) {
  const core::LaunchEnv launch = core::detect_launch_env();
  // The job's keys under its name, where the launcher gives one (docs/reliability.md, "Job
  // identity"): a job that reaches another's store (a port both took) meets no key of it.
  if (!launch.job.empty() && options.store_prefix == Options{}.store_prefix)
    options.store_prefix = fmt::format("{}/job-{}", options.store_prefix, launch.job);
  const int rank = launch.rank;
  const int size = launch.world_size;
  // Settings this rank cannot run with are raised by the communicator below, once it has told
  // its peers (they would wait for it until their timeout); the store needs only what joining
  // does.
  base::Config config;
  std::string refused;  // this rank's own settings' error, raised whatever the store does
  try {
    config = base::Config::resolve(options, size);
  } catch (const InvalidArgument& e) {
    refused = e.what();
    config = base::Config::for_joining(options, size);
  }
  base::log().info("init: {}", launch.describe());

  StoreAccess access;
  try {
    access = reach_store(launch, config);
  } catch (const Error& e) {
    if (refused.empty()) throw;
    // The peers cannot be told; the rank's own error is the one that matters.
    base::log().warn("init: rank {}/{}: the store failed ({}) while refusing this rank's settings",
                     rank, size, e.what());
    throw InvalidArgument(fmt::format("init: rank {}/{}: {}", rank, size, refused));
  }
  try {
    Communicator comm(std::make_shared<Communicator::Impl>(
        access.store, rank, size, options, access.route_hint, access.server != nullptr));
    if (access.server) comm.impl_->hosted_server = std::move(access.server);
    comm.impl_->set_store_host(access.host, access.where);
    return comm;
  } catch (const Error& e) {
    if (!needs_the_rank(e)) throw;
    rethrow_with_context(e, fmt::format("init: rank {}/{}", rank, size));
  }
}

}  // namespace loom
