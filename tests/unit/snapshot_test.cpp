// Snapshots on one process: the round trip, falling back from damaged files, runs sharing a
// folder, temporary files, which files are read at all (this user's regular files only: a FIFO,
// a symbolic link or another user's file is an error naming it, at once), and the fences that
// keep two jobs from interleaving one run's snapshots.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "loom/ddp/checkpoint.hpp"
#include "loom/ddp/layers.hpp"
#include "loom/ddp/optim.hpp"

namespace loom::ddp {
namespace {

namespace fs = std::filesystem;

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("loom-snapshot-test-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

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
  // .snapshot-<run>-<step>.tmp.<pid>.<host>: on this host, a run has one writer, so any temp
  // file of its own is left by a dead one, and another run's is stale once its writer is gone. A
  // writer on another host cannot be checked: its file stays until it is older than any save
  // takes (an hour), whichever run it is of (it may be this run's writer on the other side of a
  // split, or the new rank 0 of an elastic restart).
  const std::set<std::string> stale = {
      fmt::format(".snapshot-mine-3.tmp.{}.{}", dead, host),
      fmt::format(".snapshot-other-3.tmp.{}.{}", dead, host),
      fmt::format(".snapshot-mine-2.tmp.{}.elsewhere", alive),
      fmt::format(".snapshot-other-2.tmp.{}.elsewhere", alive),
  };
  const std::set<std::string> live = {
      fmt::format(".snapshot-other-4.tmp.{}.{}", alive, host),
      fmt::format(".snapshot-other-5.tmp.{}.elsewhere", dead),
      fmt::format(".snapshot-mine-4.tmp.{}.elsewhere", alive),
  };
  for (const auto& set : {stale, live})
    for (const auto& name : set) std::ofstream(path(name)) << "partial";
  for (const char* old : {".snapshot-mine-2", ".snapshot-other-2"})
    fs::last_write_time(path(fmt::format("{}.tmp.{}.elsewhere", old, alive)),
                        fs::file_time_type::clock::now() - std::chrono::hours(2));
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

// Runs `body` in a child process and returns its exit status; a child still running after
// `limit` is killed and counts as a hang (-1).
int in_child_within(std::chrono::seconds limit, const std::function<int()>& body) {
  const pid_t child = ::fork();
  if (child == 0) {
    int code = 3;
    try {
      code = body();
    } catch (...) {
    }
    ::_exit(code);
  }
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (::waitpid(child, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The review's recipe: a FIFO named as the newest snapshot hung the resume in open(2) for ever.
// Now it is refused at once, with an Error (not skipped as a damaged file) naming it.
TEST_F(Snapshots, AFifoNamedAsASnapshotIsRefusedAtOnceNamingIt) {
  Sequential model = make_mlp({2, 3}, 1);
  Sgd sgd(model.parameters(), SgdOptions{});
  save_snapshot(dir_.string(), model, sgd, {0, 0, 1, 0});
  const std::string fifo = path("snapshot-99999999.loom");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const int status = in_child_within(std::chrono::seconds(20), [&] {
    try {
      resume_from_newest(dir_.string(), model, sgd);
      return 1;  // resumed, or started fresh: the FIFO went unnoticed
    } catch (const InvalidArgument&) {
      return 2;  // skipped as if damaged
    } catch (const Error& e) {
      const std::string what = e.what();
      return what.find(fifo) != std::string::npos && what.find("FIFO") != std::string::npos ? 0 : 4;
    }
  });
  EXPECT_EQ(status, 0) << "-1: hung; 1: not refused; 2: skipped; 4: the error names no FIFO";
}

// Whatever is named as a snapshot of the run but is not this user's regular file, writable by no
// one else, is refused on resume: the error names the file and why, and nothing is loaded.
TEST_F(Snapshots, SymlinksFoldersAndFilesOthersCanWriteAreRefusedNamingThem) {
  Sequential model = make_mlp({2, 3}, 1);
  Sgd sgd(model.parameters(), SgdOptions{});
  const std::string mine = save_snapshot(dir_.string(), model, sgd, {0, 0, 1, 0});
  const auto before = model.parameters()[0]->value.clone();
  auto expect_refused = [&](const std::string& file, const std::string& why) {
    try {
      resume_from_newest(dir_.string(), model, sgd);
      ADD_FAILURE() << file << " was not refused";
    } catch (const InvalidArgument& e) {
      ADD_FAILURE() << file << " was skipped as damaged, not refused: " << e.what();
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(file), std::string::npos) << what;
      EXPECT_NE(what.find(why), std::string::npos) << what;
      EXPECT_NE(what.find("resume_from_newest"), std::string::npos) << what;
    }
    EXPECT_EQ(std::memcmp(model.parameters()[0]->value.data(), before.data(), 6 * sizeof(float)),
              0);
    fs::remove_all(file);
  };
  // A symbolic link to a valid snapshot: read through it, whoever placed it decides what loads.
  fs::create_symlink(mine, path("snapshot-7.loom"));
  expect_refused(path("snapshot-7.loom"), "symbolic link");
  fs::create_directory(path("snapshot-8.loom"));
  expect_refused(path("snapshot-8.loom"), "folder");
  fs::copy_file(mine, path("snapshot-9.loom"));
  fs::permissions(path("snapshot-9.loom"), fs::perms::group_write | fs::perms::owner_read,
                  fs::perm_options::replace);
  expect_refused(path("snapshot-9.loom"), "writable by group or others");
  if (::geteuid() == 0) {  // only root can give a file away
    fs::copy_file(mine, path("snapshot-10.loom"));
    ASSERT_EQ(::chown(path("snapshot-10.loom").c_str(), 65534, 65534), 0);
    expect_refused(path("snapshot-10.loom"), "owned by uid 65534");
  }
  const auto resumed = resume_from_newest(dir_.string(), model, sgd);
  ASSERT_TRUE(resumed);
  EXPECT_EQ(resumed->global_step, 1u);
}

// Saving does not remove what it must not read: another user's file, or a link, of the run.
TEST_F(Snapshots, PruningLeavesLinksAndFilesOthersCanWriteInPlace) {
  Sequential model = make_mlp({2, 3}, 1);
  Sgd sgd(model.parameters(), SgdOptions{});
  const std::string target = path("elsewhere.bin");
  std::ofstream(target) << "not a snapshot";
  fs::create_symlink(target, path("snapshot-1.loom"));
  for (std::uint64_t s = 2; s <= 5; ++s) save_snapshot(dir_.string(), model, sgd, {0, 0, s, 0}, 2);
  EXPECT_EQ(names(), (std::set<std::string>{"elsewhere.bin", "snapshot-1.loom", "snapshot-4.loom",
                                            "snapshot-5.loom"}));
}

// Two jobs training one run into one folder (a split brain, or a restart while the old job
// lives on): the later claim wins, and the earlier job writes nothing more there. The folder's
// snapshots stay one line of training.
TEST_F(Snapshots, ASupersededJobWritesNothingMoreIntoTheFolder) {
  Sequential model = make_mlp({2, 3}, 1);
  Sgd sgd(model.parameters(), SgdOptions{});
  in_run("r");
  const std::uint64_t first = claim_snapshots(dir_.string());
  EXPECT_GT(first, 0u);
  TrainingState a{0, 0, 10, 0, 0, first};
  save_snapshot(dir_.string(), model, sgd, a);

  const std::uint64_t second = claim_snapshots(dir_.string());
  EXPECT_GT(second, first);
  auto resumed = resume_from_newest(dir_.string(), model, sgd);
  ASSERT_TRUE(resumed);
  EXPECT_EQ(resumed->global_step, 10u);
  EXPECT_EQ(resumed->fence, first) << "a snapshot records the claim it was written under";
  TrainingState b = *resumed;
  b.fence = second, b.global_step = 12;
  save_snapshot(dir_.string(), model, sgd, b);

  a.global_step = 20;
  try {
    save_snapshot(dir_.string(), model, sgd, a);
    FAIL() << "the superseded job wrote step 20";
  } catch (const InvalidArgument& e) {
    FAIL() << "refused as bad input: " << e.what();
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("claimed by a newer job"), std::string::npos) << what;
    EXPECT_NE(what.find(fmt::format("fence {}", second)), std::string::npos) << what;
  }
  EXPECT_EQ(names(), (std::set<std::string>{"snapshot-r-10.loom", "snapshot-r-12.loom",
                                            ".snapshot-r.fence"}))
      << "the refused save left a file behind";
  resumed = resume_from_newest(dir_.string(), model, sgd);
  ASSERT_TRUE(resumed);
  EXPECT_EQ(resumed->global_step, 12u);
  EXPECT_EQ(resumed->fence, second);
  // Saving without a claim (fence 0) is refused once the run's snapshots are claimed.
  EXPECT_THROW(save_snapshot(dir_.string(), model, sgd, {0, 0, 30, 0}), Error);
}

// A claim is above every claim before it, and above the fence of every snapshot of the run
// there, should the fence file have been removed; runs have fences of their own.
TEST_F(Snapshots, AClaimIsAboveEveryEarlierOneEvenWithoutTheFenceFile) {
  Sequential model = make_mlp({2, 3}, 1);
  Sgd sgd(model.parameters(), SgdOptions{});
  save_snapshot(dir_.string(), model, sgd, {0, 0, 1, 0});  // no claim: no fence file either
  EXPECT_FALSE(fs::exists(path(".snapshot.fence")));
  std::uint64_t fence = 0;
  for (std::uint64_t s = 2; s <= 4; ++s) {
    const std::uint64_t next = claim_snapshots(dir_.string());
    EXPECT_GT(next, fence);
    fence = next;
    save_snapshot(dir_.string(), model, sgd, {0, 0, s, 0, 0, fence});
  }
  fs::remove(path(".snapshot.fence"));
  EXPECT_GT(claim_snapshots(dir_.string()), fence);
  in_run("other");
  EXPECT_EQ(claim_snapshots(dir_.string()), 1u);
  // A fence file that is not this user's own, unshared regular file is refused like a snapshot.
  fs::remove(path(".snapshot-other.fence"));
  fs::create_symlink(path(".snapshot.fence"), path(".snapshot-other.fence"));
  EXPECT_THROW(claim_snapshots(dir_.string()), Error);
}

// Snapshots written before fences (version 3) are still read, with fence 0.
TEST_F(Snapshots, VersionThreeSnapshotsAreStillRead) {
  Sequential model = make_mlp({2, 3}, 1);
  Sgd sgd(model.parameters(), SgdOptions{0.1, 0.9});
  const std::string file = save_snapshot(dir_.string(), model, sgd, {1, 2, 3, 4, 5});
  std::vector<unsigned char> bytes(fs::file_size(file));
  std::ifstream(file, std::ios::binary)
      .read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  // magic, version, run id length 0, then epoch..samples_in_epoch (5 x u64), then the fence.
  const std::size_t version_at = 8, fence_at = 8 + 4 + 4 + 5 * 8;
  const std::uint32_t three = 3;
  std::memcpy(bytes.data() + version_at, &three, 4);
  bytes.erase(bytes.begin() + fence_at, bytes.begin() + fence_at + 8);
  const uLong crc = crc32(crc32(0L, Z_NULL, 0), bytes.data(), static_cast<uInt>(bytes.size() - 4));
  const auto stored = static_cast<std::uint32_t>(crc);
  std::memcpy(bytes.data() + bytes.size() - 4, &stored, 4);
  fs::remove(file);
  std::ofstream(path("snapshot-3.loom"), std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  const auto resumed = resume_from_newest(dir_.string(), model, sgd);
  ASSERT_TRUE(resumed);
  EXPECT_EQ(resumed->global_step, 3u);
  EXPECT_EQ(resumed->samples_in_epoch, 5u);
  EXPECT_EQ(resumed->fence, 0u);
}

}  // namespace
}  // namespace loom::ddp
