#include "algorithms/machine_rates.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <utility>

#include <fmt/format.h>

namespace loom::algorithms {

namespace {

// The rates in the order encode() writes them, with their names.
constexpr std::array<std::pair<const char*, double MachineRates::*>, 12> kRateFields = {{
    {"copy_gbps", &MachineRates::copy_gbps},
    {"reduce_gbps", &MachineRates::reduce_gbps},
    {"handover_us", &MachineRates::handover_us},
    {"wake_us", &MachineRates::wake_us},
    {"loopback_us", &MachineRates::loopback_us},
    {"loopback_gbps", &MachineRates::loopback_gbps},
    {"slice_us", &MachineRates::slice_us},
    {"pipe_gbps", &MachineRates::pipe_gbps},
    {"core_cache_kib", &MachineRates::core_cache_kib},
    {"segment_bytes", &MachineRates::segment_bytes},
    {"cma_gbps", &MachineRates::cma_gbps},
    {"cma_fresh_gbps", &MachineRates::cma_fresh_gbps},
}};

// Rates are better larger, times smaller; 0 is "not measured" and loses to any figure.
bool is_time(double MachineRates::*field) {
  return field == &MachineRates::handover_us || field == &MachineRates::wake_us ||
         field == &MachineRates::loopback_us || field == &MachineRates::slice_us;
}
MachineRates pick(const MachineRates& a, const MachineRates& b, bool better) {
  MachineRates r;
  for (const auto& [name, field] : kRateFields) {
    const double x = a.*field, y = b.*field;
    if (x <= 0 || y <= 0) {
      r.*field = std::max(x, y);
      continue;
    }
    const bool x_better = is_time(field) ? x < y : x > y;
    r.*field = x_better == better ? x : y;
  }
  return r;
}

}  // namespace

std::string MachineRates::encode() const {
  std::string out;
  for (const auto& [name, field] : kRateFields)
    out += fmt::format("{}{}={:.6g}", out.empty() ? "" : " ", name, this->*field);
  return out;
}

MachineRates MachineRates::decode(std::string_view text) {
  MachineRates r;
  while (!text.empty()) {
    const auto space = text.find(' ');
    const std::string_view item = text.substr(0, space);
    text = space == std::string_view::npos ? std::string_view{} : text.substr(space + 1);
    const auto eq = item.find('=');
    if (eq == std::string_view::npos) continue;
    for (const auto& [name, field] : kRateFields) {
      if (item.substr(0, eq) != name) continue;
      const std::string value(item.substr(eq + 1));
      char* end = nullptr;
      const double v = std::strtod(value.c_str(), &end);
      if (end != value.c_str() && *end == '\0' && std::isfinite(v) && v > 0) r.*field = v;
    }
  }
  return r;
}

MachineRates MachineRates::better(const MachineRates& a, const MachineRates& b) {
  return pick(a, b, true);
}
MachineRates MachineRates::worse(const MachineRates& a, const MachineRates& b) {
  return pick(a, b, false);
}

}  // namespace loom::algorithms
