// The FileStore over long runs and damage: its file stays small, a stopped lock holder costs a
// timeout and not forever, a torn last record is dropped, and only this user's file is used.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>

#include "loom/store.hpp"

namespace loom {
namespace {

using namespace std::chrono_literals;

class FileStoreFile : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = ::testing::TempDir() + "/loom-file-store-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove(path_);
  }
  void TearDown() override {
    std::filesystem::remove(path_);
    std::filesystem::remove(path_ + ".lock");
    std::filesystem::remove(path_ + ".link");
  }
  std::uintmax_t file_size() const { return std::filesystem::file_size(path_); }
  void append_raw(const std::string& bytes) const {
    std::ofstream(path_, std::ios::binary | std::ios::app) << bytes;
  }
  std::string path_;
};

TEST_F(FileStoreFile, StaysSmallUnderAHeartbeatThatAddsForever) {
  FileStore store(path_);
  store.set("topology", std::string(1000, 't'));
  for (int i = 1; i <= 6000; ++i) ASSERT_EQ(store.add("heartbeat/1", 1), i);
  EXPECT_LT(file_size(), 100u << 10);
  FileStore other(path_);  // a second process's view, from the compacted file
  EXPECT_EQ(other.add("heartbeat/1", 0), 6000);
  EXPECT_EQ(other.get_string("topology", 1s), std::string(1000, 't'));
}

TEST_F(FileStoreFile, ClientsThatOpenedTheFileBeforeACompactionSeeWritesAfterIt) {
  FileStore early(path_), writer(path_);
  early.set("first", std::string("1"));
  for (int i = 0; i < 4000; ++i) writer.set("churn", std::to_string(i));  // compacts on the way
  writer.set("last", std::string("2"));
  EXPECT_EQ(early.get_string("last", 1s), "2");
  EXPECT_EQ(early.get_string("first", 1s), "1");
  early.set("from-early", std::string("3"));
  EXPECT_EQ(writer.get_string("from-early", 1s), "3");
  EXPECT_EQ(writer.get_string("churn", 1s), "3999");
}

TEST_F(FileStoreFile, AnAddOfZeroToAnExistingKeyAppendsNothing) {
  FileStore store(path_);
  store.add("n", 5);
  const auto size = file_size();
  EXPECT_EQ(store.add("n", 0), 5);
  EXPECT_EQ(file_size(), size);
}

TEST_F(FileStoreFile, AnAddThatWouldOverflowIsRefusedNamingTheKey) {
  FileStore store(path_);
  store.add("n", INT64_MAX);
  try {
    store.add("n", 1);
    ADD_FAILURE() << "no error";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("add('n')"), std::string::npos) << e.what();
  }
  EXPECT_EQ(store.add("n", 0), INT64_MAX);
}

TEST_F(FileStoreFile, ALockHeldByAStoppedProcessEndsInATimeoutErrorNamingTheFile) {
  FileStore store(path_, 300ms);
  store.set("k", std::string("v"));
  // Another open file description holding the lock: a process stopped in the middle of a write.
  const int holder = ::open((path_ + ".lock").c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_EQ(::flock(holder, LOCK_EX), 0);
  for (auto& op : std::vector<std::function<void()>>{
           [&] { store.set("k", std::string("w")); },
           [&] { store.get("k", 300ms); },
           [&] { store.wait({"k"}, 300ms); },
           [&] { store.add("n", 1); },
       }) {
    auto attempt = std::async(std::launch::async, [&] {
      try {
        op();
      } catch (const TimeoutError& e) {
        return std::string(e.what());
      }
      return std::string("no TimeoutError");
    });
    if (attempt.wait_for(5s) != std::future_status::ready) {
      ::close(holder);  // lets the blocked operation finish
      FAIL() << "the operation waited for the lock for more than 5 s";
    }
    EXPECT_NE(attempt.get().find(path_ + ".lock"), std::string::npos);
  }
  ::close(holder);
  EXPECT_EQ(store.get_string("k", 1s), "v");
}

TEST_F(FileStoreFile, ATornLastRecordIsDroppedAndTheStoreWorksOn) {
  {
    FileStore store(path_);
    store.set("whole", std::string("1"));
    store.set("torn", std::string("2"));
  }
  std::filesystem::resize_file(path_, file_size() - 1);  // its writer died on the last byte
  FileStore store(path_);
  EXPECT_EQ(store.get_string("whole", 1s), "1");
  EXPECT_EQ(store.check({"torn"}), std::vector<bool>{false});
  store.set("after", std::string("3"));
  FileStore reopened(path_);
  EXPECT_EQ(reopened.get_string("after", 1s), "3");
  EXPECT_EQ(reopened.get_string("whole", 1s), "1");
}

TEST_F(FileStoreFile, GarbageBeforeTheLastRecordIsStillAnError) {
  {
    FileStore store(path_);
    store.set("k", std::string("v"));
  }
  append_raw(std::string("\x77garbage", 8));
  append_raw(std::string("\x01\x01\x00\x00\x00x\x01\x00\x00\x00y", 11));  // a whole record after
  EXPECT_THROW(
      {
        FileStore store(path_);
        store.check({"k"});
      },
      StoreError);
}

TEST_F(FileStoreFile, RefusesASymbolicLinkAFileOthersCanWriteAndAnotherUsersFile) {
  { FileStore store(path_); }
  std::filesystem::create_symlink(path_, path_ + ".link");
  EXPECT_THROW(FileStore{path_ + ".link"}, StoreError);
  ::chmod(path_.c_str(), 0666);
  EXPECT_THROW(FileStore{path_}, StoreError);
  ::chmod(path_.c_str(), 0644);
  EXPECT_NO_THROW(FileStore{path_});
  if (::geteuid() != 0) GTEST_SKIP() << "giving the file to another user needs root";
  ASSERT_EQ(::chown(path_.c_str(), 12345, 12345), 0);
  try {
    FileStore store(path_);
    ADD_FAILURE() << "another user's file was used";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("uid 12345"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace loom
