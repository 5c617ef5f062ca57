// A rank that stops (SIGSTOP: alive, silent) is named on every survivor within the heartbeat
// timeout and a couple of seconds: a middle rank by the rank that watches its heartbeat; rank 0,
// which hosts the store under init(), by every survivor on its own, since the store stops
// answering with it.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "../support/ranks.hpp"

namespace loom {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr int kWorld = 4;
constexpr auto kHeartbeat = 3s;

// A port free now (the kernel's pick, closed again): rank 0's store binds it at once.
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    ADD_FAILURE() << "cannot find a free port";
  ::close(fd);
  return ntohs(a.sin_port);
}

// A rank under init(): calls all-reduces until one fails; the victim stops itself after a few.
// Exits 0 when the failure is a PeerError naming `victim` (as `expected`) and came within the
// heartbeat timeout and two seconds of the victim's stop.
[[noreturn]] void rank_main(int rank, int victim, int port, const char* expected) {
  ::setenv("RANK", std::to_string(rank).c_str(), 1);
  ::setenv("WORLD_SIZE", std::to_string(kWorld).c_str(), 1);
  ::setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
  ::setenv("LOCAL_WORLD_SIZE", std::to_string(kWorld).c_str(), 1);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  ::setenv("LOOM_HEARTBEAT_TIMEOUT", std::to_string(kHeartbeat.count()).c_str(), 1);
  ::setenv("LOOM_TIMEOUT", "60", 1);
  int code = 1;
  try {
    Communicator comm = init();
    float x = 1;
    for (int i = 0; i < 20; ++i) comm.all_reduce(&x, &x, 1, DataType::f32, ReduceOp::max);
    if (rank == victim) {
      ::raise(SIGSTOP);  // the parent kills it once the others are done
      ::_exit(0);
    }
    // The victim stops right after its last call: from here on, no call can finish.
    const auto stopped = Clock::now();
    try {
      for (;;) comm.all_reduce(&x, &x, 1, DataType::f32, ReduceOp::max);
    } catch (const PeerError& e) {
      const auto took = Clock::now() - stopped;
      const std::string what = e.what();
      const bool named = what.find(expected) != std::string::npos && e.peer() == victim;
      const bool in_time = took < kHeartbeat + 2s;
      std::fprintf(stderr, "rank %d: after %.1f s: %s\n", rank,
                   std::chrono::duration<double>(took).count(), what.c_str());
      code = named && in_time ? 0 : 1;
    }
    // The store's host keeps it up until every survivor has had its error: a process that exits
    // at once takes the failure record with it, and the later ranks would name the store's host.
    if (victim != 0) {
      TcpStore store("127.0.0.1", static_cast<std::uint16_t>(port), 10s);
      store.set(fmt::format("reported/{}", rank), std::string("1"));
      if (rank == 0) {
        std::vector<std::string> survivors;
        for (int r = 1; r < kWorld; ++r)
          if (r != victim) survivors.push_back(fmt::format("reported/{}", r));
        store.wait(survivors, 30s);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
  }
  std::fflush(stderr);
  ::_exit(code);
}

void expect_named_on_every_survivor(int victim, const char* expected) {
  const int port = free_port();
  std::vector<pid_t> pids;
  for (int r = 0; r < kWorld; ++r) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) rank_main(r, victim, port, expected);
    pids.push_back(pid);
  }
  const auto deadline = Clock::now() + 60s;
  for (int r = 0; r < kWorld; ++r) {
    if (r == victim) continue;
    int status = -1;
    while (::waitpid(pids[static_cast<std::size_t>(r)], &status, WNOHANG) == 0 &&
           Clock::now() < deadline)
      std::this_thread::sleep_for(20ms);
    if (Clock::now() >= deadline) ::kill(pids[static_cast<std::size_t>(r)], SIGKILL);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "rank " << r << " did not name rank " << victim << " in time (status " << status
        << "; its stderr is above)";
  }
  ::kill(pids[static_cast<std::size_t>(victim)], SIGKILL);
  ::waitpid(pids[static_cast<std::size_t>(victim)], nullptr, 0);
  for (int r = 0; r < kWorld; ++r)
    if (r != victim) ::waitpid(pids[static_cast<std::size_t>(r)], nullptr, WNOHANG);
}

TEST(FrozenRank, AMiddleRankIsNamedOnEverySurvivorWithinTheHeartbeatTimeout) {
  expect_named_on_every_survivor(2, "rank 2 on host");
}

TEST(FrozenRank, RankZeroHostingTheStoreIsNamedOnEverySurvivorWithinTheHeartbeatTimeout) {
  expect_named_on_every_survivor(0, "rank 0 on host");
}

}  // namespace
}  // namespace loom
