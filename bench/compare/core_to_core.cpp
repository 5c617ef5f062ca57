// Cache-line round trip between two CPUs of this machine, the yardstick of where the scheduler has
// put the cores: two threads pinned to CPU 0 and CPU j hand a counter back and forth. On a virtual
// machine the host may run the vCPUs on cores that share a cache or on cores that do not, and move
// them while a job runs; every transfer between ranks then costs several times more.
// Prints "core_to_core,<worst pair's median round trip ns>,<best pair's>,<pairs>" for the pairs of
// the first allowed CPU with each of up to 7 others, timed for about `ms` milliseconds in all.
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

bool pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(0, sizeof set, &set) == 0;
}

void relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Median round trip in ns between CPU a and CPU b; negative when either cannot be pinned or the
// peer never answers. The spins read the clock once in 1024 turns, so that it stays out of the
// trips it times.
double round_trip_ns(int a, int b, double ms) {
  constexpr long kTrips = 2000;
  alignas(64) std::atomic<long> flag{0};
  std::atomic<bool> stop{false}, pinned{true};
  std::thread peer([&] {
    if (!pin(b)) pinned = false;
    for (long expect = 1;; expect += 2) {
      // Bounded: the main thread sets `stop` once it is done or gives up.
      for (unsigned spins = 1; flag.load(std::memory_order_acquire) != expect; ++spins) {
        if (spins % 1024 == 0 && stop.load(std::memory_order_relaxed)) return;
        relax();
      }
      flag.store(expect + 1, std::memory_order_release);
    }
  });
  std::vector<double> batches;
  bool answered = true;
  if (pin(a)) {
    const auto end =
        std::chrono::steady_clock::now() + std::chrono::duration<double, std::milli>(ms);
    long value = 0;
    do {
      const auto t0 = std::chrono::steady_clock::now();
      const auto give_up = t0 + std::chrono::seconds(1);  // the peer was never scheduled
      for (long i = 0; i < kTrips && answered; ++i) {
        flag.store(++value, std::memory_order_release);
        ++value;
        for (unsigned spins = 1; flag.load(std::memory_order_acquire) != value; ++spins) {
          if (spins % 1024 == 0 && std::chrono::steady_clock::now() > give_up) {
            answered = false;
            break;
          }
          relax();
        }
      }
      if (answered)
        batches.push_back(
            std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0)
                .count() /
            kTrips);
    } while (answered && std::chrono::steady_clock::now() < end);
  }
  stop = true;
  peer.join();
  if (batches.empty() || !pinned || !answered) return -1;
  std::nth_element(batches.begin(), batches.begin() + batches.size() / 2, batches.end());
  return batches[batches.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const double ms = argc > 1 ? std::atof(argv[1]) : 20.0;
  // The CPUs this process may use: the first, and up to 7 others.
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) {
    std::fprintf(stderr, "core_to_core: sched_getaffinity: %s\n", std::strerror(errno));
    return 1;
  }
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE && cpus.size() < 8; ++c)
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  double worst = -1, best = -1;
  int pairs = 0;
  for (std::size_t j = 1; j < cpus.size(); ++j) {
    const double ns = round_trip_ns(
        cpus[0], cpus[j], ms / static_cast<double>(std::max<std::size_t>(1, cpus.size() - 1)));
    if (ns < 0) continue;
    worst = std::max(worst, ns);
    best = best < 0 ? ns : std::min(best, ns);
    ++pairs;
  }
  if (pairs == 0) {
    std::fprintf(stderr, "core_to_core: no pair of CPUs could be pinned and answer (%zu allowed)\n",
                 cpus.size());
    return 1;
  }
  std::printf("core_to_core,%.0f,%.0f,%d\n", worst, best, pairs);
  return 0;
}
