// Which algorithm runs a call. All-reduce has two, chosen by an alpha-beta cost model:
//
//   ring               2(n-1) steps,             moves 2(n-1)/n of the buffer per rank
//   recursive_doubling ceil(log2 n) (+2) steps,  moves the whole buffer at every step
//
// time = steps * alpha + bytes_moved * beta, with alpha the cost of one hop (a TCP message on
// loopback: tens of microseconds here, dominated by wake-ups) and beta the inverse of one
// link's bandwidth. LOOM_ALGO=ring|recursive_doubling overrides the choice. The other
// collectives have one algorithm each.
#include <cmath>
#include <mutex>
#include <set>

#include <fmt/format.h>

#include "algorithms/algorithms.hpp"
#include "core/logging.hpp"

namespace loom::algorithms {

namespace {

struct CostModel {
  double alpha_us = 30.0;                  // one hop
  double beta_us_per_byte = 1.0 / 1500.0;  // 1.5 GB/s per link
};

double ring_cost(const CostModel& m, int n, double bytes) {
  return 2.0 * (n - 1) * m.alpha_us + 2.0 * (n - 1) / n * bytes * m.beta_us_per_byte;
}

double recursive_doubling_cost(const CostModel& m, int n, double bytes) {
  int p = 1, steps = 0;
  while (p * 2 <= n) p *= 2, ++steps;
  if (p != n) steps += 2;
  return steps * (m.alpha_us + bytes * m.beta_us_per_byte);
}

// Logs each (op, algorithm, size class) choice once, so INFO shows what ran without flooding.
void log_choice(const Collective& call, const char* algorithm, double ring_us, double rd_us) {
  static std::mutex mu;
  static std::set<std::tuple<int, std::string, int>> seen;
  const std::size_t bytes = call.count * size_of(call.dtype);
  const int size_class = bytes == 0 ? 0 : static_cast<int>(std::log2(static_cast<double>(bytes)));
  std::lock_guard lock(mu);
  if (seen.emplace(static_cast<int>(call.kind), algorithm, size_class).second)
    core::log().info("{}: {} for {} B (~2^{}); model: ring {:.0f} us, recursive_doubling {:.0f} us",
                     to_string(call.kind), algorithm, bytes, size_class, ring_us, rd_us);
}

void choose_all_reduce(Engine& engine, const Collective& call) {
  const std::string& forced = engine.config().algorithm;
  const int n = engine.size();
  const double bytes = static_cast<double>(call.count * size_of(call.dtype));
  CostModel model;
  const double ring_us = ring_cost(model, n, bytes);
  const double rd_us = recursive_doubling_cost(model, n, bytes);
  // Connections are made on first use, so nothing here may open one the algorithm won't use.
  const bool rd_fits =
      n > 1 && bytes <= static_cast<double>(recursive_doubling_max_bytes(engine.config()));
  bool use_rd;
  if (forced.empty()) {
    use_rd = rd_fits && rd_us < ring_us;
  } else if (forced == "ring") {
    use_rd = false;
  } else if (forced == "recursive_doubling") {
    use_rd = rd_fits;  // beyond its size limit the ring runs regardless
  } else {
    throw InvalidArgument(
        fmt::format("{}: LOOM_ALGO={} is not an all-reduce algorithm (ring, recursive_doubling)",
                    call.describe(), forced));
  }
  log_choice(call, use_rd ? "recursive_doubling" : "ring", ring_us, rd_us);
  if (use_rd)
    recursive_doubling_all_reduce(engine, call);
  else
    ring_all_reduce(engine, call);
}

}  // namespace

void select_and_run(Engine& engine, const Collective& call) {
  switch (call.kind) {
    case Kind::all_reduce:
      return choose_all_reduce(engine, call);
    case Kind::reduce_scatter:
      return ring_reduce_scatter(engine, call);
    case Kind::all_gather:
      return ring_all_gather(engine, call);
    case Kind::broadcast:
      return pipelined_broadcast(engine, call);
    case Kind::reduce:
      return pipelined_reduce(engine, call);
    case Kind::barrier:
      return dissemination_barrier(engine, call);
    case Kind::send:
    case Kind::recv:
      return point_to_point(engine, call);
  }
  throw InvalidArgument(fmt::format("{}: no algorithm for this call", call.describe()));
}

}  // namespace loom::algorithms
