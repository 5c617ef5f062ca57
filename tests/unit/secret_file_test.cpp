// LOOM_SECRET_FILE is used only when nobody else can read it, as ssh does with private keys.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "base/auth.hpp"
#include "loom/loom.hpp"

namespace loom {
namespace {

class SecretFile : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = ::testing::TempDir() + "/loom-secret-" + std::to_string(::getpid());
    std::ofstream(path_) << "s3cret\n";
  }
  void TearDown() override { std::filesystem::remove(path_); }
  std::string path_;
};

TEST_F(SecretFile, OnlyTheOwnerMayReadItAndTheNewlineIsDropped) {
  ::chmod(path_.c_str(), 0600);
  EXPECT_EQ(base::read_secret_file(path_), "s3cret");
  ::chmod(path_.c_str(), 0400);
  EXPECT_EQ(base::read_secret_file(path_), "s3cret");
}

TEST_F(SecretFile, OneThatGroupOrOthersMayReadIsRefusedNamingItAndItsMode) {
  for (mode_t mode : {0644, 0640, 0604, 0660}) {
    ::chmod(path_.c_str(), mode);
    try {
      base::read_secret_file(path_);
      ADD_FAILURE() << "mode " << std::oct << mode << " was accepted";
    } catch (const InvalidArgument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(path_), std::string::npos) << what;
      char mode_text[8];
      std::snprintf(mode_text, sizeof(mode_text), "%04o", static_cast<unsigned>(mode));
      EXPECT_NE(what.find(mode_text), std::string::npos) << what;
    }
  }
}

}  // namespace
}  // namespace loom
