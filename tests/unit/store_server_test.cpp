// The store server under pressure: it never stops accepting, strangers cannot use up its
// descriptors, clients that go away free theirs at once, a wait is answered once, and no
// process it execs inherits its sockets.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "loom/store.hpp"
#include "store_wire.hpp"

namespace loom {
namespace {

using namespace std::chrono_literals;
using namespace store_test;
using protocol::Status;

// Waits up to `timeout` for `condition`; whether it came true.
template <typename Condition>
bool eventually(Condition condition, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (condition()) return true;
    if (std::chrono::steady_clock::now() >= end) return false;
    std::this_thread::sleep_for(10ms);
  }
}

// The sockets among a process's descriptors.
std::vector<std::string> sockets_of(pid_t pid) {
  std::vector<std::string> out;
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::error_code ec;
    const auto target = std::filesystem::read_symlink(entry.path(), ec).string();
    if (!ec && target.rfind("socket:", 0) == 0) out.push_back(target);
  }
  return out;
}

TEST(StoreServer, AProcessItExecsHoldsNeitherTheListeningNorAnAcceptedSocket) {
  StoreServer server("127.0.0.1", 0, std::string());
  TcpStore client("127.0.0.1", server.port(), 2s, std::string());
  client.set("k", std::string("v"));             // the server now holds an accepted socket too
  ASSERT_GE(sockets_of(::getpid()).size(), 3u);  // listening, accepted, the client's

  // The pipe's write end closes on exec, so EOF on it says the child has exec'ed.
  int exec_done[2];
  ASSERT_EQ(::pipe2(exec_done, O_CLOEXEC), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::execl("/bin/sleep", "sleep", "30", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(exec_done[1]);
  char byte;
  while (::read(exec_done[0], &byte, 1) > 0) {
  }
  ::close(exec_done[0]);
  const auto inherited = sockets_of(child);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_TRUE(inherited.empty()) << "the exec'ed child holds " << inherited.size()
                                 << " socket(s), first " << inherited.front();
}

TEST(StoreServer, KeepsServingAfterAcceptRunsOutOfDescriptors) {
  int to_child[2], from_child[2];
  ASSERT_EQ(::pipe(to_child), 0);
  ASSERT_EQ(::pipe(from_child), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(to_child[1]);
    ::close(from_child[0]);
    // The server's process, left only three descriptors more than it holds.
    StoreServer server("127.0.0.1", 0, std::string());
    std::set<int> open;
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd"))
      open.insert(std::stoi(entry.path().filename().string()));
    rlim_t limit = 0;
    for (int free = 0; free < 3; ++limit) free += open.count(static_cast<int>(limit)) == 0;
    const rlimit tight{limit, limit};
    const std::uint16_t port = server.port();
    if (::setrlimit(RLIMIT_NOFILE, &tight) != 0 || ::write(from_child[1], &port, 2) != 2)
      ::_exit(1);
    char byte;
    while (::read(to_child[0], &byte, 1) > 0) {  // until the test closes the pipe
    }
    ::_exit(0);
  }
  ::close(to_child[0]);
  ::close(from_child[1]);
  std::uint16_t port = 0;
  ASSERT_EQ(::read(from_child[0], &port, 2), 2);

  std::vector<int> flood;
  for (int i = 0; i < 32; ++i) {
    const int fd = connect_raw(port);  // the kernel completes these before accept
    ASSERT_GE(fd, 0);
    flood.push_back(fd);
  }
  int greeted = 0;
  const base::Deadline a_second(1s);
  for (int fd : flood) greeted += challenged(fd, a_second) ? 1 : 0;
  EXPECT_LT(greeted, 32) << "the server never ran out of descriptors: the test proves nothing";
  for (int fd : flood) ::close(fd);

  // Once those connections are gone, new ones are served again.
  const int fresh = open_connection(port);
  EXPECT_GE(fresh, 0) << "no challenge: the server stopped accepting";
  if (fresh >= 0) ::close(fresh);
  {
    TcpStore client("127.0.0.1", port, 10s, std::string());
    client.set("after", std::string("served"));
    EXPECT_EQ(client.get_string("after", 1s), "served");
  }
  ::close(to_child[1]);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST(StoreServer, RaisesTheSoftDescriptorLimitToTheHardOne) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // a fresh process: the limit is raised once per process
    rlimit limit{};
    ::getrlimit(RLIMIT_NOFILE, &limit);
    if (limit.rlim_max < 64) ::_exit(2);
    limit.rlim_cur = limit.rlim_max / 2;
    ::setrlimit(RLIMIT_NOFILE, &limit);
    StoreServer server("127.0.0.1", 0, std::string());
    rlimit now{};
    ::getrlimit(RLIMIT_NOFILE, &now);
    ::_exit(now.rlim_cur == limit.rlim_max ? 0 : 1);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the soft limit was left below the hard one";
}

TEST(StoreServer, AClientThatGoesAwayDuringAWaitFreesItsConnectionAtOnce) {
  StoreServer server("127.0.0.1", 0, std::string());
  const int before = open_sockets();
  std::vector<int> waiting;
  for (int i = 0; i < 20; ++i) {
    const int fd = open_connection(server.port());
    ASSERT_GE(fd, 0);
    const auto get = get_request("never" + std::to_string(i), 60000);
    ASSERT_TRUE(send_bytes(fd, get.data(), get.size()));
    waiting.push_back(fd);
  }
  ASSERT_TRUE(eventually([&] { return open_sockets() == before + 40; }, 5s));
  for (int fd : waiting) ::close(fd);
  EXPECT_TRUE(eventually([&] { return open_sockets() == before; }, 5s))
      << open_sockets() - before << " connection(s) still held by the server";
  TcpStore client("127.0.0.1", server.port(), 2s, std::string());
  client.set("never0", std::string("late"));  // nobody is left to answer
  EXPECT_EQ(client.get_string("never0", 1s), "late");
}

TEST(StoreServer, CapsConnectionsAwaitingAuthenticationFromOneAddress) {
  StoreServer server("127.0.0.1", 0, std::string("s3cret"));
  std::vector<int> idle;
  int greeted = 0, turned_away = 0;
  for (int i = 0; i < 200; ++i) {
    const int fd = connect_raw(server.port());
    ASSERT_GE(fd, 0);
    idle.push_back(fd);
  }
  for (int fd : idle) {
    std::array<std::uint8_t, base::Challenge::kBytes> raw{};
    const auto r = base::read_exact(fd, raw.data(), raw.size(), base::Deadline(2s));
    greeted += r == base::IoResult::ok;
    turned_away += r == base::IoResult::closed;
  }
  EXPECT_EQ(greeted, 64);
  EXPECT_EQ(turned_away, 200 - 64);
  // A client with the secret still gets in: the idle ones give way after a second.
  TcpStore client("127.0.0.1", server.port(), 10s, std::string("s3cret"));
  client.set("k", std::string("v"));
  EXPECT_EQ(client.get_string("k", 1s), "v");
  for (int fd : idle) ::close(fd);
}

TEST(StoreServer, DropsAConnectionThatDoesNotAuthenticateWithinFiveSeconds) {
  StoreServer server("127.0.0.1", 0, std::string("s3cret"));
  const int fd = connect_raw(server.port());
  ASSERT_GE(fd, 0);
  const auto start = std::chrono::steady_clock::now();
  std::uint8_t byte;
  base::IoResult r;
  while ((r = base::read_exact(fd, &byte, 1, base::Deadline(8s))) == base::IoResult::ok) {
  }
  const auto waited = std::chrono::steady_clock::now() - start;
  ::close(fd);
  EXPECT_EQ(r, base::IoResult::closed);
  EXPECT_GE(waited, 4500ms);
  EXPECT_LT(waited, 7s);
}

TEST(StoreServer, AnAddThatWouldOverflowIsRefusedNamingTheKeyAndChangesNothing) {
  StoreServer server("127.0.0.1", 0, std::string());
  TcpStore client("127.0.0.1", server.port(), 2s, std::string());
  EXPECT_EQ(client.add("counter", INT64_MAX - 1), INT64_MAX - 1);
  try {
    client.add("counter", 2);
    ADD_FAILURE() << "no error";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("'counter'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("overflow"), std::string::npos) << e.what();
  }
  EXPECT_EQ(client.add("counter", 0), INT64_MAX - 1);
  EXPECT_EQ(client.add("counter", INT64_MIN), -2);
}

// A get whose timer expires while the io thread is busy, answered in the same pass by a set
// that arrived meanwhile: the timer's handler must find the wait gone (before, it answered a
// second time through a freed list node). Run under ASan by tools/test.sh.
TEST(StoreServer, AWaitWhoseTimerExpiresAsItIsAnsweredIsAnsweredOnce) {
  StoreServer server("127.0.0.1", 0, std::string());
  const int getter = open_connection(server.port());
  const int setter = open_connection(server.port());
  const int staller = open_connection(server.port());
  ASSERT_GE(getter, 0);
  ASSERT_GE(setter, 0);
  ASSERT_GE(staller, 0);
  // A check of 64 Ki keys takes the io thread several milliseconds.
  std::vector<std::string> many;
  for (int i = 0; i < 65536; ++i) many.push_back(fmt::format("stall-{}", i));
  const auto stall = check_request(many);
  std::mt19937 random(12345);
  const auto end = std::chrono::steady_clock::now() + 8s;
  int rounds = 0, answered_by_set = 0;
  while (std::chrono::steady_clock::now() < end) {
    const std::string key = fmt::format("k{}", rounds++);
    const auto set = set_request(key, "v");
    const auto get = get_request(key, 1 + random() % 5);
    // The set and the stall are held back by their last byte.
    ASSERT_TRUE(send_bytes(setter, set.data(), set.size() - 1));
    ASSERT_TRUE(send_bytes(staller, stall.data(), stall.size() - 1));
    ASSERT_TRUE(send_bytes(getter, get.data(), get.size()));
    std::this_thread::sleep_for(std::chrono::microseconds(200 + random() % 800));
    ASSERT_TRUE(send_bytes(staller, &stall.back(), 1));
    std::this_thread::sleep_for(std::chrono::microseconds(random() % 3000));
    ASSERT_TRUE(send_bytes(setter, &set.back(), 1));

    auto got = read_reply(getter, 5s);
    ASSERT_TRUE(got.has_value());
    ASSERT_NE(got->status, Status::error);
    answered_by_set += got->status == Status::ok;
    ASSERT_TRUE(read_reply(setter, 5s).has_value());
    ASSERT_TRUE(read_reply(staller, 5s).has_value());
    // A second answer to the get would be read here in place of the check's.
    const auto check = check_request({key});
    ASSERT_TRUE(send_bytes(getter, check.data(), check.size()));
    auto checked = read_reply(getter, 5s);
    ASSERT_TRUE(checked.has_value());
    ASSERT_EQ(checked->status, Status::ok) << "round " << rounds << ": a second reply to the get";
    ASSERT_EQ(protocol::reply_flags(*checked, 1), std::vector<bool>{true});
  }
  // Some gets were answered by the set that raced their timer.
  EXPECT_GT(answered_by_set, 0) << "in " << rounds << " rounds";
  ::close(getter);
  ::close(setter);
  ::close(staller);
}

}  // namespace
}  // namespace loom
