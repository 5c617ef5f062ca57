// The single-copy all-reduce (process_vm_readv and process_vm_writev between one host's ranks)
// where the copies fail: refused before the first call (every rank turns to the ring), refused
// after it (the ring runs the call again out of place; in place every rank raises, naming the
// rank), and a rank killed mid-call. Every element checked; no rank waits for another.
#include <gtest/gtest.h>
#include <sys/syscall.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "../support/kill_trial.hpp"
#include "../support/ranks.hpp"
#include "../support/refuse_system_call.hpp"
#include "algorithms/algorithms.hpp"
#include "verify/patterns.hpp"

namespace loom {
namespace {

using testing::run_ranks;

// The all-reduce of `count` elements of `t` (sum), in place or not, checked element by element.
void check_all_reduce(Communicator& comm, DataType t, std::size_t count, bool in_place) {
  const int n = comm.size(), r = comm.rank();
  std::vector<std::byte> in(count * size_of(t) + 1), out(count * size_of(t) + 1);
  verify::fill(in.data(), count, r, t, ReduceOp::sum);
  std::byte* result = in_place ? in.data() : out.data();
  comm.all_reduce(in.data(), result, count, t, ReduceOp::sum);
  const auto want = verify::expected_reduction(0, count, n, t, ReduceOp::sum);
  EXPECT_EQ(verify::count_wrong(result, want.data(), count, t), 0u);
}

testing::RunOptions single_copy_options() {
  testing::RunOptions opts;
  opts.options.transport = "shm";
  opts.options.algorithm = "single_copy";
  opts.options.timeout = std::chrono::seconds(60);
  return opts;
}

// Which ranks lose the right to make a system call, and which call.
struct Refusal {
  long call;
  bool every_rank;  // else rank 1 alone
  bool refuses(int rank) const { return every_rank || rank == 1; }
};

// Rank 1 advertised at init that it reads its peers' memory, then lost the right: in the first
// single-copy all-reduce every rank learns it from the same messages, and that call and the later
// ones run the ring, with every element right on every rank and no rank waiting for another.
void all_reduce_with_a_refusing_rank(long refused) {
  run_ranks(
      3,
      [refused](Communicator& comm) {
        comm.barrier();
        if (comm.rank() == 1) testing::refuse_system_call(refused);
        const auto start = std::chrono::steady_clock::now();
        const std::uint64_t served = algorithms::single_copy_all_reduce_calls();
        for (int call = 0; call < 3; ++call) {
          SCOPED_TRACE(call);
          check_all_reduce(comm, DataType::i32, 300001 + static_cast<std::size_t>(call), call == 1);
          check_all_reduce(comm, DataType::u8, 4093, call != 1);
        }
        EXPECT_EQ(algorithms::single_copy_all_reduce_calls(), served) << "no call is a single copy";
        EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15));
      },
      single_copy_options());
}

TEST(SingleCopyAllReduce, ARankRefusedItsReadsTurnsEveryRankToTheRing) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "the test's seccomp filter is written for x86-64";
#endif
  all_reduce_with_a_refusing_rank(SYS_process_vm_readv);
}

// Writes refused alone (the block goes into the peers' outputs by process_vm_writev): the first
// call's check writes too, and every rank turns to the ring alike.
TEST(SingleCopyAllReduce, ARankRefusedItsWritesTurnsEveryRankToTheRing) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "the test's seccomp filter is written for x86-64";
#endif
  all_reduce_with_a_refusing_rank(SYS_process_vm_writev);
}

// The first call is a single copy on every rank; then `refusal` takes effect: the next call, out
// of place, runs again as the ring after the failed copies, and the later ones (in place too)
// run the ring from the start, every element right on every rank, within seconds.
void refused_after_the_first_call(Refusal refusal) {
  run_ranks(
      3,
      [refusal](Communicator& comm) {
        const std::uint64_t served = algorithms::single_copy_all_reduce_calls();
        check_all_reduce(comm, DataType::i32, 300001, false);
        EXPECT_EQ(algorithms::single_copy_all_reduce_calls(), served + 1) << "a single copy";
        comm.barrier();
        if (refusal.refuses(comm.rank())) testing::refuse_system_call(refusal.call);
        const auto start = std::chrono::steady_clock::now();
        check_all_reduce(comm, DataType::i32, 300002, false);
        check_all_reduce(comm, DataType::f32, 300003, true);
        check_all_reduce(comm, DataType::u8, 4093, false);
        EXPECT_EQ(algorithms::single_copy_all_reduce_calls(), served + 1) << "the ring since";
        EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15));
      },
      single_copy_options());
}

TEST(SingleCopyAllReduce, ReadsRefusedOnOneRankAfterTheFirstCallRunTheCallAgainAsTheRing) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "the test's seccomp filter is written for x86-64";
#endif
  refused_after_the_first_call({SYS_process_vm_readv, false});
}

// Every rank's copies fail: none waits for another (each says so before it awaits the others).
TEST(SingleCopyAllReduce, WritesRefusedOnEveryRankAfterTheFirstCallRunTheCallAgainAsTheRing) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "the test's seccomp filter is written for x86-64";
#endif
  refused_after_the_first_call({SYS_process_vm_writev, true});
}

// In place the inputs are partly overwritten when rank 1's reads fail: every rank raises within
// seconds, naming rank 1 (PeerError on every rank, as a failed rank is told) and the cause.
TEST(SingleCopyAllReduce, ReadsRefusedAfterTheFirstCallInPlaceRaiseOnEveryRankNamingTheRank) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "the test's seccomp filter is written for x86-64";
#endif
  run_ranks(
      3,
      [](Communicator& comm) {
        check_all_reduce(comm, DataType::i32, 300001, true);
        comm.barrier();
        if (comm.rank() == 1) testing::refuse_system_call(SYS_process_vm_readv);
        const auto start = std::chrono::steady_clock::now();
        std::vector<std::int32_t> data(300002, 1);
        try {
          comm.all_reduce(data.data(), data.data(), data.size(), DataType::i32, ReduceOp::sum);
          ADD_FAILURE() << "rank " << comm.rank() << ": no error";
        } catch (const PeerError& e) {
          EXPECT_EQ(e.peer(), 1) << e.what();
          EXPECT_NE(std::string(e.what()).find("rank 1 could not read or write rank"),
                    std::string::npos)
              << e.what();
          EXPECT_NE(std::string(e.what()).find("Operation not permitted"), std::string::npos)
              << e.what();
        }
        EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15));
      },
      single_copy_options());
}

// Input and output overlapping without being one buffer (the output 16 elements further on): the
// peers read a copy of the input, which the output overwrites as the call runs.
TEST(SingleCopyAllReduce, OverlappingBuffersReduceTheInputAsItWasAtTheCall) {
  run_ranks(
      3,
      [](Communicator& comm) {
        const std::uint64_t served = algorithms::single_copy_all_reduce_calls();
        for (std::size_t shift : {16u, 0u}) {
          const std::size_t count = 300001;
          std::vector<std::int32_t> buffer(count + 16);
          verify::fill(buffer.data() + 16 - shift, count, comm.rank(), DataType::i32,
                       ReduceOp::sum);
          comm.all_reduce(buffer.data() + 16 - shift, buffer.data() + 16, count, DataType::i32,
                          ReduceOp::sum);
          const auto want =
              verify::expected_reduction(0, count, comm.size(), DataType::i32, ReduceOp::sum);
          EXPECT_EQ(verify::count_wrong(buffer.data() + 16, want.data(), count, DataType::i32), 0u)
              << "output " << shift << " elements past the input";
        }
        EXPECT_EQ(algorithms::single_copy_all_reduce_calls(), served + 2);
      },
      single_copy_options());
}

// A rank SIGKILLed while single-copy all-reduces run (between its messages, or while its peers
// read its memory): every survivor raises PeerError naming it within seconds.
TEST(SingleCopyAllReduce, ARankDyingMidCallIsNamedOnEverySurvivor) {
  testing::all_reduce_kill_trial("single_copy");
}

}  // namespace
}  // namespace loom
