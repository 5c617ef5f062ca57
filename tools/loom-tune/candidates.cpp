#include "candidates.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "algorithms/algorithm_table.hpp"
#include "algorithms/rules.hpp"
#include "bench/compare/per_op.hpp"

namespace tune {

// "256K", "64M", or bytes.
std::string size_text(std::size_t bytes) {
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return fmt::format("{}M", bytes >> 20);
  if (bytes >= 1024 && bytes % 1024 == 0) return fmt::format("{}K", bytes >> 10);
  return fmt::format("{}", bytes);
}

std::string Candidate::rule(Kind k) const {
  if (algorithm.empty()) return {};
  if (slice == 0) return fmt::format("{}:{}", loom::algorithms::rule_name(k), algorithm);
  return fmt::format("{}:{}@{}", loom::algorithms::rule_name(k), algorithm, size_text(slice));
}

std::string Candidate::name() const {
  if (algorithm.empty()) return "model";
  return slice ? fmt::format("{}@{}", algorithm, size_text(slice)) : algorithm;
}

std::vector<Candidate> candidates_of(Kind k, std::size_t slot_bytes) {
  std::vector<Candidate> out{Candidate{}};
  for (const auto& a : loom::algorithms::algorithm_table()) {
    // The in-place rows need shared windows, which the table's rules never choose for.
    if (a.collective != k || a.traits.needs_windows) continue;
    if (!a.traits.any_slice) {
      out.push_back(Candidate{std::string(a.name), 0});
      continue;
    }
    for (std::size_t s = 16 << 10; s <= slot_bytes; s *= 2)
      out.push_back(Candidate{std::string(a.name), s});
  }
  return out;
}

loom::Operation operation_of(Kind k) {
  return static_cast<loom::Operation>(k);
}

std::optional<double> Timer::time(loom::Communicator& comm, const Candidate& c, Kind k,
                                  std::size_t bytes) {
  const loom::Estimate e = comm.estimate(operation_of(k), bytes);
  if (!c.algorithm.empty() && !e.forced) return std::nullopt;
  const std::size_t count = bytes / 4;
  const auto n = static_cast<std::size_t>(comm.size());
  const std::size_t in_bytes = k == Kind::reduce_scatter ? n * bytes : bytes;
  const std::size_t out_bytes = k == Kind::all_gather ? n * bytes : bytes;
  if (in_.size() < in_bytes) in_.assign(in_bytes, 0);
  if (out_.size() < out_bytes) out_.assign(out_bytes, 0);
  auto call = [&] {
    using loom::DataType, loom::ReduceOp;
    switch (k) {
      case Kind::all_reduce:
        comm.all_reduce(in_.data(), out_.data(), count, DataType::f32, ReduceOp::sum);
        break;
      case Kind::reduce_scatter:
        comm.reduce_scatter(in_.data(), out_.data(), count, DataType::f32, ReduceOp::sum);
        break;
      case Kind::all_gather:
        comm.all_gather(in_.data(), out_.data(), count, DataType::f32);
        break;
      case Kind::broadcast:
        comm.broadcast(in_.data(), out_.data(), count, DataType::f32, 0);
        break;
      case Kind::reduce:
        comm.reduce(in_.data(), out_.data(), count, DataType::f32, ReduceOp::sum, 0);
        break;
      default:
        break;
    }
  };
  // Calls enough to fill the cell's time, from the slowest rank's first call (every rank
  // derives the same count from the same figure).
  double first = bench::time_each_call_us(1, 1, call)[0];
  base_.all_reduce(&first, 1, loom::DataType::f64, loom::ReduceOp::max);
  const int iters =
      static_cast<int>(std::clamp(args_.cell_ms * 1000.0 / std::max(first, 1.0), 3.0, 200.0));
  std::vector<double> mine = bench::time_each_call_us(1, iters, call);
  std::vector<double> all(mine.size() * n);
  base_.all_gather(mine.data(), all.data(), mine.size(), loom::DataType::f64);
  return bench::median_of_slowest(all, comm.size());
}

}  // namespace tune
