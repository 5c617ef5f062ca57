// Cache-line round trip between two CPUs of this machine, the yardstick of where the scheduler has
// put the cores: two threads pinned to CPU 0 and CPU j hand a counter back and forth. On a virtual
// machine the host may run the vCPUs on cores that share a cache or on cores that do not, and move
// them while a job runs; every transfer between ranks then costs several times more.
// Prints "core_to_core,<worst pair's median round trip ns>,<best pair's>,<pairs>" for the pairs
// (0, j), j < min(CPUs, 8), each timed for about `ms` milliseconds in batches.
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

bool pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(0, sizeof set, &set) == 0;
}

// Median round trip in ns between CPU a and CPU b; negative when either cannot be pinned.
double round_trip_ns(int a, int b, double ms) {
  constexpr long kTrips = 2000;
  alignas(64) std::atomic<long> flag{0};
  std::atomic<bool> stop{false}, pinned{true};
  std::thread peer([&] {
    if (!pin(b)) pinned = false;
    for (long expect = 1;; expect += 2) {
      // Bounded: the main thread sets `stop` after its last batch, and every batch's trips
      // come from it.
      long seen;
      while ((seen = flag.load(std::memory_order_acquire)) != expect) {
        if (stop.load(std::memory_order_relaxed)) return;
      }
      flag.store(expect + 1, std::memory_order_release);
    }
  });
  std::vector<double> batches;
  if (pin(a) && pinned) {
    const auto end =
        std::chrono::steady_clock::now() + std::chrono::duration<double, std::milli>(ms);
    long value = 0;
    do {
      const auto t0 = std::chrono::steady_clock::now();
      for (long i = 0; i < kTrips; ++i) {
        flag.store(++value, std::memory_order_release);
        ++value;
        const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(1);
        while (flag.load(std::memory_order_acquire) != value) {
          if (std::chrono::steady_clock::now() > give_up) {  // the peer was never scheduled
            stop = true;
            peer.join();
            return -1;
          }
        }
      }
      batches.push_back(
          std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
          kTrips);
    } while (std::chrono::steady_clock::now() < end);
  }
  stop = true;
  peer.join();
  if (batches.empty() || !pinned) return -1;
  std::nth_element(batches.begin(), batches.begin() + batches.size() / 2, batches.end());
  return batches[batches.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const double ms = argc > 1 ? std::atof(argv[1]) : 20.0;
  const int cpus = std::min(8, static_cast<int>(std::thread::hardware_concurrency()));
  double worst = -1, best = -1;
  int pairs = 0;
  for (int j = 1; j < cpus; ++j) {
    const double ns = round_trip_ns(0, j, ms / std::max(1, cpus - 1));
    if (ns < 0) continue;
    worst = std::max(worst, ns);
    best = best < 0 ? ns : std::min(best, ns);
    ++pairs;
  }
  if (pairs == 0) {
    std::fprintf(stderr, "core_to_core: no pair of CPUs could be pinned\n");
    return 1;
  }
  std::printf("core_to_core,%.0f,%.0f,%d\n", worst, best, pairs);
  return 0;
}
