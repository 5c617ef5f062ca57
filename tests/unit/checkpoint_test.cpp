// The trainer's snapshots on one process: written atomically, resumed from the newest valid one,
// pruned per run, and readable by their owner only.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "loom/ddp/checkpoint.hpp"
#include "loom/ddp/data.hpp"
#include "loom/ddp/layers.hpp"
#include "loom/ddp/optim.hpp"
#include "temp_dir.hpp"

namespace loom::ddp {
namespace {

namespace fs = std::filesystem;

// A run names itself with LOOM_RUN_ID (Slurm jobs by SLURM_JOB_ID); each test starts unnamed.
class Snapshots : public TempDir {
 protected:
  void SetUp() override {
    TempDir::SetUp();
    for (const char* name : {"LOOM_RUN_ID", "SLURM_JOB_ID"}) {
      if (const char* v = std::getenv(name)) saved_.emplace_back(name, v);
      ::unsetenv(name);
    }
  }
  void TearDown() override {
    ::unsetenv("LOOM_RUN_ID");
    for (const auto& [name, value] : saved_) ::setenv(name.c_str(), value.c_str(), 1);
    TempDir::TearDown();
  }
  static void in_run(const char* id) { ::setenv("LOOM_RUN_ID", id, 1); }
  std::set<std::string> names() const {
    std::set<std::string> all;
    for (const auto& e : fs::directory_iterator(dir_)) all.insert(e.path().filename().string());
    return all;
  }
  std::vector<std::pair<std::string, std::string>> saved_;
};

// Bytes this process has read through read(2) and its kind so far.
std::uint64_t bytes_read_so_far() {
  std::ifstream io("/proc/self/io");
  std::string field;
  std::uint64_t value = 0;
  while (io >> field >> value)
    if (field == "rchar:") return value;
  ADD_FAILURE() << "no rchar in /proc/self/io";
  return 0;
}

// A pid that no process has any more: a child that has exited and been reaped.
pid_t dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  return child;
}

std::string this_host() {
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  return host;
}

TEST_F(Snapshots, RoundTripAndFallBackFromCorruptOrTruncatedFiles) {
  Sequential model = make_mlp({4, 6, 3}, 1);
  Sgd sgd(model.parameters(), SgdOptions{0.1, 0.9});
  for (Parameter* p : model.parameters()) p->grad.fill(0.5f);
  sgd.step();
  TrainingState st{2, 5, 17, 99, 1234};
  const std::string first = save_snapshot(dir_.string(), model, sgd, st);
  const auto saved_value = model.parameters()[0]->value.clone();
  const auto saved_momentum = sgd.state()[0]->clone();
  sgd.step();
  st.global_step = 18;
  const std::string second = save_snapshot(dir_.string(), model, sgd, st);

  Sequential fresh = make_mlp({4, 6, 3}, 2);
  Sgd fresh_sgd(fresh.parameters(), SgdOptions{0.1, 0.9});
  auto loaded = resume_from_newest(dir_.string(), fresh, fresh_sgd);
  ASSERT_TRUE(loaded);
  EXPECT_EQ(loaded->global_step, 18u);
  EXPECT_EQ(loaded->epoch, 2u);
  EXPECT_EQ(loaded->step_in_epoch, 5u);
  EXPECT_EQ(loaded->samples_in_epoch, 1234u);
  EXPECT_EQ(fresh_sgd.steps(), 2);
  EXPECT_EQ(std::memcmp(fresh.parameters()[0]->value.data(), model.parameters()[0]->value.data(),
                        24 * sizeof(float)),
            0);

  // A flipped byte in the newest: the previous one is used.
  {
    std::fstream f(second, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x5a');
  }
  loaded = resume_from_newest(dir_.string(), fresh, fresh_sgd);
  ASSERT_TRUE(loaded);
  EXPECT_EQ(loaded->global_step, 17u);
  EXPECT_EQ(
      std::memcmp(fresh.parameters()[0]->value.data(), saved_value.data(), 24 * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(fresh_sgd.state()[0]->data(), saved_momentum.data(), 24 * sizeof(float)),
            0);
  // Truncated too: nothing usable is left.
  fs::resize_file(first, fs::file_size(first) / 2);
  EXPECT_FALSE(resume_from_newest(dir_.string(), fresh, fresh_sgd));
  // A snapshot of another model is not loaded.
  save_snapshot(dir_.string(), model, sgd, st);
  Sequential other = make_mlp({4, 7, 3}, 1);
  Sgd other_sgd(other.parameters(), SgdOptions{0.1, 0.9});
  EXPECT_FALSE(resume_from_newest(dir_.string(), other, other_sgd));
}

TEST_F(Snapshots, OnlyTheNewestAreKept) {
  Sequential model = make_mlp({2, 2}, 1);
  Sgd sgd(model.parameters(), SgdOptions{});
  for (std::uint64_t s = 1; s <= 5; ++s) save_snapshot(dir_.string(), model, sgd, {0, 0, s, 0}, 2);
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_)) names.insert(e.path().filename().string());
  EXPECT_EQ(names, (std::set<std::string>{"snapshot-4.loom", "snapshot-5.loom"}));
}

// The review's reproduction: a run at step 5 in a folder holding three snapshots of another run
// at higher steps. Pruning by step alone deleted the file it had just written.
TEST_F(Snapshots, SaveKeepsWhatItWroteWhenAnotherRunHasHigherSteps) {
  Sequential model = make_mlp({2, 3}, 1);
  Sgd sgd(model.parameters(), SgdOptions{});
  in_run("other");
  for (std::uint64_t s = 100; s <= 102; ++s)
    save_snapshot(dir_.string(), model, sgd, {0, 0, s, 0}, 3);
  in_run("mine");
  const std::string written = save_snapshot(dir_.string(), model, sgd, {0, 0, 5, 0}, 3);
  EXPECT_TRUE(fs::exists(written)) << written << " was deleted by its own save";
  const auto resumed = resume_from_newest(dir_.string(), model, sgd);
  ASSERT_TRUE(resumed);
  EXPECT_EQ(resumed->global_step, 5u) << "resumed from another run's snapshot";
  EXPECT_EQ(names().size(), 4u) << "the other run's snapshots must stay";
}

TEST_F(Snapshots, UndecodableHigherStepFilesAreNeitherResumedNorPushOutNewOnes) {
  Sequential model = make_mlp({2, 3}, 1);
  Sgd sgd(model.parameters(), SgdOptions{});
  for (int s = 100; s <= 102; ++s)
    std::ofstream(path(fmt::format("snapshot-{}.loom", s))) << "not a snapshot";
  const std::string written = save_snapshot(dir_.string(), model, sgd, {0, 0, 5, 0}, 3);
  EXPECT_TRUE(fs::exists(written));
  const auto resumed = resume_from_newest(dir_.string(), model, sgd);
  ASSERT_TRUE(resumed);
  EXPECT_EQ(resumed->global_step, 5u);
  EXPECT_TRUE(fs::exists(path("snapshot-100.loom"))) << "a file that is not ours was deleted";
}

TEST_F(Snapshots, RunsSharingAFolderResumeAndPruneOnlyTheirOwn) {
  Sequential model = make_mlp({2, 3}, 1);
  Sgd sgd(model.parameters(), SgdOptions{});
  for (std::uint64_t s = 1; s <= 5; ++s) {
    in_run("a");
    save_snapshot(dir_.string(), model, sgd, {0, 0, s, 0}, 2);
    in_run("b");
    save_snapshot(dir_.string(), model, sgd, {0, 0, 10 + s, 0}, 2);
  }
  in_run("a");
  auto resumed = resume_from_newest(dir_.string(), model, sgd);
  ASSERT_TRUE(resumed);
  EXPECT_EQ(resumed->global_step, 5u);
  in_run("b");
  resumed = resume_from_newest(dir_.string(), model, sgd);
  ASSERT_TRUE(resumed);
  EXPECT_EQ(resumed->global_step, 15u);
  EXPECT_EQ(names(), (std::set<std::string>{"snapshot-a-4.loom", "snapshot-a-5.loom",
                                            "snapshot-b-14.loom", "snapshot-b-15.loom"}));
  in_run("c");
  EXPECT_FALSE(resume_from_newest(dir_.string(), model, sgd)) << "a new run starts fresh";
}

TEST_F(Snapshots, StaleTempFilesOfDeadWritersAreRemovedOnSave) {
  Sequential model = make_mlp({2, 3}, 1);
  Sgd sgd(model.parameters(), SgdOptions{});
  in_run("mine");
  const pid_t dead = dead_pid(), alive = ::getpid();
  const std::string host = this_host();
  // .snapshot-<run>-<step>.tmp.<pid>.<host>: a run has one writer, so any temp file of its own
  // is left by a dead one; another run's is stale once its writer on this host is gone.
  const std::set<std::string> stale = {
      fmt::format(".snapshot-mine-3.tmp.{}.{}", dead, host),
      fmt::format(".snapshot-mine-4.tmp.{}.elsewhere", alive),
      fmt::format(".snapshot-other-3.tmp.{}.{}", dead, host),
  };
  const std::set<std::string> live = {
      fmt::format(".snapshot-other-4.tmp.{}.{}", alive, host),
      fmt::format(".snapshot-other-5.tmp.{}.elsewhere", dead),
  };
  for (const auto& set : {stale, live})
    for (const auto& name : set) std::ofstream(path(name)) << "partial";
  save_snapshot(dir_.string(), model, sgd, {0, 0, 6, 0});
  std::set<std::string> expected = live;
  expected.insert("snapshot-mine-6.loom");
  EXPECT_EQ(names(), expected);
}

TEST_F(Snapshots, AreReadableByTheirOwnerOnly) {
  Sequential model = make_mlp({2, 3}, 1);
  Sgd sgd(model.parameters(), SgdOptions{});
  struct stat st {};
  ASSERT_EQ(::stat(save_snapshot(dir_.string(), model, sgd, {0, 0, 1, 0}).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

// A large file of our run whose header says it holds another model is skipped after its header.
TEST_F(Snapshots, ResumeRejectsACandidateByItsHeaderWithoutReadingItWhole) {
  Sequential model = make_mlp({2, 3}, 1), other = make_mlp({2, 5}, 1);
  Sgd sgd(model.parameters(), SgdOptions{}), other_sgd(other.parameters(), SgdOptions{});
  save_snapshot(dir_.string(), model, sgd, {0, 0, 1, 0});
  const std::string big = save_snapshot(dir_.string(), other, other_sgd, {0, 0, 2, 0});
  constexpr std::uintmax_t kBig = 256u << 20;
  fs::resize_file(big, kBig);  // sparse: costs no disk
  const std::uint64_t before = bytes_read_so_far();
  const auto resumed = resume_from_newest(dir_.string(), model, sgd);
  const std::uint64_t read = bytes_read_so_far() - before;
  ASSERT_TRUE(resumed);
  EXPECT_EQ(resumed->global_step, 1u);
  EXPECT_LT(read, kBig / 16) << "read " << read << " bytes to reject a " << kBig << "-byte file";
}

TEST_F(Snapshots, ARunIdThatCannotBePartOfAFileNameIsRefused) {
  Sequential model = make_mlp({2, 3}, 1);
  Sgd sgd(model.parameters(), SgdOptions{});
  in_run("../elsewhere");
  try {
    save_snapshot(dir_.string(), model, sgd, {0, 0, 1, 0});
    FAIL() << "a run id with '/' and '.' was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("LOOM_RUN_ID"), std::string::npos) << e.what();
  }
  EXPECT_THROW(resume_from_newest(dir_.string(), model, sgd), InvalidArgument);
  EXPECT_TRUE(names().empty());
}

}  // namespace
}  // namespace loom::ddp
