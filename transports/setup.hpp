// What every transport is made from, one way for all four (tcp, shm, ibverbs, cudaipc): the
// store its addresses and handshakes go through (its own keys: store/keys.hpp), this rank and the
// communicator's size, the job token that names this communicator's connections, the link
// settings and the pacing of its waits. A transport takes what it needs besides as arguments of
// its own (TCP its route hint, shared memory the peers' pids, RDMA its port, CUDA IPC the peers
// on this host), and copies what it keeps.
#pragma once

#include <cstdint>

#include "base/config.hpp"
#include "loom/store.hpp"

namespace loom::transport {

struct Setup {
  Store& store;
  int rank;
  int size;
  std::uint64_t token;
  const base::LinkConfig& link;
  const base::Pacing& pacing;
};

}  // namespace loom::transport
