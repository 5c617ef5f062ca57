// Name resolution is bounded by the connection's deadline, however slow the resolver.
#include <gtest/gtest.h>
#include <netdb.h>
#include <sys/socket.h>

#include <chrono>
#include <future>
#include <string>

#include "base/tcp_connect.hpp"

namespace loom {
namespace {

using namespace std::chrono_literals;

TEST(TcpConnect, ANameWhoseResolutionDoesNotAnswerFailsAtTheDeadline) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::promise<void> finished;
  auto slow_dns = [released, &finished](const char*, const char* service, const addrinfo* hints,
                                        addrinfo** found) {
    released.wait_for(10s);  // a resolver that does not answer
    const int rc = ::getaddrinfo("127.0.0.1", service, hints, found);
    finished.set_value();
    return rc;
  };
  std::string error;
  const auto start = std::chrono::steady_clock::now();
  auto addresses = base::resolve_tcp("store.invalid", 1234, base::Deadline(300ms), error, slow_dns);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(addresses, nullptr);
  EXPECT_NE(error.find("timed out"), std::string::npos) << error;
  EXPECT_LT(took, 2s);
  release.set_value();
  // The abandoned resolution still ends, and frees what it found.
  EXPECT_EQ(finished.get_future().wait_for(5s), std::future_status::ready);
}

TEST(TcpConnect, ANameIsResolvedOnItsHelperThread) {
  std::string error;
  auto addresses = base::resolve_tcp("localhost", 1234, base::Deadline(5s), error);
  ASSERT_NE(addresses, nullptr) << error;
  EXPECT_TRUE(addresses->ai_family == AF_INET || addresses->ai_family == AF_INET6);
}

}  // namespace
}  // namespace loom
