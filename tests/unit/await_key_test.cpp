// A peer's setup value is waited for in polls that see the halt (abort(), a failure record, a
// heartbeat timeout) and the peer's process, not in one blocking get that only the deadline
// ends.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "base/abort_record.hpp"
#include "base/halt.hpp"
#include "loom/store.hpp"
#include "transports/await_key.hpp"

namespace loom::transport {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class AwaitKey : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ =
        std::filesystem::temp_directory_path() / ("loom-await-key-" + std::to_string(::getpid()));
    store_ = std::make_unique<FileStore>(path_.string());
  }
  void TearDown() override {
    store_.reset();
    std::filesystem::remove(path_);
    std::filesystem::remove(path_.string() + ".lock");
  }
  std::filesystem::path path_;
  std::unique_ptr<FileStore> store_;
  base::Halt halt_;
};

TEST_F(AwaitKey, ReturnsTheValueOnceItIsSet) {
  std::thread later([&] {
    std::this_thread::sleep_for(100ms);
    store_->set("address/1", std::string("10.0.0.1:5000"));
  });
  const Bytes got = await_key(*store_, "address/1", base::Deadline(10s), halt_, 1, 0, "test");
  later.join();
  EXPECT_EQ(std::string(got.begin(), got.end()), "10.0.0.1:5000");
}

TEST_F(AwaitKey, TheHaltEndsTheWaitAtOnceWithItsError) {
  std::thread halter([&] {
    std::this_thread::sleep_for(200ms);
    halt_.trigger(base::AbortRecord{base::AbortRecord::Kind::peer_failed, 0, 1,
                                    "rank 1 could not build its part"},
                  false);
  });
  const auto start = Clock::now();
  try {
    await_key(*store_, "address/1", base::Deadline(60s), halt_, 1, 0, "tcp: rank 0 waiting");
    ADD_FAILURE() << "returned without the key";
  } catch (const PeerError& e) {
    EXPECT_EQ(e.peer(), 1);
    EXPECT_NE(std::string(e.what()).find("rank 1 could not build its part"), std::string::npos);
  }
  halter.join();
  EXPECT_LT(Clock::now() - start, 2s);
}

TEST_F(AwaitKey, APeerProcessThatIsGoneEndsTheWait) {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  const auto start = Clock::now();
  try {
    await_key(*store_, "handle/1", base::Deadline(60s), halt_, 1, child, "cudaipc: rank 0");
    ADD_FAILURE() << "returned without the key";
  } catch (const PeerError& e) {
    EXPECT_EQ(e.peer(), 1);
    EXPECT_NE(std::string(e.what()).find("is gone"), std::string::npos) << e.what();
  }
  EXPECT_LT(Clock::now() - start, 2s);
}

TEST_F(AwaitKey, TheDeadlineEndsItWithATimeoutNamingTheWait) {
  try {
    await_key(*store_, "address/1", base::Deadline(300ms), halt_, 1, 0,
              "tcp: rank 0 (waiting for rank 1's address)");
    ADD_FAILURE() << "returned without the key";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("waiting for rank 1's address"), std::string::npos);
  }
}

}  // namespace
}  // namespace loom::transport
