// The rendezvous stores: the same contract over TCP and over a file, and a server that survives
// malformed and oversized messages.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <thread>

#include "base/auth.hpp"
#include "base/socket_io.hpp"
#include "base/tcp_connect.hpp"
#include "loom/store.hpp"

namespace loom {
namespace {

using namespace std::chrono_literals;

struct StoreFactory {
  const char* name;
  std::function<std::shared_ptr<Store>()>
      make;  // a second call gives another client of the same store
};

class StoreContract : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "tcp") {
      server_ = std::make_unique<StoreServer>("127.0.0.1", 0);
      make_ = [port = server_->port()] {
        return std::make_shared<TcpStore>("127.0.0.1", port, 5s);
      };
    } else {
      std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
      std::replace(name.begin(), name.end(), '/', '_');
      std::string path =
          ::testing::TempDir() + "/loom-store-" + std::to_string(::getpid()) + "-" + name;
      ::unlink(path.c_str());
      make_ = [path] { return std::make_shared<FileStore>(path); };
      file_ = path;
    }
  }
  void TearDown() override {
    if (!file_.empty()) {
      ::unlink(file_.c_str());
      ::unlink((file_ + ".lock").c_str());
    }
  }
  std::unique_ptr<StoreServer> server_;
  std::string file_;
  std::function<std::shared_ptr<Store>()> make_;
};

TEST_P(StoreContract, SetGetAddCompareSetRemoveCheck) {
  auto a = make_(), b = make_();
  a->set("k", std::string("v1"));
  EXPECT_EQ(b->get_string("k", 1s), "v1");
  EXPECT_EQ(a->add("n", 5), 5);
  EXPECT_EQ(b->add("n", -2), 3);
  EXPECT_EQ(a->add("n", 0), 3);
  Bytes x{'x'}, y{'y'};
  EXPECT_EQ(a->compare_set("c", {}, x), x);  // absent: set
  EXPECT_EQ(b->compare_set("c", y, y), x);   // wrong expectation: unchanged
  EXPECT_EQ(b->compare_set("c", x, y), y);
  EXPECT_EQ(a->check({"k", "c", "missing"}), (std::vector<bool>{true, true, false}));
  EXPECT_TRUE(a->remove("k"));
  EXPECT_FALSE(a->remove("k"));
  EXPECT_EQ(b->check({"k"}), std::vector<bool>{false});
  Bytes empty_value;
  a->set("empty", empty_value);
  EXPECT_TRUE(b->get("empty", 1s).empty());
}

TEST_P(StoreContract, WaitAndGetBlockUntilAnotherClientSets) {
  auto a = make_(), b = make_();
  std::thread setter([&] {
    std::this_thread::sleep_for(100ms);
    b->set("late", std::string("here"));
    b->set("late2", std::string("too"));
  });
  EXPECT_EQ(a->get_string("late", 5s), "here");
  a->wait({"late", "late2"}, 5s);
  setter.join();
}

TEST_P(StoreContract, WaitTimesOutWithTimeoutError) {
  auto a = make_();
  auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(a->wait({"never"}, 200ms), TimeoutError);
  EXPECT_THROW(a->get("never", 200ms), TimeoutError);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  a->set("after", std::string("ok"));  // the client is still usable
  EXPECT_EQ(a->get_string("after", 1s), "ok");
}

TEST_P(StoreContract, AddOnNonIntegerIsAnError) {
  auto a = make_();
  a->set("text", std::string("abc"));
  EXPECT_THROW(a->add("text", 1), StoreError);
  EXPECT_EQ(a->add("fine", 1), 1);
}

TEST_P(StoreContract, PrefixStoresDoNotSeeEachOther) {
  auto base = make_();
  PrefixStore p1("one", base), p2("two", base);
  p1.set("k", std::string("1"));
  p2.set("k", std::string("2"));
  EXPECT_EQ(p1.get_string("k", 1s), "1");
  EXPECT_EQ(p2.get_string("k", 1s), "2");
  EXPECT_EQ(base->get_string("one/k", 1s), "1");
}

INSTANTIATE_TEST_SUITE_P(Stores, StoreContract, ::testing::Values("tcp", "file"),
                         [](const auto& info) { return info.param; });

// Connects and answers the server's challenge (with `secret`, or none): the fd, ready for
// requests, or -1 when the server closed the connection.
int authenticated_connection(std::uint16_t port, const std::string& secret = "") {
  std::string error;
  base::Deadline deadline(2s);
  int fd = base::connect_tcp("127.0.0.1", port, deadline, error);
  EXPECT_GE(fd, 0) << error;
  std::array<std::uint8_t, base::Challenge::kBytes> raw{};
  EXPECT_EQ(base::read_exact(fd, raw.data(), raw.size(), deadline), base::IoResult::ok);
  auto challenge = base::Challenge::decode(raw.data(), raw.size());
  EXPECT_TRUE(challenge.has_value());
  base::Handshake handshake("loom-store", secret);
  auto reply = handshake.respond(*challenge, {});
  EXPECT_EQ(reply.error, "");
  base::write_exact(fd, reply.bytes.data(), reply.bytes.size(), deadline);
  std::vector<std::uint8_t> proof(handshake.proof_bytes());
  if (base::read_exact(fd, proof.data(), proof.size(), deadline) != base::IoResult::ok) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Sends raw bytes to the server and returns the reply status (or -1 when the server closed the
// connection without one).
int raw_exchange(std::uint16_t port, const std::vector<std::uint8_t>& bytes) {
  int fd = authenticated_connection(port);
  base::Deadline deadline(2s);
  base::write_exact(fd, bytes.data(), bytes.size(), deadline);
  std::uint32_t len = 0;
  std::uint8_t status = 0xff;
  int result = -1;
  if (base::read_exact(fd, &len, 4, deadline) == base::IoResult::ok && len >= 1 &&
      len < (1u << 20) && base::read_exact(fd, &status, 1, deadline) == base::IoResult::ok)
    result = status;
  ::close(fd);
  return result;
}

std::vector<std::uint8_t> frame(std::uint32_t len, const std::vector<std::uint8_t>& body) {
  std::vector<std::uint8_t> out(4 + body.size());
  std::memcpy(out.data(), &len, 4);
  if (!body.empty()) std::memcpy(out.data() + 4, body.data(), body.size());
  return out;
}

TEST(StoreServer, RejectsMalformedAndOversizedMessagesAndKeepsServing) {
  StoreServer server("127.0.0.1", 0, std::string());  // no secret: the raw bytes reach the parser
  const int kError = 2;
  EXPECT_EQ(raw_exchange(server.port(), frame(0, {})), kError);                  // empty
  EXPECT_EQ(raw_exchange(server.port(), frame(0x7fffffff, {1, 2, 3})), kError);  // oversized length
  EXPECT_EQ(raw_exchange(server.port(), frame(1, {99})), kError);                // unknown opcode
  EXPECT_EQ(raw_exchange(server.port(), frame(6, {1, 200, 0, 0, 0, 'k'})),
            kError);  // key runs past the end
  EXPECT_EQ(raw_exchange(server.port(), frame(10, {1, 1, 0, 0, 0, 'k', 0, 0, 0, 0})),
            0);  // a valid set
  EXPECT_EQ(raw_exchange(server.port(), frame(11, {1, 1, 0, 0, 0, 'k', 0, 0, 0, 0, 9})),
            kError);                                      // trailing byte
  std::vector<std::uint8_t> long_key(5 + 8192 + 4, 'a');  // a set whose key has 8192 > 4096 bytes
  const std::uint8_t long_key_header[] = {1, 0x00, 0x20, 0, 0};
  std::copy(std::begin(long_key_header), std::end(long_key_header), long_key.begin());
  EXPECT_EQ(
      raw_exchange(server.port(), frame(static_cast<std::uint32_t>(long_key.size()), long_key)),
      kError);
  TcpStore client("127.0.0.1", server.port(), 2s, std::string());
  client.set("still", std::string("alive"));
  EXPECT_EQ(client.get_string("still", 1s), "alive");
  EXPECT_EQ(client.get_string("k", 1s), "");
}

// Reads until the server closes the connection; true if it did within 2 s.
bool closed_by_server(int fd) {
  base::Deadline deadline(2s);
  std::uint8_t byte;
  base::IoResult r;
  while ((r = base::read_exact(fd, &byte, 1, deadline)) == base::IoResult::ok) {
  }
  ::close(fd);
  return r != base::IoResult::timeout;
}

TEST(StoreAuth, WrongMissingReplayedAndGarbageHandshakesAreRejectedAndTheStoreServesOn) {
  StoreServer server("127.0.0.1", 0, std::string("s3cret"));
  EXPECT_THROW(TcpStore("127.0.0.1", server.port(), 2s, std::string("wrong")), StoreError);
  EXPECT_THROW(TcpStore("127.0.0.1", server.port(), 2s, std::string()), StoreError);

  // A recorded response does not open another connection: its challenge has a new nonce.
  std::string error;
  base::Deadline deadline(2s);
  int first = base::connect_tcp("127.0.0.1", server.port(), deadline, error);
  std::array<std::uint8_t, base::Challenge::kBytes> raw{};
  ASSERT_EQ(base::read_exact(first, raw.data(), raw.size(), deadline), base::IoResult::ok);
  base::Handshake honest("loom-store", "s3cret");
  auto recorded = honest.respond(*base::Challenge::decode(raw.data(), raw.size()), {});
  ASSERT_EQ(recorded.bytes.size(), 64u);
  ::close(first);
  int replay = base::connect_tcp("127.0.0.1", server.port(), deadline, error);
  ASSERT_EQ(base::read_exact(replay, raw.data(), raw.size(), deadline), base::IoResult::ok);
  base::write_exact(replay, recorded.bytes.data(), recorded.bytes.size(), deadline);
  EXPECT_TRUE(closed_by_server(replay)) << "a replayed response was accepted";

  // A request where the response belongs never reaches the parser.
  int sneaky = base::connect_tcp("127.0.0.1", server.port(), deadline, error);
  ASSERT_EQ(base::read_exact(sneaky, raw.data(), raw.size(), deadline), base::IoResult::ok);
  auto set = frame(16, {1, 5, 0, 0, 0, 'o', 'w', 'n', 'e', 'd', 1, 0, 0, 0, 'x'});
  set.resize(64, 0);
  base::write_exact(sneaky, set.data(), set.size(), deadline);
  EXPECT_TRUE(closed_by_server(sneaky));

  // Random bytes, and a client that says nothing.
  int garbage = base::connect_tcp("127.0.0.1", server.port(), deadline, error);
  std::vector<std::uint8_t> noise(200);
  for (std::size_t i = 0; i < noise.size(); ++i) noise[i] = static_cast<std::uint8_t>(i * 97 + 13);
  base::write_exact(garbage, noise.data(), noise.size(), deadline);
  EXPECT_TRUE(closed_by_server(garbage));

  TcpStore good("127.0.0.1", server.port(), 2s, std::string("s3cret"));
  good.set("still", std::string("serving"));
  EXPECT_EQ(good.get_string("still", 1s), "serving");
  EXPECT_EQ(good.check({"owned"}), std::vector<bool>{false});
}

TEST(StoreAuth, AClientWithASecretRefusesAServerWithout) {
  StoreServer open_server("127.0.0.1", 0, std::string());
  EXPECT_THROW(TcpStore("127.0.0.1", open_server.port(), 2s, std::string("s3cret")), StoreError);
  TcpStore plain("127.0.0.1", open_server.port(), 2s, std::string());
  plain.set("k", std::string("v"));
}

TEST(StoreServer, ClientRejectsOverlongKeysBeforeSending) {
  StoreServer server("127.0.0.1", 0);
  TcpStore client("127.0.0.1", server.port(), 2s);
  EXPECT_THROW(client.set(std::string(5000, 'k'), std::string("v")), InvalidArgument);
}

TEST(StoreServer, ClientGivesUpConnectingAfterItsTimeout) {
  // A port nobody listens on: find one by binding and closing.
  std::uint16_t port;
  {
    StoreServer probe("127.0.0.1", 0);
    port = probe.port();
  }
  auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(TcpStore("127.0.0.1", port, 300ms), TimeoutError);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
}

}  // namespace
}  // namespace loom
