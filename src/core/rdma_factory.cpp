#include "core/rdma_factory.hpp"

#include <mutex>

#include "transports/ibverbs/ib_transport.hpp"

namespace loom::core {
namespace {

std::mutex mu;
RdmaFactory installed;

RdmaFactory verbs() {
  return RdmaFactory{transport::ibverbs::choose_port, transport::ibverbs::make_transport};
}

}  // namespace

RdmaFactory rdma_factory() {
  std::lock_guard lock(mu);
  return installed.make ? installed : verbs();
}

void set_rdma_factory(RdmaFactory factory) {
  std::lock_guard lock(mu);
  installed = std::move(factory);
}

}  // namespace loom::core
