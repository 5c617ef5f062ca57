// The timing method every driver of the comparison applies (loom-perf, Gloo, OpenMPI; the PyTorch
// driver mirrors it): warm-up calls, then each rank times every call on its own with a steady
// clock, no barrier anywhere in the loop; rank 0 gathers the per-call arrays, a call's time is its
// slowest rank's, and the figure is the median over calls.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <limits>
#include <utility>
#include <vector>

namespace bench {

// Runs call() `warmup` times untimed, then `iters` times, and returns each timed call's duration.
// before() runs ahead of every call, untimed (fresh inputs: rewrite_lines).
template <typename Call, typename Before>
std::vector<double> time_each_call_us(int warmup, int iters, Call call, Before before) {
  using Clock = std::chrono::steady_clock;
  for (int i = 0; i < warmup; ++i) {
    before();
    call();
  }
  std::vector<double> us(static_cast<std::size_t>(std::max(iters, 1)));
  for (double& t : us) {
    before();
    const auto t0 = Clock::now();
    call();
    t = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  }
  return us;
}

template <typename Call>
std::vector<double> time_each_call_us(int warmup, int iters, Call call) {
  return time_each_call_us(warmup, iters, call, [] {});
}

// Writes every cache line of [data, data + bytes) with the value it holds, as a training step
// writes its gradients before their all-reduce: the lines are then modified in this core's
// cache, and a peer that reads them in place pulls them across. Without it, a benchmark's input
// stays unchanged from call to call, and a peer's reads of it may hit its own cached copy.
inline void rewrite_lines(void* data, std::size_t bytes) {
  auto* p = static_cast<volatile unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; i += 64) p[i] = p[i];
  if (bytes > 0) p[bytes - 1] = p[bytes - 1];
}

// The median of `values` (NaN when there are none).
inline double median(std::vector<double> values) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(values.begin(), values.end());
  const std::size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

// `all` holds every rank's per-call durations, rank after rank: the median over calls of each
// call's slowest rank.
inline double median_of_slowest(const std::vector<double>& all, int ranks) {
  const std::size_t calls = all.size() / static_cast<std::size_t>(ranks);
  std::vector<double> slowest(calls, 0.0);
  for (std::size_t r = 0; r < static_cast<std::size_t>(ranks); ++r)
    for (std::size_t i = 0; i < calls; ++i) slowest[i] = std::max(slowest[i], all[r * calls + i]);
  return slowest.empty() ? 0 : median(std::move(slowest));
}

// nccl-tests' bus bandwidth in GB/s of `bytes` (the whole buffer) moved in `us`.
inline double busbw_gbps(double bytes, double us, double factor) {
  return us > 0 ? bytes / (us * 1e-6) / 1e9 * factor : 0;
}

}  // namespace bench
