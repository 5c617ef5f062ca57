// The CPUs this process may run on, and pinning a thread to one: the footprint drivers place
// their threads on the allowed CPUs in turn.
#pragma once

#include <pthread.h>
#include <sched.h>

#include <vector>

namespace bench {

inline std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

inline void pin(pthread_t thread, int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(thread, sizeof set, &set);  // best effort: unpinned still runs
}

}  // namespace bench
