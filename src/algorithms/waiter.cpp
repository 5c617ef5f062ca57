#include "algorithms/waiter.hpp"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <thread>

#include <fmt/format.h>

#include "base/cpu_relax.hpp"

namespace loom::algorithms {

Waiter::Waiter(const Engine& engine) : engine_(engine) {}

base::Clock::time_point Waiter::begin() {
  const auto now = base::Clock::now();
  window_us_ = engine_.spin_budget().start_wait();
  open_spin_window(now);
  next_check_ = now + kCheckEvery;
  return now;
}

void Waiter::open_spin_window(base::Clock::time_point now) {
  // Yield, and briefly, when ranks outnumber cores or this call runs beside its rank's work
  // (which changes while the call runs: its caller may start waiting for it).
  yield_ = engine_.pacing().oversubscribed || engine_.sharing_core();
  // Yielding hands the core over already: the learned window is for pausing spins.
  const int spin_us = yield_ ? std::min(engine_.spin_budget().ceiling_us(), 20) : window_us_;
  spin_until_ = now + std::chrono::microseconds(spin_us);
}

void Waiter::learn(base::Clock::time_point started, bool spun_out) {
  if (yield_) return;
  // How long the wait took matters only to one that spun out, or one that explored.
  SpinBudget& budget = engine_.spin_budget();
  const auto waited =
      spun_out || budget.exploring()
          ? std::chrono::duration_cast<std::chrono::microseconds>(base::Clock::now() - started)
          : std::chrono::microseconds(0);
  budget.record(waited, spun_out);
}

void Waiter::note(base::Clock::time_point started, std::uint64_t sleeps) const {
  engine_.note_wait(std::chrono::duration<double, std::micro>(base::Clock::now() - started).count(),
                    sleeps);
}

bool Waiter::spin(int peer, const char* what) {
  bool moved = false;
  for (auto* c : engine_.used()) moved |= c->progress();
  if (moved) {
    // The peer is active: keep spinning, the next bytes are likely close behind.
    const auto now = base::Clock::now();
    if (now >= next_check_) {
      check(peer, what);
      next_check_ = now + kCheckEvery;
    }
    open_spin_window(now);
    return true;
  }
  if (yield_) {
    if (base::Clock::now() < spin_until_) {
      sched_yield();  // a yield can last a time slice: look at the clock every time
      return true;
    }
  } else if ((++spins_ & 63) != 0 || base::Clock::now() < spin_until_) {
    base::cpu_relax();  // reading the clock costs more than a pause: do it every 64 rounds
    return true;
  }
  return false;
}

void Waiter::check(int peer, const char* what) const {
  if (engine_.halt().triggered())
    engine_.halt().raise(fmt::format("{}: rank {} (waiting for {} rank {})",
                                     engine_.call().describe(), engine_.rank(), what, peer));
  if (engine_.deadline().expired()) {
    std::string via;
    for (auto* c : engine_.used())
      if (c->peer() == peer) via = c->describe();
    throw TimeoutError(fmt::format("{}: rank {} timed out: {} s timeout waiting for {} rank {}{}{}",
                                   engine_.call().describe(), engine_.rank(),
                                   engine_.timeout().count() / 1000.0, what, peer,
                                   via.empty() ? "" : " over ", via));
  }
}

transport::Connection* Waiter::prepare_sleep(int peer, const char* what) {
  check(peer, what);
  fds_.clear();
  transport::Connection* waited = nullptr;
  poll_waited_fd_ = false;
  for (auto* c : engine_.used()) {
    const std::size_t before = fds_.size();
    c->add_poll_fds(fds_);
    if (c->peer() == peer) waited = c, poll_waited_fd_ = fds_.size() > before;
  }
  // A sleep another thread must be able to end goes to poll() (with the wake's eventfd) unless
  // the waited connection's own sleep can be ended.
  if (fds_.empty() && waited != nullptr && (wake_ == nullptr || waited->sleep_wakeable())) {
    if (wake_ != nullptr) wake_->mark_sleep_on(*waited);
    waited->prepare_sleep();  // shared memory: a futex the peer rings
    return waited;
  }
  if (wake_ != nullptr) wake_->mark_poll(fds_);
  return nullptr;
}

void Waiter::sleep(transport::Connection* sleeper) {
  const int timeout_ms = engine_.deadline().remaining_ms(sleep_cap_ms_);
  if (sleeper != nullptr) {
    sleeper->sleep(timeout_ms);
  } else if (::poll(fds_.data(), fds_.size(), poll_waited_fd_ ? timeout_ms : 1) > 0) {
    begin();  // a connection without descriptors cannot wake poll: look again soon
  }
}

}  // namespace loom::algorithms
