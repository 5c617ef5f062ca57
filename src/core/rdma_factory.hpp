// How a communicator opens RDMA: it chooses a port, then makes the transport for its ranks on
// other hosts. The verbs implementation by default; tests put a double in its place, so that a
// machine without an RDMA device still runs the communicator's RDMA path (children of split and
// shrink included).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "base/config.hpp"
#include "loom/store.hpp"
#include "transports/ibverbs/ib_device.hpp"
#include "transports/setup.hpp"
#include "transports/transport.hpp"

namespace loom::core {

struct RdmaFactory {
  // The port, or nullopt with the reason in `why`.
  std::function<std::optional<transport::ibverbs::PortChoice>(std::string& why)> choose_port;
  // The transport over `port`, made as every transport is (transports/setup.hpp); nullptr where
  // this build has none. Raises Error when the port cannot be opened.
  std::function<std::unique_ptr<transport::Transport>(const transport::Setup& setup,
                                                      const transport::ibverbs::PortChoice& port)>
      make;
};

// What communicators made from now on use (this process).
RdmaFactory rdma_factory();
// Replaces it (tests); an empty factory puts the verbs implementation back.
void set_rdma_factory(RdmaFactory factory);

}  // namespace loom::core
