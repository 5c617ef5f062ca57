#include "static_attempts.hpp"

#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "store/keys.hpp"

namespace loomrun {
namespace {

namespace keys = loom::store::keys;

// Node 0's store may come up after this node's loomrun: its connection is retried this long.
constexpr auto kConnectWait = std::chrono::seconds(60);
constexpr auto kRequestWait = std::chrono::seconds(10);

loom::Bytes bytes(int attempt) {
  const std::string text = std::to_string(attempt);
  return loom::Bytes(text.begin(), text.end());
}

int number(const loom::Bytes& value) {
  const std::string text(value.begin(), value.end());
  try {
    std::size_t end = 0;
    const int n = std::stoi(text, &end);
    if (end == text.size() && n >= 0) return n;
  } catch (const std::exception&) {
  }
  throw loom::StoreError(
      fmt::format("loomrun: the store's attempt number '{}' is not a count", text));
}

}  // namespace

StaticAttempts::StaticAttempts(const std::string& host, std::uint16_t port)
    : store_(
          std::make_shared<loom::TcpStore>(host, port, kConnectWait, std::nullopt, kRequestWait)) {}

int StaticAttempts::read() {
  return number(store_->compare_set(keys::launcher_attempt(), {}, bytes(0)));
}

int StaticAttempts::first() {
  return read();
}

int StaticAttempts::after(int failed) {
  // Raised to failed + 1 unless it stands there or past it already: no node goes back.
  for (int standing = read();;) {
    if (standing > failed) return standing;
    const int now =
        number(store_->compare_set(keys::launcher_attempt(), bytes(standing), bytes(failed + 1)));
    if (now == failed + 1) return now;
    standing = now;
  }
}

bool StaticAttempts::passed(int attempt, std::chrono::milliseconds interval) {
  const auto now = std::chrono::steady_clock::now();
  if (now < next_look_) return false;
  next_look_ = now + interval;
  try {
    return read() > attempt;
  } catch (const loom::Error&) {  // node 0 gone or slow: this node's workers find out themselves
    return false;
  }
}

}  // namespace loomrun
