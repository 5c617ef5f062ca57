// The memory bound of an all-reduce at one size, measured: every rank must at least read its
// input and write its output, so one pass copies `ranks` inputs of `bytes` each into as many
// outputs, on as many threads as there are ranks and allowed CPUs (each thread pinned to its own
// CPU). The buffers are the ranks' footprint without any slots, and every pass touches all of
// them, as every call of a collective does, so the pass leaves the last-level cache where a call
// of that size leaves it. The passes copy in two ways, one after the other, each after a warm-up
// pass: memcpy (the C library's: through the cache, at least below its own non-temporal
// threshold) and non-temporal stores (past it, without reading each output line first); the bound
// is the faster way's median pass.
// Prints "copy_footprint,<ranks>,<bytes>,<threads>,<pass us>,<GB/s>,<memcpy us>,<streamed us>",
// GB/s being the bytes of one rank's input over the pass's time (comparable with an all-reduce's
// algbw).
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "cpus.hpp"

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace {

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};
using Bytes = std::unique_ptr<char, FreeDeleter>;

struct Buffer {
  Bytes in, out;
};

// The threads meet between passes without sleeping: a futex wake-up would cost more than a pass
// at the small sizes. There is a thread per CPU at most, and a spin yields the CPU after a while.
class SpinBarrier {
 public:
  explicit SpinBarrier(int threads) : threads_(threads) {}
  void arrive_and_wait() {
    const unsigned round = round_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == threads_) {
      arrived_.store(0, std::memory_order_relaxed);
      round_.store(round + 1, std::memory_order_release);
      return;
    }
    for (unsigned spins = 1; round_.load(std::memory_order_acquire) == round; ++spins) {
      if (spins % 4096 == 0) sched_yield();
#if defined(__x86_64__)
      _mm_pause();
#endif
    }
  }

 private:
  const int threads_;
  std::atomic<int> arrived_{0};
  std::atomic<unsigned> round_{0};
};

Bytes page_aligned(std::size_t bytes) {
  const std::size_t rounded = (bytes + 4095) / 4096 * 4096;
  auto* p = static_cast<char*>(std::aligned_alloc(4096, rounded));
  if (p == nullptr) {
    std::fprintf(stderr, "copy_footprint: out of memory for %zu bytes\n", rounded);
    std::exit(1);
  }
  return Bytes(p);
}

// Copies with stores that bypass the cache (both buffers page-aligned).
void copy_streamed(char* dst, const char* src, std::size_t bytes) {
#if defined(__x86_64__)
  std::size_t i = 0;
  for (; i + 64 <= bytes; i += 64) {
    const auto* s = reinterpret_cast<const __m128i*>(src + i);
    auto* d = reinterpret_cast<__m128i*>(dst + i);
    const __m128i a = _mm_load_si128(s), b = _mm_load_si128(s + 1), c = _mm_load_si128(s + 2),
                  e = _mm_load_si128(s + 3);
    _mm_stream_si128(d, a);
    _mm_stream_si128(d + 1, b);
    _mm_stream_si128(d + 2, c);
    _mm_stream_si128(d + 3, e);
  }
  std::memcpy(dst + i, src + i, bytes - i);
  _mm_sfence();
#else
  std::memcpy(dst, src, bytes);
#endif
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: copy_footprint RANKS BYTES [passes]\n");
    return 2;
  }
  const int ranks = std::atoi(argv[1]);
  const std::size_t bytes = std::strtoull(argv[2], nullptr, 10);
  if (ranks < 1 || bytes == 0) {
    std::fprintf(stderr, "copy_footprint: RANKS must be at least 1 and BYTES more than 0\n");
    return 2;
  }
  // About 512 MiB of copies each way by default, at least 5 passes, at most 400.
  const std::size_t per_pass = bytes * static_cast<std::size_t>(ranks);
  const int passes =
      argc > 3 ? std::max(1, std::atoi(argv[3]))
               : static_cast<int>(std::clamp<std::size_t>((512u << 20) / per_pass, 5, 400));
  const std::vector<int> cpus = bench::allowed_cpus();
  const int threads = std::max(1, std::min<int>(ranks, static_cast<int>(cpus.size())));

  std::vector<Buffer> buffers(static_cast<std::size_t>(ranks));
  for (auto& b : buffers) {
    b.in = page_aligned(bytes);
    b.out = page_aligned(bytes);
    std::memset(b.in.get(), 1, bytes);  // fault every page in, outside the timing
    std::memset(b.out.get(), 2, bytes);
  }
  std::vector<double> pass_us[2];  // [0] memcpy, [1] streamed
  SpinBarrier sync(threads);
  auto work = [&](int t) {
    for (int pass = -1; pass < 2 * passes + 1; ++pass) {  // passes -1 and `passes` warm up
      const bool streamed = pass >= passes;
      sync.arrive_and_wait();
      const auto t0 = std::chrono::steady_clock::now();
      for (int r = t; r < ranks; r += threads) {
        char* out = buffers[static_cast<std::size_t>(r)].out.get();
        const char* in = buffers[static_cast<std::size_t>(r)].in.get();
        if (streamed)
          copy_streamed(out, in, bytes);
        else
          std::memcpy(out, in, bytes);
      }
      sync.arrive_and_wait();
      if (t == 0 && pass >= 0 && pass != passes)
        pass_us[streamed].push_back(
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                .count());
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) {
    pool.emplace_back(work, t);
    if (!cpus.empty())
      bench::pin(pool.back().native_handle(), cpus[static_cast<std::size_t>(t) % cpus.size()]);
  }
  if (!cpus.empty()) bench::pin(pthread_self(), cpus[0]);
  work(0);
  for (auto& t : pool) t.join();
  double median[2];
  for (int way = 0; way < 2; ++way) {
    std::sort(pass_us[way].begin(), pass_us[way].end());
    median[way] = pass_us[way][pass_us[way].size() / 2];
  }
  const double best = std::min(median[0], median[1]);
  std::printf("copy_footprint,%d,%zu,%d,%.3f,%.3f,%.3f,%.3f\n", ranks, bytes, threads, best,
              static_cast<double>(bytes) / best / 1e3, median[0], median[1]);
  // Keeps the copies observable.
  return buffers[0].out.get()[bytes / 2] == 0 ? 1 : 0;
}
