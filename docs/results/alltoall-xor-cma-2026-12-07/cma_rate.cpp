#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
int main(int argc, char** argv) {
  size_t bytes = strtoull(argv[1], 0, 0);
  int huge = atoi(argv[2]);
  size_t al = 2 << 20;
  char* src = (char*)aligned_alloc(al, (bytes + al - 1) / al * al);
  char* dst = (char*)aligned_alloc(al, (bytes + al - 1) / al * al);
  if (huge) {
    madvise(src, (bytes + al - 1) / al * al, MADV_HUGEPAGE);
    madvise(dst, (bytes + al - 1) / al * al, MADV_HUGEPAGE);
  }
  memset(src, 1, bytes);
  memset(dst, 0, bytes);
  int p[2];
  pipe(p);
  pid_t child = fork();
  if (child == 0) {
    memset(src, 2, bytes);
    char c;
    read(p[0], &c, 1);
    _exit(0);
  }  // child writes: own copy (no COW sharing)
  usleep(200000);
  auto t = [&](auto f) {
    std::vector<double> v;
    for (int i = 0; i < 50; i++) {
      auto a = std::chrono::steady_clock::now();
      f();
      auto b = std::chrono::steady_clock::now();
      v.push_back(std::chrono::duration<double, std::micro>(b - a).count());
    }
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  double m = t([&] {
    memcpy(dst, src, bytes);
    asm volatile("" ::"r"(dst) : "memory");
  });
  double c = t([&] {
    iovec l{dst, bytes}, r{src, bytes};
    if (process_vm_readv(child, &l, 1, &r, 1, 0) != (ssize_t)bytes) perror("cma");
  });
  printf("%zu bytes huge=%d: memcpy %.1f us (%.1f GB/s)  cma %.1f us (%.1f GB/s) dst[0]=%d\n",
         bytes, huge, m, bytes / m / 1e3, c, bytes / c / 1e3, dst[0]);
  write(p[1], "x", 1);
  wait(0);
}
