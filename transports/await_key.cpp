#include "transports/await_key.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "base/process_memory.hpp"
#include "transports/transport.hpp"

namespace loom::transport {

Bytes await_key(Store& store, const std::string& key, const base::Deadline& deadline,
                const base::Halt& halt, int peer, int pid, const std::string& what,
                const std::function<void(int)>& sleep) {
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    if (store.check({key}).front())
      return store.get(key,
                       std::chrono::milliseconds(std::max(1000, deadline.remaining_ms(1 << 30))));
    if (halt.triggered()) halt.raise(what);
    if (pid > 0 && !base::process_alive(pid))
      throw PeerError(
          fmt::format("{}: rank {}'s process {} is gone (exited or crashed)", what, peer, pid),
          peer);
    if (deadline.expired())
      throw TimeoutError(
          fmt::format("{}: timed out (is rank {} in the same collective?)", what, peer));
    const auto wait =
        std::min(pause, std::chrono::milliseconds(deadline.remaining_ms(kSetupPollMs)));
    if (sleep)
      sleep(static_cast<int>(wait.count()));
    else
      std::this_thread::sleep_for(wait);
    pause = std::min(pause * 2, std::chrono::milliseconds(kSetupPollMs));
  }
}

}  // namespace loom::transport
