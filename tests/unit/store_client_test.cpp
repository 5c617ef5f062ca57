// The TcpStore client: shared between threads without one's wait holding up another's calls,
// bounded in every wait (the longest timeouts too), strict about replies.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <thread>

#include "loom/store.hpp"
#include "store_wire.hpp"

namespace loom {
namespace {

using namespace std::chrono_literals;
using namespace store_test;

TEST(Stores, ALongWaitOnASharedClientDoesNotHoldUpItsOtherCalls) {
  StoreServer server("127.0.0.1", 0, std::string());
  auto shared = std::make_shared<TcpStore>("127.0.0.1", server.port(), 2s, std::string());
  // The waiter's key is set through the same client, by a call made while the wait is out.
  auto waiter = std::async(std::launch::async, [&] { shared->wait({"go"}, 5s); });
  std::this_thread::sleep_for(200ms);  // let the wait reach the server
  const auto start = std::chrono::steady_clock::now();
  shared->set("go", std::string("now"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  EXPECT_NO_THROW(waiter.get());
  EXPECT_EQ(shared->get_string("go", 1s), "now");
}

TEST(Stores, GetWithTheLongestTimeoutWaitsForTheValue) {
  StoreServer server("127.0.0.1", 0, std::string());
  TcpStore client("127.0.0.1", server.port(), 2s, std::string());
  TcpStore other("127.0.0.1", server.port(), 2s, std::string());
  auto setter = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(200ms);  // the get is waiting by then
    other.set("late", std::string("here"));
  });
  EXPECT_EQ(client.get_string("late", std::chrono::milliseconds::max()), "here");
  client.wait({"late"}, std::chrono::milliseconds::max());
  setter.get();
}

TEST(Stores, AClientCarriesOnWithARestartedServer) {
  auto server = std::make_unique<StoreServer>("127.0.0.1", 0, std::string());
  const std::uint16_t port = server->port();
  TcpStore client("127.0.0.1", port, 2s, std::string());
  client.set("before", std::string("1"));
  server.reset();  // closes the client's idle connection
  server = std::make_unique<StoreServer>("127.0.0.1", port, std::string());
  EXPECT_NO_THROW(client.set("after", std::string("2")));
  EXPECT_EQ(client.get_string("after", 1s), "2");
}

// A watcher's clone (the health monitor's) learns at once that a server it reached is gone: the
// client it was cloned from still waits for a server to come back within its timeout.
TEST(Stores, ABoundedCloneGivesUpAtOnceWhenTheServerIsGone) {
  auto server = std::make_unique<StoreServer>("127.0.0.1", 0, std::string());
  const std::uint16_t port = server->port();
  TcpStore client("127.0.0.1", port, 2s, std::string(), 5s);
  const std::shared_ptr<Store> watcher = client.clone_bounded(5s);
  watcher->set("before", std::string("1"));
  server.reset();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(watcher->add("after", 1), Error);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  // The original retries a refusal: a server back within its request timeout answers it.
  auto restart = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(300ms);
    server = std::make_unique<StoreServer>("127.0.0.1", port, std::string());
  });
  EXPECT_EQ(client.add("after", 1), 1);
  restart.get();
}

// A socket listening on 127.0.0.1 at a port the kernel picks, written to `port`.
int listen_on_loopback(std::uint16_t& port) {
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (::bind(listener, reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(listener, 4) != 0)
    throw std::runtime_error("cannot listen");
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len);
  port = ntohs(a.sin_port);
  return listener;
}

// A server that authenticates nobody, answers the first request with `reply_body` and stays.
class OneReplyServer {
 public:
  explicit OneReplyServer(std::vector<std::uint8_t> reply_body) {
    listener_ = listen_on_loopback(port_);
    thread_ = std::thread([this, reply = framed(reply_body)] {
      client_ = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      const auto challenge = base::Challenge{}.encode();  // no secret required
      std::uint32_t len = 0;
      std::vector<std::uint8_t> request;
      base::Deadline deadline(5s);
      if (client_ < 0 || !send_bytes(client_, challenge.data(), challenge.size()) ||
          base::read_exact(client_, &len, 4, deadline) != base::IoResult::ok)
        return;
      request.resize(len);
      if (base::read_exact(client_, request.data(), len, deadline) == base::IoResult::ok)
        send_bytes(client_, reply.data(), reply.size());
    });
  }
  ~OneReplyServer() {
    thread_.join();
    if (client_ >= 0) ::close(client_);
    ::close(listener_);
  }
  std::uint16_t port() const { return port_; }

 private:
  int listener_ = -1, client_ = -1;
  std::uint16_t port_ = 0;
  std::thread thread_;
};

TEST(Stores, AReplyWithAnUnknownStatusIsAStoreError) {
  OneReplyServer server({7});
  TcpStore client("127.0.0.1", server.port(), 2s, std::string());
  try {
    client.set("k", std::string("v"));
    ADD_FAILURE() << "a reply of status 7 was taken for success";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown status 7"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("set('k')"), std::string::npos) << e.what();
  }
}

// A server whose process cannot accept (out of file descriptors) leaves connections queued in
// the kernel, unserved: the client gives up within its request timeout and says what that looks
// like, not just that authentication failed.
TEST(Stores, AConnectionQueuedButNeverServedSaysSo) {
  std::uint16_t port = 0;
  const int listener = listen_on_loopback(port);  // and never accept
  const auto start = std::chrono::steady_clock::now();
  try {
    TcpStore client("127.0.0.1", port, 2s, std::string(), 300ms);
    ADD_FAILURE() << "a server that never served the connection was taken for a store";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("queued but never served"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("out of file descriptors"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  ::close(listener);
}

TEST(Stores, AReplyWithTrailingBytesIsAStoreError) {
  OneReplyServer server({0, 1, 2});  // OK, then bytes a set's reply does not have
  TcpStore client("127.0.0.1", server.port(), 2s, std::string());
  EXPECT_THROW(client.set("k", std::string("v")), StoreError);
}

}  // namespace
}  // namespace loom
