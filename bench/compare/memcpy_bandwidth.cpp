// Single-thread memcpy bandwidth of this machine (bytes copied per second, one direction), the
// yardstick for shared-memory collectives: prints "memcpy,<bytes>,<GB/s>".
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

int main(int argc, char** argv) {
  const std::size_t bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : (64u << 20);
  const int iters = argc > 2 ? std::atoi(argv[2]) : 20;
  std::vector<char> a(bytes, 1), b(bytes, 2);
  std::memcpy(b.data(), a.data(), bytes);  // fault the pages in
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i)
    std::memcpy(i % 2 ? a.data() : b.data(), i % 2 ? b.data() : a.data(), bytes);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("memcpy,%zu,%.3f\n", bytes, static_cast<double>(bytes) * iters / s / 1e9);
  return a[bytes / 2] + b[bytes / 3] == 0;  // keeps the copies observable
}
