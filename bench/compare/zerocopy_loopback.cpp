// Whether MSG_ZEROCOPY helps a TCP stream over loopback (or a veth pair, which delivers the same
// way): one thread sends `bytes` a message to another through 127.0.0.1, `iters` times, with plain
// send() (the kernel copies the payload into the socket) or with MSG_ZEROCOPY (the kernel pins the
// sender's pages and reports on the error queue when it is done with them; the sender may reuse
// its buffer only then). On loopback the receiving socket cannot keep pinned user pages: the
// kernel copies them at once, and each notification says so.
// Prints "zerocopy_loopback,<bytes>,<copy|zerocopy>,<GB/s>,<CPU s per wall s>,<notifications>,
// <notifications saying the kernel copied>".
#include <arpa/inet.h>
#include <linux/errqueue.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#ifndef SO_ZEROCOPY
#define SO_ZEROCOPY 60
#endif
#ifndef MSG_ZEROCOPY
#define MSG_ZEROCOPY 0x4000000
#endif

namespace {

double cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// Every blocking call on the sockets gives up after this.
void time_out(int fd) {
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

struct Notes {
  long seen = 0, copied = 0;
};

// Reads the error queue until `pending` sends are acknowledged; false after 10 s without one.
bool await_notifications(int fd, unsigned& pending, Notes& notes) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (pending > 0) {
    char control[128];
    msghdr m{};
    m.msg_control = control;
    m.msg_controllen = sizeof control;
    if (::recvmsg(fd, &m, MSG_ERRQUEUE) < 0) {
      if (std::chrono::steady_clock::now() > give_up) return false;
      pollfd p{fd, 0, 0};  // POLLERR is always reported
      ::poll(&p, 1, 1);
      continue;
    }
    for (cmsghdr* c = CMSG_FIRSTHDR(&m); c != nullptr; c = CMSG_NXTHDR(&m, c)) {
      sock_extended_err e{};
      std::memcpy(&e, CMSG_DATA(c), sizeof e);
      if (e.ee_origin != SO_EE_ORIGIN_ZEROCOPY) continue;
      const unsigned done = e.ee_data - e.ee_info + 1;
      pending -= done < pending ? done : pending;
      ++notes.seen;
      if (e.ee_code & SO_EE_CODE_ZEROCOPY_COPIED) ++notes.copied;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: zerocopy_loopback BYTES ITERS copy|zerocopy\n");
    return 2;
  }
  const std::size_t bytes = std::strtoull(argv[1], nullptr, 10);
  const int iters = std::atoi(argv[2]);
  const bool zerocopy = std::strcmp(argv[3], "zerocopy") == 0;
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listener, 1) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::perror("zerocopy_loopback: listen");
    return 1;
  }
  const int out = ::socket(AF_INET, SOCK_STREAM, 0);
  if (::connect(out, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    std::perror("zerocopy_loopback: connect");
    return 1;
  }
  const int in = ::accept(listener, nullptr, nullptr);
  int one = 1;
  ::setsockopt(out, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  time_out(in), time_out(out);
  if (zerocopy && ::setsockopt(out, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof one) != 0) {
    std::perror("zerocopy_loopback: SO_ZEROCOPY");
    return 1;
  }
  std::vector<char> source(bytes, 1), sink(bytes);
  std::thread receiver([&] {
    for (int i = 0; i < iters; ++i)
      for (std::size_t got = 0; got < bytes;) {
        const ssize_t n = ::recv(in, sink.data() + got, bytes - got, 0);
        if (n <= 0) return;
        got += static_cast<std::size_t>(n);
      }
  });
  const double cpu0 = cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  Notes notes;
  bool ok = true;
  for (int i = 0; i < iters && ok; ++i) {
    unsigned pending = 0;
    for (std::size_t sent = 0; sent < bytes && ok;) {
      const ssize_t n =
          ::send(out, source.data() + sent, bytes - sent, zerocopy ? MSG_ZEROCOPY : 0);
      if (n < 0 && errno == ENOBUFS) {  // too much pinned: wait for notifications
        ok = await_notifications(out, pending, notes);
        continue;
      }
      if (n < 0) ok = false;
      sent += n > 0 ? static_cast<std::size_t>(n) : 0;
      pending += zerocopy ? 1 : 0;
    }
    // The buffer is the sender's again once every send of it is acknowledged.
    if (ok) ok = await_notifications(out, pending, notes);
  }
  receiver.join();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!ok) {
    std::perror("zerocopy_loopback: send");
    return 1;
  }
  std::printf("zerocopy_loopback,%zu,%s,%.3f,%.2f,%ld,%ld\n", bytes, zerocopy ? "zerocopy" : "copy",
              static_cast<double>(bytes) * iters / wall / 1e9, (cpu_seconds() - cpu0) / wall,
              notes.seen, notes.copied);
  ::close(in), ::close(out), ::close(listener);
  return 0;
}
