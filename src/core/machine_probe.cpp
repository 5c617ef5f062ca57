#include "core/machine_probe.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/file.h>
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

#include "base/cpu_cache.hpp"
#include "base/cpu_relax.hpp"
#include "base/deadline.hpp"
#include "base/futex.hpp"
#include "base/process_memory.hpp"
#include "base/socket_io.hpp"
#include "base/tcp_connect.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "store/listen_socket.hpp"
#include "transports/tcp/tcp_connection.hpp"

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
// The single copy's read of a peer's freshly written block: a block within the writer's cache, the
// size where the choice against the slots is closest (1 MiB a rank at 2 ranks); the price charges
// larger blocks their own factor (single_copy_cost). At 4 MiB on the Xeon the read ran at 6.9-8.6
// GB/s and priced a 512 KiB block at 1.5x what the call took (45-50 us).
constexpr std::size_t kFreshBytes = std::size_t{512} << 10;

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

// Pins the calling thread to the CPU it runs on, and a probe's second thread (pin_second) to the
// next CPU it may use; the calling thread gets its CPUs back at the end. Without a second CPU it
// pins nothing.
class CorePair {
 public:
  CorePair() {
    if (::sched_getaffinity(0, sizeof(allowed_), &allowed_) != 0) return;
    const int here = ::sched_getcpu();
    if (here < 0 || !CPU_ISSET(here, &allowed_)) return;
    for (int step = 1; step < CPU_SETSIZE && second_ < 0; ++step)
      if (CPU_ISSET((here + step) % CPU_SETSIZE, &allowed_)) second_ = (here + step) % CPU_SETSIZE;
    if (second_ >= 0) pinned_ = pin(here);
  }
  ~CorePair() {
    if (pinned_) ::sched_setaffinity(0, sizeof(allowed_), &allowed_);
  }
  CorePair(const CorePair&) = delete;
  CorePair& operator=(const CorePair&) = delete;
  void pin_second() const {
    if (pinned_) pin(second_);
  }

 private:
  static bool pin(int cpu) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    return ::sched_setaffinity(0, sizeof(one), &one) == 0;
  }
  cpu_set_t allowed_{};
  int second_ = -1;
  bool pinned_ = false;
};

// The single-copy all-to-all's copy: the kernel reading another process's pages, which a peer's
// core has just written (its block, fresh from the computation before the call). The pages are
// this process's own, read by the same path; a thread on the next CPU writes them before each
// timed read, so that their lines come from that core's cache, as a peer's do (read straight after
// the probe's own writes, they came from this core's cache and overstated the copy: 1.2x on a
// Zen 4). Without a second CPU, this thread writes them.
double cma_fresh_gbps(std::chrono::microseconds budget) {
  if (!base::cross_memory_attach_available()) return 0;
  // Spin briefly, then yield: the writer may share this CPU (more ranks than cores probing).
  auto pause = [](int spins) {
    if (spins < 256)
      base::cpu_relax();
    else
      std::this_thread::yield();
  };
  std::vector<char> a(kFreshBytes, 1), b(kFreshBytes, 2);
  CorePair cores;
  std::atomic<int> round{0};  // odd: the writer's turn; even: written
  std::thread writer([&] {
    cores.pin_second();
    for (int r = 1;; r += 2) {
      for (int v, spins = 0; (v = round.load(std::memory_order_acquire)) < r; ++spins) {
        if (v < 0) return;
        pause(spins);
      }
      std::memset(a.data(), r & 0x7f, kFreshBytes);
      round.store(r + 1, std::memory_order_release);
    }
  });
  double best = 0;
  const auto end = Clock::now() + budget;
  for (int i = 0, r = 1; i < 3 || (Clock::now() < end && i < 1000); ++i, r += 2) {
    round.store(r, std::memory_order_release);
    for (int spins = 0; round.load(std::memory_order_acquire) != r + 1; ++spins) pause(spins);
    const auto t0 = Clock::now();
    if (base::read_process_memory(::getpid(), a.data(), b.data(), kFreshBytes) != 0) break;
    const double us = Micros(Clock::now() - t0).count();
    keep(b.data());
    best = std::max(best, static_cast<double>(kFreshBytes) / std::max(us, 1e-3));
  }
  round.store(-1, std::memory_order_release);
  writer.join();
  return best / 1e3;
}

// The kernel reading this process's own pages, which this core has just written: the figure the
// price where ranks outnumber cores was measured against (there a peer's pages are often in the
// cache of the core the reader shares).
double cma_gbps(std::chrono::microseconds budget) {
  if (!base::cross_memory_attach_available()) return 0;
  std::vector<char> a(kCopyBytes, 1), b(kCopyBytes, 2);
  const double per_us = best_rate(budget, 3, [&] {
    if (base::read_process_memory(::getpid(), a.data(), b.data(), kCopyBytes) != 0) return 0.0;
    keep(b.data());
    return static_cast<double>(kCopyBytes);
  });
  return per_us / 1e3;
}

// Taken by the rank that runs the pipe probe, so that the host's other ranks leave its cores to it.
constexpr const char* kPipeLock = "/tmp/loom-probe-pipe.lock";

// One TCP connection over loopback: the one-way latency of 8 bytes, one stream's rate, and the
// payload one segment carries after a frame's header.
struct Loopback {
  double latency_us = 0;
  double gbps = 0;
  double segment_bytes = 0;
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
  // Read after the stream: the kernel caps a segment at half the largest window the peer has
  // offered, which grows as the stream runs (loopback: 32768, then 65483).
  int segment = 0;
  socklen_t segment_len = sizeof(segment);
  if (::getsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &segment, &segment_len) == 0 &&
      segment > static_cast<int>(sizeof(transport::tcp::FrameHeader)))
    result.segment_bytes = segment - static_cast<int>(sizeof(transport::tcp::FrameHeader));
  ::shutdown(fd, SHUT_RDWR);
  echo.join();
  if (result.latency_us == 0 || result.gbps == 0) return {};
  return result;
}

}  // namespace

namespace {

// slice_pipe's trials: 1 MiB through 4 slots in slices of 16 KiB, then of 256 KiB.
constexpr std::size_t kPipeBytes = std::size_t{1} << 20;
constexpr std::size_t kPipeSmall = 16 << 10, kPipeLarge = 256 << 10;
constexpr double kPipeSmallSlices = kPipeBytes / kPipeSmall;
constexpr double kPipeLargeSlices = kPipeBytes / kPipeLarge;

// The cost of one slice, fitted from the best trials of the small and of the large slices.
double pipe_slice_us(double small_us, double large_us) {
  return (small_us - large_us) / (kPipeSmallSlices - kPipeLargeSlices);
}

// The figures of the best trials; `undisturbed`: the fitted slice cost was plausible.
SlicePipe fitted_pipe(double small_us, double large_us, bool undisturbed) {
  SlicePipe p;
  p.small_best_us = small_us, p.large_best_us = large_us;
  if (small_us <= 0 || large_us <= 0) return p;
  // Still disturbed when the grace ran out: the figures are of the sharing, not of the ring, and
  // steered a whole job (2-8 ranks on 2 cores: 7-20% of launches fitted 27 us a slice against
  // 1.6 and 6 GB/s against 19, and recursive doubling then ran 1.5x slower than the ring at
  // 512 KiB-1 MiB). The model keeps the figures built from the other parts.
  if (!undisturbed) return p;
  const double slice_us = pipe_slice_us(small_us, large_us);
  const double bytes_us = large_us - kPipeLargeSlices * slice_us;
  if (bytes_us <= 0) return p;
  p.slice_us = slice_us;
  p.gbps = static_cast<double>(kPipeBytes) / bytes_us / 1e3;
  return p;
}

}  // namespace

// The shared-memory ring's work at 2 ranks. Its fit gives the cost of one slice (two hand-overs
// and a slot's bookkeeping) and of one byte (copied in, then reduced on the other core, through
// the shared cache) as the transport pays them; the hand-over and copy probes see neither cache
// lines crossing cores nor the slot's overheads.
SlicePipe slice_pipe(std::chrono::microseconds budget, std::chrono::microseconds grace,
                     double disturbed_us) {
  constexpr std::size_t kBytes = kPipeBytes, kSmall = kPipeSmall, kLarge = kPipeLarge;
  constexpr std::size_t kSlots = 4;
  struct alignas(64) Counter {
    std::atomic<std::uint64_t> value{0};
  };
  // One direction: slots, the slices put in and the slices taken out.
  struct Fifo {
    std::vector<float> slots = std::vector<float>(kSlots * kLarge / sizeof(float), 0.0f);
    Counter put, taken;
  };
  struct Side {
    std::vector<float> in = std::vector<float>(kBytes / sizeof(float), 1.0f);
    std::vector<float> out = std::vector<float>(kBytes / sizeof(float), 0.0f);
  };
  Fifo to_echo, to_main;
  Side main_side, echo_side;
  Counter trial, finished;
  std::atomic<std::size_t> slice{kSmall};
  std::atomic<bool> stop{false};
  const auto give_up = Clock::now() + budget + grace + std::chrono::milliseconds(50);
  // Spins, yielding now and then so that a peer without a core of its own gets one.
  auto wait_until = [&](auto&& ready) {
    for (unsigned spins = 0; !ready(); ++spins) {
      if (spins % 64 == 63 && (stop.load(std::memory_order_relaxed) || Clock::now() > give_up))
        return false;
      if (spins % 1024 == 1023)
        sched_yield();
      else
        base::cpu_relax();
    }
    return true;
  };
  // One trial of one side: every slice out through `send`, every slice in from `receive`.
  auto run = [&](Side& side, Fifo& send, Fifo& receive, std::size_t s) {
    const std::size_t floats = s / sizeof(float);
    for (std::uint64_t i = 0; i < kBytes / s; ++i) {
      if (!wait_until([&] {
            return send.put.value.load(std::memory_order_relaxed) -
                       send.taken.value.load(std::memory_order_acquire) <
                   kSlots;
          }))
        return false;
      std::memcpy(send.slots.data() + (i % kSlots) * (kLarge / sizeof(float)),
                  side.in.data() + i * floats, s);
      send.put.value.store(i + 1, std::memory_order_release);
      if (!wait_until([&] { return receive.put.value.load(std::memory_order_acquire) > i; }))
        return false;
      const float* slot = receive.slots.data() + (i % kSlots) * (kLarge / sizeof(float));
      float* out = side.out.data() + i * floats;
      kernels::reduce(out, slot, out, floats, DataType::f32, ReduceOp::sum);
      receive.taken.value.store(i + 1, std::memory_order_release);
    }
    keep(side.out.data());
    return true;
  };
  // Two threads that spin on each other must each have a core: left to the scheduler, both sat
  // on one CPU for the whole pipe in 16 of 97 2-rank pipes on 2 cores, and in 31 of 36 4-rank
  // ones, and fitted 27 us a slice (the waiter's yields) against 1.6.
  const CorePair cores;
  std::thread echo;
  try {
    echo = std::thread([&] {
      cores.pin_second();
      for (std::uint64_t seen = 0;;) {
        if (!wait_until([&] { return trial.value.load(std::memory_order_acquire) != seen; }))
          return;
        seen = trial.value.load(std::memory_order_acquire);
        if (!run(echo_side, to_main, to_echo, slice.load())) return;
        finished.value.store(seen, std::memory_order_release);
      }
    });
  } catch (const std::system_error&) {
    return {};
  }
  // Both sides reset their counters between trials: the echo is idle until `trial` moves.
  auto one_trial = [&](std::size_t s) {
    for (Fifo* f : {&to_echo, &to_main}) f->put.value.store(0), f->taken.value.store(0);
    slice.store(s);
    const std::uint64_t n = trial.value.load() + 1;
    trial.value.store(n, std::memory_order_release);
    const auto t0 = Clock::now();
    if (!run(main_side, to_echo, to_main, s)) return 0.0;
    if (!wait_until([&] { return finished.value.load(std::memory_order_acquire) == n; }))
      return 0.0;
    return Micros(Clock::now() - t0).count();
  };
  // The best time of each slice size. A slice that costs more than `disturbed_us` means that the
  // two threads did not each have a core (the host's other ranks still probing): trials go on
  // for up to `grace` more, until the others have gone on to block in the topology exchange.
  // A fit of 0 or less (the small slices' best trial no slower than the large ones') is noise,
  // not a cost: under sanitizers and a loaded host it read as 0.01 us a slice.
  double small_us = 0, large_us = 0;
  const auto fitted = [&] {
    const double slice_us = pipe_slice_us(small_us, large_us);
    return slice_us > 0 && slice_us <= disturbed_us;
  };
  const auto start = Clock::now();
  for (int i = 0; i < 400; ++i) {
    const auto now = Clock::now();
    if (i >= 2 && now > start + budget && (fitted() || now > start + budget + grace)) break;
    const double a = one_trial(kSmall), b = a > 0 ? one_trial(kLarge) : 0.0;
    if (a <= 0 || b <= 0) {
      small_us = large_us = 0;
      break;
    }
    small_us = small_us > 0 ? std::min(small_us, a) : a;
    large_us = large_us > 0 ? std::min(large_us, b) : b;
  }
  stop.store(true);
  trial.value.store(trial.value.load() + 1, std::memory_order_release);
  echo.join();
  return fitted_pipe(small_us, large_us, fitted());
}

algorithms::MachineRates probe_machine(std::chrono::microseconds budget, bool tcp_loopback) {
  algorithms::MachineRates r;
  const auto part = [&](int percent) { return budget * percent / 100; };
  r.copy_gbps = copy_gbps(part(10));
  r.reduce_gbps = reduce_gbps(part(10));
  r.handover_us = handover_us(part(15), false);
  r.wake_us = handover_us(part(25), true);
  // Spinning threads that share a core hand over only when one yields: slower than a wake-up, and
  // not what ranks with a core each see. The other ranks' figures (or the default) stand.
  if (r.handover_us >= r.wake_us) r.handover_us = 0;
  r.core_cache_kib = static_cast<double>(base::core_cache_bytes() >> 10);
  // Two spinning threads on each of a host's ranks would share its cores and measure the sharing:
  // the rank that takes the host's lock first runs the pipe, last, while the others have gone on
  // to the topology exchange and block there. The host's figure is the best of its ranks'. A job
  // over TCP alone (tcp_loopback) never uses shared memory, and skips it.
  if (!tcp_loopback) {
    r.cma_gbps = cma_gbps(part(5));
    r.cma_fresh_gbps = cma_fresh_gbps(part(5));
    const int lock = ::open(kPipeLock, O_RDONLY | O_CREAT | O_CLOEXEC, 0666);
    if (lock < 0 || ::flock(lock, LOCK_EX | LOCK_NB) == 0) {
      // A slice is two hand-overs; one slower than two wake-ups was not measured alone.
      const SlicePipe pipe = slice_pipe(part(35), part(100), 2 * std::max(r.wake_us, 1.0));
      r.slice_us = pipe.slice_us;
      r.pipe_gbps = pipe.gbps;
    }
    if (lock >= 0) ::close(lock);
  } else {
    const Loopback l = loopback(part(40));
    r.loopback_us = l.latency_us;
    r.loopback_gbps = l.gbps;
    r.segment_bytes = l.segment_bytes;
  }
  return r;
}

}  // namespace loom::core
