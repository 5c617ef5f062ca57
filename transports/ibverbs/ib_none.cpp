// The build without libibverbs: no RDMA port is ever chosen.
#include "transports/ibverbs/ib_device.hpp"
#include "transports/ibverbs/ib_transport.hpp"

namespace loom::transport::ibverbs {

std::string PortChoice::describe() const {
  return device;
}

std::optional<PortChoice> choose_port(std::string& why) {
  why = "this build has no InfiniBand support (libibverbs-dev was not found)";
  return std::nullopt;
}

std::unique_ptr<Transport> make_transport(const Setup&, const PortChoice&) {
  return nullptr;
}

}  // namespace loom::transport::ibverbs
