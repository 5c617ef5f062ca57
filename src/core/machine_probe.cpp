#include "core/machine_probe.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/cpu_relax.hpp"
#include "base/deadline.hpp"
#include "base/futex.hpp"
#include "base/socket_io.hpp"
#include "base/tcp_connect.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "store/listen_socket.hpp"

namespace loom::core {
namespace {

using Clock = std::chrono::steady_clock;
using Micros = std::chrono::duration<double, std::micro>;

// Runs `one` (which returns the bytes or round trips it did) until `budget` is spent, at least
// `least` times; returns the best rate seen (units per microsecond). The best, not the mean: the
// other ranks of this host probe at the same time, and the least disturbed run is the machine's.
template <typename F>
double best_rate(std::chrono::microseconds budget, int least, F&& one) {
  const auto end = Clock::now() + budget;
  double best = 0;
  for (int i = 0; i < least || Clock::now() < end; ++i) {
    const auto t0 = Clock::now();
    const double units = one();
    const double us = Micros(Clock::now() - t0).count();
    if (units <= 0) return 0;
    best = std::max(best, units / std::max(us, 1e-3));
    if (i >= 1000) break;
  }
  return best;
}

// The compiler must assume `p`'s memory is read: a copy nobody reads is not left out.
inline void keep(const void* p) {
  asm volatile("" : : "r"(p) : "memory");
}

constexpr std::size_t kProbeBytes = std::size_t{1} << 20;  // reductions and loopback
// The copies of a call run from the user's buffers, larger than a core's own cache, into slots
// that the peer reads: the shared cache's rate, not the core's.
constexpr std::size_t kCopyBytes = std::size_t{4} << 20;

double copy_gbps(std::chrono::microseconds budget) {
  std::vector<char> a(kCopyBytes, 1), b(kCopyBytes, 2);
  const double per_us = best_rate(budget, 3, [&] {
    std::memcpy(b.data(), a.data(), kCopyBytes);
    keep(b.data());
    return static_cast<double>(kCopyBytes);
  });
  return per_us / 1e3;
}

double reduce_gbps(std::chrono::microseconds budget) {
  const std::size_t n = kProbeBytes / sizeof(float);
  std::vector<float> a(n, 1.0f), b(n, 0.0f);
  const double per_us = best_rate(budget, 3, [&] {
    kernels::reduce(a.data(), a.data(), b.data(), n, DataType::f32, ReduceOp::sum);
    keep(a.data());
    return static_cast<double>(kProbeBytes);
  });
  return per_us / 1e3;
}

// Two threads passing a counter back and forth; one way is half a round trip. `sleeping`: the
// waiter blocks on a futex, as a rank does once its spin window runs out, so each pass pays a
// wake-up; else both spin, as ranks with a core each do.
double handover_us(std::chrono::microseconds budget, bool sleeping) {
  struct alignas(64) Word {
    std::atomic<std::uint32_t> value{0};
  };
  Word ping, pong;
  std::atomic<bool> stop{false};
  const auto give_up = Clock::now() + budget + std::chrono::milliseconds(50);
  auto wait_for = [&](Word& w, std::uint32_t v) {
    for (unsigned spins = 0;; ++spins) {
      const std::uint32_t seen = w.value.load(std::memory_order_acquire);
      if (seen == v) return true;
      // A sleeper looks every time: each of its rounds may have slept (a spinner every 64th).
      if ((sleeping || spins % 64 == 0) &&
          (stop.load(std::memory_order_relaxed) || Clock::now() > give_up))
        return false;
      if (sleeping)
        base::futex_wait(w.value, seen, 5);
      else if (spins % 1024 == 1023)
        sched_yield();  // a peer without a core of its own gets one
      else
        base::cpu_relax();
    }
  };
  auto pass = [&](Word& w, std::uint32_t v) {
    w.value.store(v, std::memory_order_release);
    if (sleeping) base::futex_wake_all(w.value);
  };
  std::thread echo;
  try {
    echo = std::thread([&] {
      for (std::uint32_t v = 1; wait_for(ping, v); ++v) pass(pong, v);
    });
  } catch (const std::system_error&) {
    return 0;
  }
  std::uint32_t next = 1;
  const double trips_per_us = best_rate(budget / 4, 2, [&] {
    constexpr int kTrips = 8;
    for (int i = 0; i < kTrips; ++i, ++next) {
      pass(ping, next);
      if (!wait_for(pong, next)) return 0.0;
    }
    return static_cast<double>(kTrips);
  });
  stop.store(true);
  pass(ping, 0);
  echo.join();
  return trips_per_us > 0 ? 0.5 / trips_per_us : 0;
}

// One TCP connection over loopback: the one-way latency of 8 bytes and one stream's rate.
struct Loopback {
  double latency_us = 0;
  double gbps = 0;
};

// Closes its descriptor.
class Socket {
 public:
  explicit Socket(int fd = -1) : fd_(fd) {}
  Socket(Socket&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  int fd() const { return fd_; }

 private:
  int fd_;
};

// Every read or write of the probe's sockets gives up after this.
constexpr auto kIoTimeout = std::chrono::milliseconds(200);

bool read_all(int fd, void* p, std::size_t n) {
  return base::read_exact(fd, p, n, base::Deadline(kIoTimeout)) == base::IoResult::ok;
}
bool write_all(int fd, const void* p, std::size_t n) {
  return base::write_exact(fd, p, n, base::Deadline(kIoTimeout)) == base::IoResult::ok;
}

Loopback loopback(std::chrono::microseconds budget) {
  // Sockets as the TCP transport has them: non-blocking, close-on-exec, TCP_NODELAY.
  const Socket listener = [] {
    try {
      return Socket(store::listen_tcp("127.0.0.1", 0, 1));
    } catch (const Error&) {
      return Socket();
    }
  }();
  if (listener.fd() < 0) return {};
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  if (::getsockname(listener.fd(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) return {};
  std::string error;
  Socket client(base::connect_tcp("127.0.0.1", ntohs(addr.sin_port), base::Deadline(kIoTimeout),
                                  error, false));
  if (client.fd() < 0 ||
      base::wait_fd(listener.fd(), POLLIN, base::Deadline(kIoTimeout)) != base::IoResult::ok)
    return {};
  Socket server(::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
  if (server.fd() < 0) return {};
  int one = 1;
  ::setsockopt(server.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));

  // The echo: a header of 0 is a ping (echoed), n > 0 announces n bytes (answered once read), and
  // anything unreadable ends it.
  std::thread echo;
  try {
    echo = std::thread([fd = server.fd()] {
      std::vector<char> sink(256 << 10);
      for (std::uint64_t header = 0; read_all(fd, &header, sizeof(header));) {
        for (std::uint64_t left = header; left > 0;) {
          const std::size_t n = std::min<std::uint64_t>(left, sink.size());
          if (!read_all(fd, sink.data(), n)) return;
          left -= n;
        }
        if (!write_all(fd, &header, sizeof(header))) return;
      }
    });
  } catch (const std::system_error&) {
    return {};
  }
  Loopback result;
  const int fd = client.fd();
  const double trips_per_us = best_rate(budget / 3, 2, [&] {
    constexpr int kTrips = 4;
    for (int i = 0; i < kTrips; ++i) {
      std::uint64_t header = 0;
      if (!write_all(fd, &header, sizeof(header)) || !read_all(fd, &header, sizeof(header)))
        return 0.0;
    }
    return static_cast<double>(kTrips);
  });
  result.latency_us = trips_per_us > 0 ? 0.5 / trips_per_us : 0;
  std::vector<char> bulk(kProbeBytes, 3);
  const double bytes_per_us = best_rate(budget * 2 / 3, 2, [&] {
    constexpr int kChunks = 2;
    std::uint64_t header = kChunks * kProbeBytes;
    if (!write_all(fd, &header, sizeof(header))) return 0.0;
    for (int i = 0; i < kChunks; ++i)
      if (!write_all(fd, bulk.data(), bulk.size())) return 0.0;
    if (!read_all(fd, &header, sizeof(header))) return 0.0;
    return static_cast<double>(kChunks * kProbeBytes);
  });
  result.gbps = bytes_per_us / 1e3;
  ::shutdown(fd, SHUT_RDWR);
  echo.join();
  if (result.latency_us == 0 || result.gbps == 0) return {};
  return result;
}

}  // namespace

algorithms::MachineRates probe_machine(std::chrono::microseconds budget, bool tcp_loopback) {
  algorithms::MachineRates r;
  const auto part = [&](int percent) { return budget * percent / 100; };
  r.copy_gbps = copy_gbps(part(tcp_loopback ? 10 : 20));
  r.reduce_gbps = reduce_gbps(part(tcp_loopback ? 10 : 20));
  r.handover_us = handover_us(part(tcp_loopback ? 15 : 25), false);
  r.wake_us = handover_us(part(tcp_loopback ? 25 : 35), true);
  // Spinning threads that share a core hand over only when one yields: slower than a wake-up, and
  // not what ranks with a core each see. The other ranks' figures (or the default) stand.
  if (r.handover_us >= r.wake_us) r.handover_us = 0;
  if (tcp_loopback) {
    const Loopback l = loopback(part(40));
    r.loopback_us = l.latency_us;
    r.loopback_gbps = l.gbps;
  }
  return r;
}

}  // namespace loom::core
