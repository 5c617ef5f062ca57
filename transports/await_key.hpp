// A peer's setup value in the store (its address, segment name, device handle), waited for in
// short polls rather than one blocking get: a blocking get cannot see the halt, so abort(), a
// failure record or a heartbeat timeout would end the wait only at the deadline (LOOM_TIMEOUT).
#pragma once

#include <functional>
#include <string>

#include "base/deadline.hpp"
#include "base/halt.hpp"
#include "loom/store.hpp"

namespace loom::transport {

// Polls `key` until it is set (then returns its value), the halt is triggered (raises its
// error), the peer's process is gone (pid > 0, a peer on this host: PeerError naming `peer`) or
// the deadline passes (TimeoutError). `what` says who waits for what: "tcp: rank 0 waiting for
// rank 1's address". `sleep` (milliseconds) replaces the pause between polls where set.
Bytes await_key(Store& store, const std::string& key, const base::Deadline& deadline,
                const base::Halt& halt, int peer, int pid, const std::string& what,
                const std::function<void(int)>& sleep = {});

}  // namespace loom::transport
