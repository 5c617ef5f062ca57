// What loopback TCP carries at one all-reduce size with a collective's buffers: `ranks` threads in
// a ring of TCP connections over 127.0.0.1, each sending the bytes a ring all-reduce's rank sends
// (2(n-1)/n of its buffer) out of its input to the next and receiving as many from the previous
// into its output, all at once. The input and output are a rank's buffers at that size, read and
// written in order (wrapping around; page-aligned, see Buffer), so the copies through the kernel
// leave the caches where a call of that size leaves them, with the socket buffers besides;
// nothing is reduced, and every
// write and read is as large as the kernel takes. No collective over loopback moves those bytes
// faster, so where this falls from one size to the next, the ranks' buffers have left a cache and
// any collective over loopback TCP falls there too. The kernel sizes the socket buffers itself,
// unless SOCKBUF gives both their size (SO_SNDBUF and SO_RCVBUF, set as LOOM_SOCKBUF sets them).
// Threads are pinned to the allowed CPUs in turn and meet between passes; a pass's time is its
// slowest thread's, and the figure is the median pass.
// Prints "loopback_footprint,<ranks>,<bytes>,<threads>,<pass us>,<GB/s>", GB/s as an
// all-reduce's busbw for a call that took one pass.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "cpus.hpp"

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "loopback_footprint: %s: %s\n", what, std::strerror(errno));
  std::exit(1);
}

// Both socket buffers at `sockbuf` bytes (0: the kernel sizes them); before listen or connect,
// as tcp(7) asks and as the TCP transport does. The kernel caps them at rmem_max and wmem_max.
void size_buffers(int fd, int sockbuf) {
  if (sockbuf > 0 && (::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sockbuf, sizeof sockbuf) != 0 ||
                      ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sockbuf, sizeof sockbuf) != 0))
    die("setsockopt");
}

// A listening socket on 127.0.0.1 at a port the kernel picks; accepted sockets inherit its
// buffer sizes.
int listen_any(sockaddr_in& addr, int sockbuf) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) die("socket");
  size_buffers(fd, sockbuf);
  addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, 4) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    die("listen");
  return fd;
}

void tune(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (::fcntl(fd, F_SETFL, O_NONBLOCK) != 0) die("fcntl");
}

// A rank's buffer, page-aligned. The kernel copies into and out of its socket pages with `rep
// movsb`, which an AMD Zen 3 runs 2.5x slower wherever the destination lies 1-31 bytes past the
// source within a page; those pages start on a page, so heap buffers 16 bytes into one made every
// receive copy slow there (2 ranks at 2 MiB: 2.2-2.9 ms a pass, page-aligned 0.8-1.5 ms). Loom's
// TCP frames keep their copies in step the same way (transports/tcp/tcp_connection.hpp).
struct Buffer {
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  std::unique_ptr<char[], Free> bytes;
  std::size_t length = 0;
  void assign(std::size_t n, char fill) {
    bytes.reset(static_cast<char*>(std::aligned_alloc(4096, (n + 4095) / 4096 * 4096)));
    if (!bytes) die("aligned_alloc");
    length = n;
    std::memset(bytes.get(), fill, n);
  }
  char* data() { return bytes.get(); }
  std::size_t size() const { return length; }
};

struct Rank {
  int to = -1, from = -1;  // sockets to the next rank and from the previous
  Buffer in, out;
};

// One pass: `volume` bytes out of `in` to the next rank and as many from the previous into `out`,
// both buffers in order from where the last pass stopped.
void pass(Rank& r, std::size_t volume, std::size_t& sent_at, std::size_t& received_at) {
  const std::size_t size = r.in.size();
  std::size_t to_send = volume, to_receive = volume;
  while (to_send > 0 || to_receive > 0) {
    pollfd fds[2] = {{r.to, static_cast<short>(to_send > 0 ? POLLOUT : 0), 0},
                     {r.from, static_cast<short>(to_receive > 0 ? POLLIN : 0), 0}};
    if (::poll(fds, 2, 10000) <= 0) die("poll (a peer stalled)");
    if (to_send > 0 && (fds[0].revents & POLLOUT)) {
      const std::size_t n = std::min(to_send, size - sent_at);
      const ssize_t got = ::send(r.to, r.in.data() + sent_at, n, MSG_NOSIGNAL);
      if (got < 0 && errno != EAGAIN && errno != EINTR) die("send");
      if (got > 0) {
        to_send -= static_cast<std::size_t>(got);
        sent_at = (sent_at + static_cast<std::size_t>(got)) % size;
      }
    }
    if (to_receive > 0 && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) {
      const std::size_t n = std::min(to_receive, size - received_at);
      const ssize_t got = ::recv(r.from, r.out.data() + received_at, n, 0);
      if (got == 0) die("recv (end of stream)");
      if (got < 0 && errno != EAGAIN && errno != EINTR) die("recv");
      if (got > 0) {
        to_receive -= static_cast<std::size_t>(got);
        received_at = (received_at + static_cast<std::size_t>(got)) % size;
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: loopback_footprint RANKS BYTES [SOCKBUF]\n");
    return 2;
  }
  const int ranks = std::atoi(argv[1]);
  const std::size_t bytes = std::strtoull(argv[2], nullptr, 10);
  const int sockbuf = argc > 3 ? std::atoi(argv[3]) : 0;
  if (ranks < 2 || bytes == 0 || sockbuf < 0) {
    std::fprintf(stderr,
                 "loopback_footprint: RANKS must be at least 2, BYTES above 0, SOCKBUF not "
                 "negative\n");
    return 2;
  }
  const std::size_t volume =
      bytes * 2 * static_cast<std::size_t>(ranks - 1) / static_cast<std::size_t>(ranks);
  std::vector<Rank> rank(static_cast<std::size_t>(ranks));
  // The ring: rank r connects to rank r+1's listener.
  std::vector<int> listeners(rank.size());
  std::vector<sockaddr_in> addresses(rank.size());
  for (std::size_t r = 0; r < rank.size(); ++r) listeners[r] = listen_any(addresses[r], sockbuf);
  for (std::size_t r = 0; r < rank.size(); ++r) {
    const std::size_t next = (r + 1) % rank.size();
    rank[r].to = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (rank[r].to >= 0) size_buffers(rank[r].to, sockbuf);
    if (rank[r].to < 0 || ::connect(rank[r].to, reinterpret_cast<sockaddr*>(&addresses[next]),
                                    sizeof addresses[next]) != 0)
      die("connect");
    rank[next].from = ::accept4(listeners[next], nullptr, nullptr, SOCK_CLOEXEC);
    if (rank[next].from < 0) die("accept");
  }
  for (int fd : listeners) ::close(fd);
  for (Rank& r : rank) {
    tune(r.to), tune(r.from);
    r.in.assign(bytes, 1), r.out.assign(bytes, 0);
  }
  const std::vector<int> cpus = bench::allowed_cpus();
  // At least 5 timed passes and about 0.3 s, at most 400; 2 warm-up passes first.
  constexpr int kWarmup = 2, kLeast = 5, kMost = 400;
  constexpr auto kBudget = std::chrono::milliseconds(300);
  std::vector<std::vector<double>> took(rank.size());
  std::atomic<bool> enough{false};
  const auto started = Clock::now();
  std::barrier meet(ranks);
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < rank.size(); ++r)
    threads.emplace_back([&, r] {
      if (!cpus.empty()) bench::pin(pthread_self(), cpus[r % cpus.size()]);
      std::size_t sent_at = 0, received_at = 0;
      for (int p = 0;; ++p) {
        meet.arrive_and_wait();
        // Rank 0 decides after each pass; every thread reads it after the next meeting.
        if (enough.load()) return;
        const auto t0 = Clock::now();
        pass(rank[r], volume, sent_at, received_at);
        if (p >= kWarmup)
          took[r].push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
        meet.arrive_and_wait();
        if (r == 0) {
          const int timed = p + 1 - kWarmup;
          enough = timed >= kMost || (timed >= kLeast && Clock::now() - started > kBudget);
        }
      }
    });
  for (std::thread& t : threads) t.join();
  std::vector<double> slowest(took[0].size(), 0.0);
  for (const auto& t : took)
    for (std::size_t p = 0; p < slowest.size(); ++p) slowest[p] = std::max(slowest[p], t[p]);
  std::nth_element(slowest.begin(), slowest.begin() + slowest.size() / 2, slowest.end());
  const double median = slowest[slowest.size() / 2];
  std::printf("loopback_footprint,%d,%zu,%d,%.1f,%.3f\n", ranks, bytes, ranks, median,
              static_cast<double>(volume) / median / 1e3);
  for (Rank& r : rank) ::close(r.to), ::close(r.from);
  return 0;
}
