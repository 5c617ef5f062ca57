// The teardown drill: one rank of three is destroyed, aborted, exits or is SIGKILLed while the
// job is idle, in a collective, in a batch of sends and receives, setting up its connections, or
// in split(), over tcp and over shm. Whatever the cell: no rank hangs (every call ends within
// seconds), none crashes, the others shrink to a working communicator (checked exactly), every
// rank that lives gives back every descriptor it took, and no /dev/shm segment is left behind.
// The slow soak runs the same cells many times (`teardown.DrillRepeated`).
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "../support/ranks.hpp"
#include "loom/store.hpp"

namespace loom {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::RankContext;

enum class State { idle, collective, batch, connect, split };
enum class Action { destroy, abort, exit, kill };
constexpr const char* kStates[] = {"idle", "collective", "batch", "connect", "split"};
constexpr const char* kActions[] = {"destroy", "abort", "exit", "kill"};

// Rank 0 hosts the store; rank 1 is acted upon 300 ms into the state; rank 2 enters the state's
// call 1 s late, so that the others are inside it (waiting for rank 2) when rank 1 is hit.
constexpr int kVictim = 1, kLate = 2;

// Socket inodes of the TCP connections to or from `port` (the harness's store, which rank 0
// serves: its accepted connections come and go with the other ranks, not with this rank's).
std::set<std::string> store_sockets(std::uint16_t port) {
  std::set<std::string> inodes;
  const std::string hex = fmt::format(":{:04X}", port);
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
          timeout >> inode;
      if (local.ends_with(hex) || remote.ends_with(hex)) inodes.insert("socket:[" + inode + "]");
    }
  }
  return inodes;
}

// This process's descriptors, less those of its connections with the harness's store (and, with
// `sockets` false, less every socket).
std::multiset<std::string> open_fds(std::uint16_t store_port, bool sockets) {
  const auto skip = store_sockets(store_port);
  std::multiset<std::string> n;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const auto target = std::filesystem::read_symlink(entry.path(), ec).string();
    if (ec) continue;  // closed since it was listed (another thread's, for a moment)
    if (!skip.count(target) && (sockets || !target.starts_with("socket:"))) n.insert(target);
  }
  return n;
}

// The job tokens of the /dev/shm segments this process maps now (each communicator names its
// segments loom-<token>-...): the drill's own, told apart from those of tests running beside it
// (a rank another test kills leaves its segments to the next sweep).
std::set<std::string> mapped_tokens() {
  std::set<std::string> tokens;
  std::ifstream maps("/proc/self/maps");
  constexpr std::string_view kPrefix = "/dev/shm/loom-";
  for (std::string line; std::getline(maps, line);) {
    const auto at = line.find(kPrefix);
    if (at == std::string::npos) continue;
    const std::string token = line.substr(at + kPrefix.size(), 16);
    if (token.size() == 16 && token.find_first_not_of("0123456789abcdef") == std::string::npos)
      tokens.insert(token);
  }
  return tokens;
}

// Records tokens in the drill's folder, one file per rank and moment.
void record_tokens(const std::string& folder, int rank, const char* when,
                   const std::set<std::string>& tokens) {
  std::ofstream out(fmt::format("{}/{}-{}", folder, rank, when));
  for (const auto& t : tokens) out << t << "\n";
}

std::set<std::string> recorded_tokens(const std::string& folder) {
  std::set<std::string> tokens;
  for (const auto& e : std::filesystem::directory_iterator(folder)) {
    std::ifstream in(e.path());
    for (std::string t; std::getline(in, t);) tokens.insert(t);
  }
  return tokens;
}

// The drill's segments in /dev/shm (named after one of `tokens`) made since `since` that no
// process holds (Loom's creators hold a lock on theirs while they live): left behind.
std::vector<std::string> orphaned_segments(std::time_t since, const std::set<std::string>& tokens) {
  std::vector<std::string> found;
  DIR* d = ::opendir("/dev/shm");
  if (d == nullptr) return found;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind("loom-", 0) != 0 || !tokens.count(name.substr(5, 16))) continue;
    const std::string path = "/dev/shm/" + name;
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 || st.st_mtime < since) continue;
    const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) continue;
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) found.push_back(name);
    ::close(fd);
  }
  ::closedir(d);
  return found;
}

void act(Action action, Communicator& comm, RankContext& ctx) {
  switch (action) {
    case Action::destroy:
      comm.destroy();
      break;
    case Action::abort:
      comm.abort();
      break;
    case Action::exit:
      ctx.store->add("done", 1);  // as the harness counts a rank that finished
      ::_exit(0);
    case Action::kill:
      testing::die_by_sigkill(ctx);
  }
}

std::int64_t sum_of_ones(Communicator& comm) {
  std::int64_t v = 1;
  comm.all_reduce(&v, 1, DataType::i64, ReduceOp::sum);
  return v;
}

// The state's call, by every rank (rank kLate a second late). Its outcome does not matter, only
// that it ends.
void enter(State state, Communicator& comm, int rank, const std::string& folder) {
  if (rank == kLate && state != State::idle) std::this_thread::sleep_for(1s);
  switch (state) {
    case State::idle:
      std::this_thread::sleep_for(600ms);  // between calls while the victim is hit
      sum_of_ones(comm);
      break;
    case State::collective:
    case State::connect: {
      std::vector<std::int32_t> v(1 << 16, 1);
      comm.all_reduce(v.data(), v.size(), DataType::i32, ReduceOp::sum);
      break;
    }
    case State::batch: {
      std::int32_t out = rank, in = -1;
      Work r = comm.recv_async(&in, 1, DataType::i32, (rank + 2) % 3);
      Work s = comm.send_async(&out, 1, DataType::i32, (rank + 1) % 3);
      s.wait(), r.wait();
      break;
    }
    case State::split: {
      auto child = comm.split(0, rank);
      if (child) sum_of_ones(*child);
      record_tokens(folder, rank, "split", mapped_tokens());
      break;
    }
  }
}

void drill(const std::string& transport, State state, Action action) {
  const std::time_t started_at = std::time(nullptr);
  const std::string folder = fmt::format("/tmp/loom-drill-{}", ::getpid());
  std::filesystem::remove_all(folder);
  std::filesystem::create_directories(folder);
  testing::RunOptions run;
  run.timeout = 120s;
  if (action == Action::kill) run.may_die = {kVictim};
  testing::run_ranks_raw(
      3,
      [&](RankContext& ctx) {
        // Rank 0 serves the harness's store, whose sockets come and go with the other ranks': there
        // only the other descriptors are counted (shared memory, files, pipes); ranks 1 and 2 count
        // every one.
        const std::uint16_t store_port = dynamic_cast<TcpStore&>(*ctx.store).port();
        const bool sockets = ctx.rank != 0;
        const auto fds_before = open_fds(store_port, sockets);
        {
          Options o;
          o.transport = transport;
          o.timeout = 20s;
          // A store connection of its own, which goes with the communicator: the harness's store
          // keeps idle connections that would count as this rank's descriptors.
          Communicator comm(ctx.store->clone(), ctx.rank, ctx.size, o);
          record_tokens(folder, ctx.rank, "first", {testing::job_token_of(*ctx.store)});
          if (state != State::connect) sum_of_ones(comm);  // every connection up
          std::thread hit;
          if (ctx.rank == kVictim)
            hit = std::thread([&] {
              std::this_thread::sleep_for(300ms);
              act(action, comm, ctx);
            });
          const auto start = Clock::now();
          try {
            enter(state, comm, ctx.rank, folder);
          } catch (const Error&) {
          }
          EXPECT_LT(Clock::now() - start, 15s)
              << "rank " << ctx.rank << " hung in the state's call";
          if (hit.joinable()) hit.join();
          // The others shrink without the victim, which joins only after its own abort.
          if (ctx.rank != kVictim || action == Action::abort) {
            const auto shrinking = Clock::now();
            Communicator next = comm.shrink(10s);
            EXPECT_LT(Clock::now() - shrinking, 8s) << "rank " << ctx.rank << ": shrink took long";
            EXPECT_EQ(next.size(), action == Action::abort ? 3 : 2);
            EXPECT_EQ(sum_of_ones(next), next.size());
            record_tokens(folder, ctx.rank, "shrunk", mapped_tokens());
            next.destroy();
          }
          comm.destroy();
        }
        const auto fds_after = open_fds(store_port, sockets);
        std::string kept;
        for (const auto& f : fds_after)
          if (fds_after.count(f) > fds_before.count(f)) kept += " " + f;
        EXPECT_EQ(fds_after.size(), fds_before.size())
            << "rank " << ctx.rank << " kept descriptors:" << kept;
      },
      run);
  const std::set<std::string> tokens = recorded_tokens(folder);
  std::filesystem::remove_all(folder);
  // The first communicator's token, and over shm the shrunk one's too (the survivors mapped its
  // segments): the check has segments to look for.
  EXPECT_GE(tokens.size(), transport == "shm" ? 2u : 1u);
  const auto left = orphaned_segments(started_at, tokens);
  EXPECT_TRUE(left.empty()) << left.size() << " segment(s) left in /dev/shm, e.g. "
                            << (left.empty() ? "" : left.front());
}

class Teardown : public ::testing::TestWithParam<std::tuple<const char*, State, Action>> {};

TEST_P(Teardown, NoHangNoCrashNoLeak) {
  const auto [transport, state, action] = GetParam();
  drill(transport, state, action);
}

INSTANTIATE_TEST_SUITE_P(Drill, Teardown,
                         ::testing::Combine(::testing::Values("tcp", "shm"),
                                            ::testing::Values(State::idle, State::collective,
                                                              State::batch, State::connect,
                                                              State::split),
                                            ::testing::Values(Action::destroy, Action::abort,
                                                              Action::exit, Action::kill)),
                         [](const auto& info) {
                           return fmt::format("{}_{}_{}", std::get<0>(info.param),
                                              kStates[static_cast<int>(std::get<1>(info.param))],
                                              kActions[static_cast<int>(std::get<2>(info.param))]);
                         });

}  // namespace
}  // namespace loom
