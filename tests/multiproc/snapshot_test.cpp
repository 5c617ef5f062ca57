// Snapshots across ranks: the collective resume and claim. Every rank resumes from the newest
// snapshot whichever rank's folder holds it (node-local folders after rank 0 moved), and a
// refused file or a failed claim on one rank is the same error on every rank, at once.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "../support/ranks.hpp"
#include "loom/ddp/checkpoint.hpp"
#include "loom/ddp/layers.hpp"
#include "loom/ddp/optim.hpp"

namespace loom::ddp {
namespace {

namespace fs = std::filesystem;
using testing::run_ranks;

fs::path fresh_folder(const char* name) {
  const fs::path dir =
      fs::temp_directory_path() / (std::string("loom-") + name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// Each rank has a folder of its own (node-local folders). Rank 1's holds the newest snapshot, as
// when rank 0 was on a node now lost and the new rank 0 was rank 1 earlier: every rank resumes
// from it, not from rank 0's older one (nor from none).
TEST(Snapshots, ResumeTakesTheNewestSnapshotWhicheverRanksFolderHoldsIt) {
  const fs::path base = fresh_folder("snapshots-local");
  run_ranks(3, [&](Communicator& comm) {
    const std::string mine = (base / std::to_string(comm.rank())).string();
    Sequential model = make_mlp({3, 4, 2}, 1);
    Sgd sgd(model.parameters(), SgdOptions{0.1, 0.9});
    if (comm.rank() == 0) save_snapshot(mine, model, sgd, {0, 0, 3, 0});
    if (comm.rank() == 1) {
      for (Parameter* p : model.parameters()) p->value.fill(0.25f);
      save_snapshot(mine, model, sgd, {1, 0, 7, 0});
    }
    for (Parameter* p : model.parameters()) p->value.fill(-1.0f);
    const auto resumed = resume_from_newest(comm, mine, model, sgd);
    ASSERT_TRUE(resumed);
    EXPECT_EQ(resumed->global_step, 7u);
    EXPECT_EQ(resumed->epoch, 1u);
    for (Parameter* p : model.parameters())
      for (std::size_t i = 0; i < p->value.numel(); ++i) ASSERT_EQ(p->value[i], 0.25f) << p->name;
  });
  fs::remove_all(base);
}

// A FIFO in rank 0's folder: every rank raises rank 0's error naming it, within seconds (rank 1
// and 2 used to wait in the broadcast for LOOM_TIMEOUT while rank 0 hung in open(2)).
TEST(Snapshots, ARefusedFileIsTheSameErrorOnEveryRankAtOnce) {
  const fs::path dir = fresh_folder("snapshots-fifo");
  const std::string fifo = (dir / "snapshot-99999999.loom").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  testing::RunOptions run;
  run.options.timeout = std::chrono::seconds(60);
  run_ranks(
      3,
      [&](Communicator& comm) {
        Sequential model = make_mlp({3, 4, 2}, 1);
        Sgd sgd(model.parameters(), SgdOptions{});
        const std::string folder = comm.rank() == 0 ? dir.string() : (dir / "empty").string();
        const auto started = std::chrono::steady_clock::now();
        try {
          resume_from_newest(comm, folder, model, sgd);
          ADD_FAILURE() << "the FIFO was not refused";
        } catch (const Error& e) {
          const std::string what = e.what();
          EXPECT_NE(what.find(fifo), std::string::npos) << what;
          EXPECT_NE(what.find("rank 0"), std::string::npos) << what;
          EXPECT_NE(e.kind(), ErrorKind::timeout) << what;
        }
        EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(20));
        // The communicator is intact: the refusal was agreed, not a broken collective.
        float v = 1;
        comm.all_reduce(&v, 1, DataType::f32, ReduceOp::sum);
        EXPECT_EQ(v, 3.0f);
      },
      run);
  fs::remove_all(dir);
}

// claim_snapshots is rank 0's claim, on every rank; a later claim is higher.
TEST(Snapshots, EveryRankGetsRankZerosClaim) {
  const fs::path dir = fresh_folder("snapshots-claim");
  run_ranks(2, [&](Communicator& comm) {
    const std::uint64_t first = claim_snapshots(comm, dir.string(), "job");
    const std::uint64_t second = claim_snapshots(comm, dir.string(), "job");
    std::uint64_t both[2] = {first, second}, max[2] = {first, second};
    comm.all_reduce(both, 2, DataType::u64, ReduceOp::min);
    comm.all_reduce(max, 2, DataType::u64, ReduceOp::max);
    EXPECT_EQ(both[0], max[0]);
    EXPECT_EQ(both[1], max[1]);
    EXPECT_GT(second, first);
  });
  fs::remove_all(dir);
}

}  // namespace
}  // namespace loom::ddp
