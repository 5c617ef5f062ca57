#include "algorithms/waiter.hpp"

#include <sched.h>

#include <cerrno>
#include <thread>

#include <fmt/format.h>

namespace loom::algorithms {

namespace {
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}
}  // namespace

Waiter::Waiter(const Engine& engine)
    : engine_(engine), oversubscribed_(engine.config().oversubscribed) {}

void Waiter::begin() {
  spin_until_ = core::Clock::now() + std::chrono::microseconds(engine_.config().spin_us);
}

void Waiter::step(int peer, const char* what) {
  bool moved = false;
  for (auto* c : engine_.used()) moved |= c->progress();
  if (moved) {
    begin();  // the peer is active: keep spinning, the next bytes are likely close behind
    return;
  }
  if (oversubscribed_) {
    if (core::Clock::now() < spin_until_) {
      sched_yield();  // a yield can last a time slice: look at the clock every time
      return;
    }
  } else if ((++spins_ & 63) != 0 || core::Clock::now() < spin_until_) {
    cpu_relax();  // reading the clock costs more than a pause: do it every 64 rounds
    return;
  }
  if (engine_.deadline().expired()) {
    std::string via;
    for (auto* c : engine_.used())
      if (c->peer() == peer) via = c->describe();
    throw TimeoutError(fmt::format("{}: rank {} timed out after {} s waiting for {} rank {}{}{}",
                                   engine_.call().describe(), engine_.rank(),
                                   engine_.config().timeout.count() / 1000.0, what, peer,
                                   via.empty() ? "" : " over ", via));
  }
  fds_.clear();
  transport::Connection* waited = nullptr;
  bool waited_has_fds = false;
  for (auto* c : engine_.used()) {
    const std::size_t before = fds_.size();
    c->add_poll_fds(fds_);
    if (c->peer() == peer) waited = c, waited_has_fds = fds_.size() > before;
  }
  const int timeout_ms = engine_.deadline().remaining_ms(100);
  if (fds_.empty() && waited != nullptr) {
    waited->sleep(timeout_ms);  // shared memory: a futex the peer rings
  } else if (::poll(fds_.data(), fds_.size(), waited_has_fds ? timeout_ms : 1) > 0) {
    begin();  // a connection without descriptors cannot wake poll: look again soon
  }
}

}  // namespace loom::algorithms
