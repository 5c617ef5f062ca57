// The transports the multi-process tests run over, as LOOM_TRANSPORT names them: written here
// once, for loops (kTransports) and for parameterized suites (transports(), which converts to
// each suite's parameter type as ::testing::Values does).
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <utility>

namespace loom::testing {

inline constexpr std::array<const char*, 2> kTransports = {"tcp", "shm"};

namespace detail {
template <typename... Extra, std::size_t... I>
auto transport_values(std::index_sequence<I...>, Extra... extra) {
  return ::testing::Values(kTransports[I]..., extra...);
}
}  // namespace detail

inline auto transports() {
  return detail::transport_values(std::make_index_sequence<kTransports.size()>{});
}
// ... and "auto", the library's own choice (shared memory within a host, TCP between hosts).
inline auto transports_and_auto() {
  return detail::transport_values(std::make_index_sequence<kTransports.size()>{}, "auto");
}

}  // namespace loom::testing
