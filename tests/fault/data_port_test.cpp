// A rank's data port is reachable by anyone on the network: connections that never authenticate
// must not delay its peers, flood its log, or make it spin.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "../support/ranks.hpp"
#include "base/logging.hpp"
#include "base/socket_io.hpp"
#include "base/tcp_connect.hpp"
#include "store/keys.hpp"

namespace loom {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::RankContext;
using testing::run_ranks_raw;

testing::RunOptions tcp_with_secret() {
  testing::RunOptions opts;
  opts.options.transport.emplace("tcp");
  opts.options.secret.emplace("job-secret");
  opts.options.timeout = 60s;  // far beyond what each test allows
  return opts;
}

// `n` connections to rank `rank`'s data port, made before its first collective.
std::vector<int> connect_to_data_port(Store& store, int rank, int n) {
  const std::string address = store.get_string(
      "loom/" + store::keys::generation_prefix("", 1) + "/" + store::keys::tcp_address(rank), 10s);
  const auto colon = address.rfind(':');
  const auto port = static_cast<std::uint16_t>(std::stoi(address.substr(colon + 1)));
  std::vector<int> fds;
  for (int k = 0; k < n; ++k) {
    std::string error;
    const int fd = base::connect_tcp(address.substr(0, colon), port, base::Deadline(5s), error);
    EXPECT_GE(fd, 0) << error;
    fds.push_back(fd);
  }
  return fds;
}

double cpu_seconds() {
  rusage r{};
  ::getrusage(RUSAGE_SELF, &r);
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
  return s(r.ru_utime) + s(r.ru_stime);
}

// 40 silent clients, and more than the handshakes a rank runs at once.
class SilentClients : public ::testing::TestWithParam<int> {};

TEST_P(SilentClients, DoNotDelayTheFirstCollective) {
  const auto opts = tcp_with_secret();
  const int clients = GetParam();
  run_ranks_raw(
      2,
      [&](RankContext& ctx) {
        Communicator comm(ctx.store, ctx.rank, ctx.size, opts.options);
        std::vector<int> silent;
        if (ctx.rank == 0) {
          silent = connect_to_data_port(*ctx.store, 1, clients);
          ctx.store->set("connected", std::string("1"));
        } else {
          ctx.store->wait({"connected"}, 30s);
        }
        std::vector<float> v(1000, 1.0f);
        const auto start = Clock::now();
        comm.all_reduce(v.data(), v.size(), DataType::f32, ReduceOp::sum);
        EXPECT_LT(Clock::now() - start, 5s);
        EXPECT_EQ(v[999], 2.0f);
        for (int fd : silent) ::close(fd);
      },
      opts);
}

INSTANTIATE_TEST_SUITE_P(DataPort, SilentClients, ::testing::Values(40, 100),
                         [](const auto& info) { return std::to_string(info.param); });

TEST(DataPort, FortyRejectedConnectionsGiveOneWarning) {
  const auto opts = tcp_with_secret();
  run_ranks_raw(
      2,
      [&](RankContext& ctx) {
        Communicator comm(ctx.store, ctx.rank, ctx.size, opts.options);
        int saved_stderr = -1, log = -1;
        if (ctx.rank == 0) {
          for (int fd : connect_to_data_port(*ctx.store, 1, 40)) {
            const std::vector<std::uint8_t> garbage(200, 0x41);
            base::write_exact(fd, garbage.data(), garbage.size(), base::Deadline(5s));
            ::close(fd);
          }
          ctx.store->set("connected", std::string("1"));
        } else {
          ctx.store->wait({"connected"}, 30s);
          log = ::memfd_create("log", 0);
          saved_stderr = ::dup(2);
          ::dup2(log, 2);  // the logger writes to stderr
        }
        std::vector<float> v(1000, 1.0f);
        comm.all_reduce(v.data(), v.size(), DataType::f32, ReduceOp::sum);
        EXPECT_EQ(v[999], 2.0f);
        if (ctx.rank == 0) return;
        base::log().flush();
        ::dup2(saved_stderr, 2);
        std::string text(static_cast<std::size_t>(::lseek(log, 0, SEEK_END)), '\0');
        ASSERT_EQ(::pread(log, text.data(), text.size(), 0), static_cast<ssize_t>(text.size()));
        int warnings = 0;
        for (std::size_t at = 0; (at = text.find("rejected a connection", at)) != std::string::npos;
             ++at) {
          const std::size_t line = text.rfind('\n', at);
          warnings +=
              text.substr(line == std::string::npos ? 0 : line, at - line).find("warning:") !=
              std::string::npos;
        }
        EXPECT_EQ(warnings, 1) << text;
      },
      opts);
}

TEST(DataPort, RunningOutOfDescriptorsDoesNotMakeTheAcceptingRankSpin) {
  const auto opts = tcp_with_secret();
  run_ranks_raw(
      2,
      [&](RankContext& ctx) {
        Communicator comm(ctx.store, ctx.rank, ctx.size, opts.options);
        float x = 1;
        if (ctx.rank == 0) {  // dials rank 1, whose accept fails with EMFILE for a while
          ctx.store->wait({"out of descriptors"}, 30s);
          comm.all_reduce(&x, &x, 1, DataType::f32, ReduceOp::sum);
          EXPECT_EQ(x, 2.0f);
          return;
        }
        int highest = 0;
        for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd"))
          highest = std::max(highest, std::stoi(entry.path().filename().string()));
        rlimit limit{};
        ::getrlimit(RLIMIT_NOFILE, &limit);
        limit.rlim_cur = static_cast<rlim_t>(highest + 16);
        ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &limit), 0);
        std::vector<int> filler;
        for (int fd; (fd = ::dup(0)) >= 0;) filler.push_back(fd);
        ctx.store->set("out of descriptors", std::string("1"));
        std::thread release([&] {
          std::this_thread::sleep_for(3s);
          for (int fd : filler) ::close(fd);
        });
        const double cpu_before = cpu_seconds();
        comm.all_reduce(&x, &x, 1, DataType::f32, ReduceOp::sum);
        const double cpu = cpu_seconds() - cpu_before;
        release.join();
        EXPECT_EQ(x, 2.0f);
        EXPECT_LT(cpu, 0.5) << "cpu seconds while the descriptors ran out for 3 s";
      },
      opts);
}

}  // namespace
}  // namespace loom
