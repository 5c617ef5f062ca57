#include "ranks.hpp"
#include "store/keys.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace loom::testing {
namespace {

int listen_loopback(std::uint16_t& port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(fd, 1024) != 0) {
    ::close(fd);
    return -1;
  }
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  port = ntohs(a.sin_port);
  return fd;
}

int failed_parts() {
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  if (test == nullptr) return 0;
  const ::testing::TestResult* result = test->result();
  int failed = 0;
  for (int i = 0; i < result->total_part_count(); ++i)
    failed += result->GetTestPartResult(i).failed();
  return failed;
}

[[noreturn]] void child_main(int rank, int world, int listen_fd, std::uint16_t port,
                             const std::function<void(RankContext&)>& body) {
  int code = 0;
  try {
    std::unique_ptr<StoreServer> server;
    if (rank == 0)
      server = std::make_unique<StoreServer>(listen_fd);
    else
      ::close(listen_fd);
    RankContext ctx{rank, world,
                    std::make_shared<TcpStore>("127.0.0.1", port, std::chrono::seconds(30))};
    // A child inherits the failures its test had before the fork: count only its own.
    const int failed_before = failed_parts();
    body(ctx);
    if (failed_parts() > failed_before) code = 1;
    // Rank 0 keeps the store up until every rank is done with it.
    ctx.store->add("done", 1);
    if (rank == 0) {
      for (int i = 0; i < 3000 && ctx.store->add("done", 0) < world; ++i) ::usleep(10000);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: uncaught exception: %s\n", rank, e.what());
    code = 1;
  }
  std::fflush(stdout);
  std::fflush(stderr);
  ::_exit(code);
}

}  // namespace

void run_ranks_raw(int world, const std::function<void(RankContext&)>& body, RunOptions opts) {
  std::uint16_t port = 0;
  int listen_fd = listen_loopback(port);
  ASSERT_GE(listen_fd, 0) << "cannot listen on loopback";
  struct Child {
    pid_t pid;
    int out;
    std::string output;
    int status = -1;
    bool done = false;
  };
  std::vector<Child> children;
  std::fflush(stdout);
  std::fflush(stderr);
  for (int rank = 0; rank < world; ++rank) {
    int pipefd[2];
    ASSERT_EQ(::pipe2(pipefd, O_CLOEXEC), 0);
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::dup2(pipefd[1], 1);
      ::dup2(pipefd[1], 2);
      for (auto& c : children) ::close(c.out);
      ::close(pipefd[0]);
      if (opts.host_id) ::setenv("LOOM_HOST_ID", opts.host_id(rank, world).c_str(), 1);
      child_main(rank, world, listen_fd, port, body);
    }
    ::close(pipefd[1]);
    children.push_back({pid, pipefd[0], {}});
  }
  ::close(listen_fd);

  const auto deadline = std::chrono::steady_clock::now() + opts.timeout;
  bool timed_out = false;
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<Child*> owners;
    for (auto& c : children)
      if (c.out >= 0) fds.push_back({c.out, POLLIN, 0}), owners.push_back(&c);
    if (!fds.empty()) ::poll(fds.data(), fds.size(), 50);
    // Read only what poll reported: a blocking read would stop this loop from reaping children.
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Child& c = *owners[i];
      char buf[4096];
      ssize_t n = ::read(c.out, buf, sizeof(buf));
      if (n > 0) {
        c.output.append(buf, static_cast<std::size_t>(n));
      } else {
        ::close(c.out);
        c.out = -1;
      }
    }
    for (auto& c : children)
      if (!c.done && ::waitpid(c.pid, &c.status, WNOHANG) == c.pid) c.done = true;
    bool all = true;
    for (auto& c : children) all &= c.done && c.out < 0;
    if (all) break;
    if (fds.empty()) ::usleep(10000);
    if (std::chrono::steady_clock::now() > deadline) {
      timed_out = true;
      for (auto& c : children)
        if (!c.done) ::kill(c.pid, SIGKILL);
      for (auto& c : children) {
        if (!c.done) ::waitpid(c.pid, &c.status, 0);
        c.done = true;
        if (c.out >= 0) ::close(c.out);
        c.out = -1;
      }
      break;
    }
  }
  for (std::size_t r = 0; r < children.size(); ++r) {
    const Child& c = children[r];
    const bool may_die = std::find(opts.may_die.begin(), opts.may_die.end(), static_cast<int>(r)) !=
                         opts.may_die.end();
    bool ok = !timed_out && ((WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0) ||
                             (may_die && WIFSIGNALED(c.status)));
    EXPECT_TRUE(ok) << "rank " << r
                    << (timed_out ? " did not finish within the test timeout" : " failed")
                    << " (status " << c.status << "); its output:\n"
                    << c.output;
  }
}

std::string job_token_of(Store& store) {
  Bytes token =
      store.get("loom/" + store::keys::generation_prefix("", 1) + "/" + store::keys::job_token(),
                std::chrono::seconds(10));
  std::uint64_t t = 0;
  std::memcpy(&t, token.data(), std::min<std::size_t>(8, token.size()));
  return fmt::format("{:016x}", t);
}

std::vector<std::string> segments_of(Store& store) {
  const std::string prefix = "loom-" + job_token_of(store) + "-";
  std::vector<std::string> found;
  if (DIR* d = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(d))
      if (std::string(e->d_name).rfind(prefix, 0) == 0) found.push_back(e->d_name);
    ::closedir(d);
  }
  return found;
}

void run_ranks(int world, const std::function<void(Communicator&)>& body, RunOptions opts) {
  auto absent = opts.absent;
  auto options = opts.options;
  run_ranks_raw(
      world,
      [&](RankContext& ctx) {
        if (std::find(absent.begin(), absent.end(), ctx.rank) != absent.end()) return;
        Communicator comm(ctx.store, ctx.rank, ctx.size, options);
        body(comm);
      },
      opts);
}

void die_by_sigkill(RankContext& ctx) {
  ctx.store->add("done", 1);
  ::kill(::getpid(), SIGKILL);
  std::abort();  // not reached
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ::close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace loom::testing
