// Ranks under init(), where rank 0 hosts the store, and each survivor raises its error and leaves
// at once, as a user's script would:
// - a rank that stops (SIGSTOP: alive, silent) is named on every survivor within the heartbeat
//   timeout and a couple of seconds: a middle rank by the rank that watches its heartbeat; rank 0
//   by every survivor on its own, since the store stops answering with it;
// - a middle rank killed (SIGKILL) is named on every survivor, whichever rank saw it first, and
//   every survivor's process has destroyed its communicator within 3 s: rank 0, on its way out,
//   keeps the store until the others have read the record (else they would find no store and
//   blame rank 0), and the others do not wait on a store that is gone.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
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

enum class Stop { freeze, kill };

// A rank under init(): calls all-reduces until one fails; the victim stops itself after a few.
// Exits 0 when the failure is a PeerError naming `victim` (as `expected`) and came within the
// heartbeat timeout and two seconds of the victim's stop (frozen), or when the communicator was
// destroyed within 3 s of it (killed).
// The environment of rank `rank` of kWorld under init(), rank 0 hosting the store on `port`.
void launch_env(int rank, int port) {
  ::setenv("RANK", std::to_string(rank).c_str(), 1);
  ::setenv("WORLD_SIZE", std::to_string(kWorld).c_str(), 1);
  ::setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
  ::setenv("LOCAL_WORLD_SIZE", std::to_string(kWorld).c_str(), 1);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  ::setenv("LOOM_HEARTBEAT_TIMEOUT", std::to_string(kHeartbeat.count()).c_str(), 1);
  ::setenv("LOOM_TIMEOUT", "60", 1);
}

[[noreturn]] void rank_main(int rank, int victim, int port, const char* expected, Stop how) {
  launch_env(rank, port);
  int code = 1;
  try {
    auto stopped = Clock::now();
    bool named = false;
    {
      Communicator comm = init();
      // Killed: calls long enough that the victim dies in the middle of one, and whichever rank
      // sees it first varies from trial to trial.
      std::vector<float> x(how == Stop::kill ? 1 << 18 : 1, 1.0f);
      const auto step = [&] {
        comm.all_reduce(x.data(), x.data(), x.size(), DataType::f32, ReduceOp::max);
      };
      for (int i = 0; i < 20; ++i) step();
      if (rank == victim) {
        if (how == Stop::kill) {
          std::thread([] {
            std::this_thread::sleep_for(2ms);
            ::raise(SIGKILL);
          }).detach();
          for (;;) step();
        }
        ::raise(SIGSTOP);  // the parent kills it once the others are done
        ::_exit(0);
      }
      // The victim stops right after its last call: from here on, no call can finish.
      stopped = Clock::now();
      try {
        for (;;) step();
      } catch (const PeerError& e) {
        const auto took = Clock::now() - stopped;
        const std::string what = e.what();
        named = what.find(expected) != std::string::npos && e.peer() == victim;
        if (how == Stop::freeze) code = named && took < kHeartbeat + 2s ? 0 : 1;
        std::fprintf(stderr, "rank %d: after %.1f s: %s\n", rank,
                     std::chrono::duration<double>(took).count(), what.c_str());
      }
    }  // the communicator is destroyed: nothing of this job waits any more
    if (how == Stop::kill) {
      const auto left = Clock::now() - stopped;
      std::fprintf(stderr, "rank %d: destroyed %.2f s after the victim's last call\n", rank,
                   std::chrono::duration<double>(left).count());
      code = named && left < 3s ? 0 : 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
  }
  std::fflush(stderr);
  ::_exit(code);
}

// create_group of ranks 1-3 while rank 0, which hosts the store and is no member, freezes (or
// dies), and member 3 never comes: members 1 and 2 raise PeerError naming rank 0 within the
// heartbeat timeout and a few seconds (their parent halts; a round the store does not answer
// takes up to 2.5 s, a mark it does not take up to 2 s), not at the child's timeout (60 s),
// though the store they would write their slots in, wait on and mark member 3's slot in no
// longer answers. `when`: the members call create_group as rank 0 stops (it stops while they
// wait), a second after it stopped (their first request meets it), or once their parent halted.
enum class When { waiting, after_stop, after_halt };
int g_ready[2] = {-1, -1};  // a pipe: each member says it is about to call create_group

[[noreturn]] void group_rank_main(int rank, int port, Stop how, When when) {
  launch_env(rank, port);
  int code = 1;
  try {
    Communicator comm = init();
    float x = 1;
    comm.all_reduce(&x, &x, 1, DataType::f32, ReduceOp::sum);
    if (rank == 0) {
      char said[2];
      for (std::size_t got = 0; got < 2;) {  // both members' all-reduce has ended
        const ssize_t n = ::read(g_ready[0], said + got, 2 - got);
        if (n <= 0) ::_exit(1);
        got += static_cast<std::size_t>(n);
      }
      if (when == When::waiting) std::this_thread::sleep_for(300ms);
      ::raise(how == Stop::freeze ? SIGSTOP : SIGKILL);  // frozen: the harness kills it
      ::_exit(0);
    }
    if (rank == 3) {  // never comes: the harness kills it
      std::this_thread::sleep_for(120s);
      ::_exit(0);
    }
    const auto said = Clock::now();
    if (::write(g_ready[1], "r", 1) != 1) ::_exit(1);
    const std::chrono::seconds delay = when == When::waiting      ? 0s
                                       : when == When::after_stop ? 1s
                                                                  : kHeartbeat + 2s;
    std::this_thread::sleep_for(delay);
    try {
      (void)comm.create_group(std::vector<int>{1, 2, 3});
      std::fprintf(stderr, "rank %d: the group was made without member 3\n", rank);
    } catch (const PeerError& e) {
      const auto took = Clock::now() - said;
      code = e.peer() == 0 && took < delay + kHeartbeat + 6s ? 0 : 1;
      std::fprintf(stderr, "rank %d: %.1f s after it said so: %s\n", rank,
                   std::chrono::duration<double>(took).count(), e.what());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank %d: %.1f s after it said so, not a PeerError: %s\n", rank,
                   std::chrono::duration<double>(Clock::now() - said).count(), e.what());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
  }
  std::fflush(stderr);
  ::_exit(code);
}

// Starts kWorld ranks running `main` and expects those in `expected` to exit 0 within 60 s;
// kills every other one after them.
template <typename Main>
void expect_ranks_succeed(const std::vector<int>& expected, Main main) {
  const int port = free_port();
  std::vector<pid_t> pids;
  for (int r = 0; r < kWorld; ++r) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) main(r, port);
    pids.push_back(pid);
  }
  const auto deadline = Clock::now() + 60s;
  for (const int r : expected) {
    int status = -1;
    while (::waitpid(pids[static_cast<std::size_t>(r)], &status, WNOHANG) == 0 &&
           Clock::now() < deadline)
      std::this_thread::sleep_for(20ms);
    if (Clock::now() >= deadline) {
      ::kill(pids[static_cast<std::size_t>(r)], SIGKILL);
      ::waitpid(pids[static_cast<std::size_t>(r)], nullptr, 0);
    }
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "rank " << r << " failed (status " << status << "; its stderr is above)";
  }
  for (int r = 0; r < kWorld; ++r) {
    if (std::find(expected.begin(), expected.end(), r) != expected.end()) continue;
    ::kill(pids[static_cast<std::size_t>(r)], SIGKILL);
    ::waitpid(pids[static_cast<std::size_t>(r)], nullptr, 0);
  }
}

void expect_members_name_rank_zero(Stop how, When when) {
  ASSERT_EQ(::pipe(g_ready), 0);
  expect_ranks_succeed({1, 2},
                       [how, when](int rank, int port) { group_rank_main(rank, port, how, when); });
  ::close(g_ready[0]);
  ::close(g_ready[1]);
}

void expect_named_on_every_survivor(int victim, const char* expected, Stop how = Stop::freeze) {
  const int port = free_port();
  std::vector<pid_t> pids;
  for (int r = 0; r < kWorld; ++r) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) rank_main(r, victim, port, expected, how);
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

TEST(FrozenRank, RankZeroHostingTheStoreEndsTheMembersWaitInCreateGroup) {
  expect_members_name_rank_zero(Stop::freeze, When::waiting);
}

TEST(FrozenRank, RankZeroHostingTheStoreEndsCreateGroupCalledAfterItStopped) {
  expect_members_name_rank_zero(Stop::freeze, When::after_stop);
}

TEST(FrozenRank, RankZeroHostingTheStoreEndsCreateGroupCalledAfterTheParentHalted) {
  expect_members_name_rank_zero(Stop::freeze, When::after_halt);
}

TEST(KilledRank, RankZeroHostingTheStoreEndsTheMembersWaitInCreateGroup) {
  expect_members_name_rank_zero(Stop::kill, When::waiting);
}

TEST(KilledRank, RankZeroHostingTheStoreEndsCreateGroupCalledAfterItDied) {
  expect_members_name_rank_zero(Stop::kill, When::after_stop);
}

TEST(KilledRank, EverySurvivorNamesItAndLeavesWithinThreeSecondsWhileRankZeroHostsTheStore) {
  for (int trial = 0; trial < 6; ++trial) {
    const char* transport = trial % 2 == 0 ? "tcp" : "shm";
    SCOPED_TRACE(fmt::format("trial {} over {}", trial, transport));
    ::setenv("LOOM_TRANSPORT", transport, 1);  // the ranks' environment, as a launcher's
    expect_named_on_every_survivor(2, "rank 2 on host", Stop::kill);
    ::unsetenv("LOOM_TRANSPORT");
    if (HasFailure()) return;
  }
}

}  // namespace
}  // namespace loom
