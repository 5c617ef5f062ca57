// A warning that may repeat at a stranger's will (a flood of bad handshakes, a run of accept
// errors) is logged at most once per interval; the next line says how many were left out.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include <fmt/format.h>

#include "base/logging.hpp"

namespace loom::store {

class RateLimitedLog {
 public:
  explicit RateLimitedLog(std::chrono::milliseconds interval = std::chrono::seconds(1))
      : interval_(interval) {}

  template <typename... Args>
  void warn(fmt::format_string<Args...> format, Args&&... args) {
    const auto now = std::chrono::steady_clock::now();
    if (now < next_) {
      ++left_out_;
      return;
    }
    next_ = now + interval_;
    std::string line = fmt::format(format, std::forward<Args>(args)...);
    if (left_out_ > 0)
      line += fmt::format(" ({} more like it since the last such line)", left_out_);
    left_out_ = 0;
    base::log().warn("{}", line);
  }

 private:
  std::chrono::milliseconds interval_;
  std::chrono::steady_clock::time_point next_{};
  std::uint64_t left_out_ = 0;
};

}  // namespace loom::store
