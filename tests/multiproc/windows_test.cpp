// Communicator::alloc's shared windows: collectives whose buffers lie in them read and write the
// peers' buffers in place (algorithms/direct.cpp), checked element by element on every rank;
// a rank whose buffer is outside them turns every rank to the slots; free() is collective and
// refuses pointers that disagree; over TCP the memory is plain.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../support/kill_trial.hpp"
#include "../support/ranks.hpp"
#include "algorithms/algorithms.hpp"

namespace loom {
namespace {

using testing::run_ranks;

// Every collective that may run in place, forced to it wherever the buffers allow.
constexpr const char* kInPlaceEverywhere =
    "allreduce:direct,reducescatter:direct,allgather:direct,broadcast:direct,reduce:direct,"
    "gather:direct,scatter:direct,alltoall:direct";

std::int32_t value(int rank, std::size_t i) {
  return static_cast<std::int32_t>(rank * 100003 + static_cast<int>(i % 9973));
}

testing::RunOptions shm(const char* algorithm) {
  testing::RunOptions opts;
  opts.options.transport = "shm";
  opts.options.timeout = std::chrono::seconds(60);
  if (algorithm) opts.options.algorithm = algorithm;
  return opts;
}

// Runs each collective once on window buffers (in and out of place) and checks every element.
void every_collective(Communicator& comm, std::size_t count) {
  const int n = comm.size(), r = comm.rank();
  const auto un = static_cast<std::size_t>(n);
  const std::size_t bytes = count * un * sizeof(std::int32_t);
  auto* in = static_cast<std::int32_t*>(comm.alloc(bytes));
  auto* out = static_cast<std::int32_t*>(comm.alloc(bytes));
  auto fill = [&](std::int32_t* p, std::size_t elems, std::size_t first) {
    for (std::size_t i = 0; i < elems; ++i) p[i] = value(r, first + i);
  };
  auto sum_at = [&](std::size_t i) {
    std::int32_t s = 0;
    for (int j = 0; j < n; ++j) s += value(j, i);
    return s;
  };

  fill(in, count, 0);
  comm.all_reduce(in, out, count, DataType::i32, ReduceOp::sum);
  for (std::size_t i = 0; i < count; ++i) ASSERT_EQ(out[i], sum_at(i)) << "all_reduce " << i;
  comm.all_reduce(in, count, DataType::i32, ReduceOp::sum);  // in place
  for (std::size_t i = 0; i < count; ++i) ASSERT_EQ(in[i], sum_at(i)) << "in place " << i;

  fill(in, count * un, 0);
  comm.reduce_scatter(in, out, count, DataType::i32, ReduceOp::sum);
  for (std::size_t i = 0; i < count; ++i)
    ASSERT_EQ(out[i], sum_at(static_cast<std::size_t>(r) * count + i)) << "reduce_scatter " << i;
  comm.reduce_scatter(in, in + static_cast<std::size_t>(r) * count, count, DataType::i32,
                      ReduceOp::sum);
  for (std::size_t i = 0; i < count; ++i)
    ASSERT_EQ(in[static_cast<std::size_t>(r) * count + i],
              sum_at(static_cast<std::size_t>(r) * count + i))
        << "reduce_scatter in place " << i;

  fill(in, count, 0);
  comm.all_gather(in, out, count, DataType::i32);
  for (int j = 0; j < n; ++j)
    for (std::size_t i = 0; i < count; ++i)
      ASSERT_EQ(out[static_cast<std::size_t>(j) * count + i], value(j, i)) << "all_gather " << j;

  fill(in, count * un, 0);
  comm.all_to_all(in, out, count, DataType::i32);
  for (int j = 0; j < n; ++j)
    for (std::size_t i = 0; i < count; ++i)
      ASSERT_EQ(out[static_cast<std::size_t>(j) * count + i],
                value(j, static_cast<std::size_t>(r) * count + i))
          << "all_to_all from " << j;

  const int root = n - 1;
  fill(in, count * un, 0);
  comm.broadcast(in, out, count, DataType::i32, root);
  for (std::size_t i = 0; i < count; ++i) ASSERT_EQ(out[i], value(root, i)) << "broadcast " << i;
  comm.reduce(in, out, count, DataType::i32, ReduceOp::sum, root);
  if (r == root) {
    for (std::size_t i = 0; i < count; ++i) ASSERT_EQ(out[i], sum_at(i)) << "reduce " << i;
  }
  comm.gather(in, out, count, DataType::i32, root);
  if (r == root) {
    for (int j = 0; j < n; ++j)
      for (std::size_t i = 0; i < count; ++i)
        ASSERT_EQ(out[static_cast<std::size_t>(j) * count + i], value(j, i)) << "gather " << j;
  }
  comm.scatter(in, out, count, DataType::i32, root);
  for (std::size_t i = 0; i < count; ++i)
    ASSERT_EQ(out[i], value(root, static_cast<std::size_t>(r) * count + i)) << "scatter " << i;

  comm.free(out);
  comm.free(in);
}

TEST(SharedWindows, EveryCollectiveInPlaceOnTwoThreeAndFourRanks) {
  for (int world : {2, 3, 4}) {
    SCOPED_TRACE(world);
    run_ranks(
        world,
        [](Communicator& comm) {
          const std::uint64_t before = algorithms::direct_host_calls();
          // Counts that do not divide by the ranks (all-reduce's blocks are uneven) and one
          // large enough for streaming copies.
          for (std::size_t count : {1u, 1001u, 3u << 18}) every_collective(comm, count);
          // 10 collectives per size, all in place.
          EXPECT_EQ(algorithms::direct_host_calls() - before, 30u);
        },
        shm(kInPlaceEverywhere));
  }
}

TEST(SharedWindows, TheModelChoosesAndEveryResultIsRight) {
  // The model's default figures (LOOM_PROBE_US=0): the choice below is the model's rule, not
  // this machine's pace; measured under TSan (its copies instrumented, the kernel's not), single
  // copy won.
  ::setenv("LOOM_PROBE_US", "0", 1);
  run_ranks(
      4,
      [](Communicator& comm) {
        for (std::size_t count : {7u, 1u << 14, 1u << 20}) every_collective(comm, count);
        // The model takes the windows for a large all-to-all (one copy instead of two).
        EXPECT_EQ(comm.estimate(Operation::all_to_all, 4u << 20, false, true).algorithm, "direct");
        EXPECT_NE(comm.estimate(Operation::all_to_all, 4u << 20).algorithm, "direct");
      },
      shm(nullptr));
  ::unsetenv("LOOM_PROBE_US");
}

TEST(SharedWindows, ARankWhoseBufferIsOutsideTurnsEveryRankToTheSlots) {
  run_ranks(
      3,
      [](Communicator& comm) {
        const std::size_t count = 4096;
        auto* window = static_cast<std::int32_t*>(comm.alloc(3 * count * sizeof(std::int32_t)));
        std::vector<std::int32_t> plain(3 * count), out(3 * count);
        std::int32_t* in = comm.rank() == 1 ? plain.data() : window;
        for (std::size_t i = 0; i < 3 * count; ++i) in[i] = value(comm.rank(), i);
        const std::uint64_t before = algorithms::direct_host_calls();
        comm.all_to_all(in, out.data(), count, DataType::i32);
        EXPECT_EQ(algorithms::direct_host_calls(), before);
        for (int j = 0; j < 3; ++j)
          for (std::size_t i = 0; i < count; ++i)
            ASSERT_EQ(out[static_cast<std::size_t>(j) * count + i],
                      value(j, static_cast<std::size_t>(comm.rank()) * count + i));
        // And the next call, every rank in windows, runs in place again.
        std::memcpy(window, in, 3 * count * sizeof(std::int32_t));
        comm.all_to_all(window, out.data(), count, DataType::i32);
        EXPECT_EQ(algorithms::direct_host_calls(), before + 1);
        comm.free(window);
      },
      shm("alltoall:direct"));
}

TEST(SharedWindows, FreeRefusesDisagreeingPointersOnEveryRankAndFreesNothing) {
  run_ranks(
      3,
      [](Communicator& comm) {
        void* a = comm.alloc(4096);
        void* b = comm.alloc(100);
        EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a) % 4096, 0u);
        EXPECT_EQ(static_cast<unsigned char*>(b)[99], 0);  // zeroed
        int local = 0;
        // Rank 2 frees another window, then memory alloc() never returned.
        EXPECT_THROW(comm.free(comm.rank() == 2 ? b : a), InvalidArgument);
        EXPECT_THROW(comm.free(comm.rank() == 2 ? static_cast<void*>(&local) : a), InvalidArgument);
        // Both windows are still there, and still shared.
        static_cast<std::int32_t*>(a)[0] = comm.rank() + 1;
        std::int32_t sum = 0;
        comm.all_reduce(a, &sum, 1, DataType::i32, ReduceOp::sum);
        EXPECT_EQ(sum, 6);
        comm.free(a);
        comm.free(b);
        EXPECT_THROW(comm.free(a), InvalidArgument);  // on every rank alike
        comm.barrier();
      },
      shm(nullptr));
}

TEST(SharedWindows, OverTcpTheMemoryIsPlainAndCallsGoThroughTheSlots) {
  testing::RunOptions opts;
  opts.options.transport = "tcp";
  opts.options.algorithm = kInPlaceEverywhere;
  run_ranks(
      2,
      [](Communicator& comm) {
        const std::uint64_t before = algorithms::direct_host_calls();
        every_collective(comm, 5000);
        EXPECT_EQ(algorithms::direct_host_calls(), before);
        EXPECT_NE(comm.estimate(Operation::all_to_all, 4u << 20, false, true).algorithm, "direct");
      },
      opts);
}

TEST(SharedWindows, SplitChildrenHaveTheirOwnWindows) {
  run_ranks(
      4,
      [](Communicator& comm) {
        auto child = comm.split(comm.rank() % 2, comm.rank());
        ASSERT_TRUE(child.has_value());
        const std::uint64_t before = algorithms::direct_host_calls();
        every_collective(*child, 300);
        // A parent's window is outside the child's: its calls go through the slots.
        auto* parent_window = static_cast<std::int32_t*>(comm.alloc(2 * 64 * sizeof(std::int32_t)));
        std::vector<std::int32_t> out(2 * 64);
        const std::uint64_t served = algorithms::direct_host_calls();
        child->all_to_all(parent_window, out.data(), 64, DataType::i32);
        EXPECT_EQ(algorithms::direct_host_calls(), served);
        EXPECT_GT(served - before, 0u);
        comm.free(parent_window);
      },
      shm(kInPlaceEverywhere));
}

// A rank SIGKILLed while all-to-alls run in place (between its messages, or while the peers copy
// from its window): every survivor raises PeerError naming it within seconds.
TEST(SharedWindows, ARankDyingMidCallIsNamedOnEverySurvivor) {
  testing::all_to_all_kill_trial("alltoall:direct", true);
}

}  // namespace
}  // namespace loom
