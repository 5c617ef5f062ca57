// gather, scatter, all_to_all and the uneven calls (all_to_all_v, all_gather_v,
// reduce_scatter_v), in real processes over every transport and algorithm, checked element by
// element; counts that disagree between ranks are a CollectiveMismatch on every rank.
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <csignal>
#include <cstddef>
#include <cstring>
#include <numeric>
#include <vector>

#include "../support/all_to_all_check.hpp"
#include "../support/kill_trial.hpp"
#include "../support/ranks.hpp"
#include "../support/refuse_system_call.hpp"
#include "../support/transports.hpp"
#include "verify/patterns.hpp"

namespace loom {
namespace {

using testing::check_all_to_all;
using testing::run_ranks;

constexpr DataType kTypes[] = {DataType::f32, DataType::f64, DataType::f16, DataType::bf16,
                               DataType::i8,  DataType::u8,  DataType::i32, DataType::u32,
                               DataType::i64, DataType::u64};
constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max,
                             ReduceOp::avg};

std::byte* at(std::vector<std::byte>& v, std::size_t elems, DataType t) {
  return v.data() + elems * size_of(t);
}

// Elements of `got` that differ from rank `owner`'s pattern for [first, first + count).
std::uint64_t wrong_block(const std::byte* got, std::size_t count, int owner, DataType t,
                          std::size_t first) {
  std::vector<std::byte> want(count * size_of(t) + 1);
  verify::fill(want.data(), count, owner, t, ReduceOp::sum, first);
  return verify::count_wrong(got, want.data(), count, t);
}

void check_gather(Communicator& comm, DataType t, std::size_t count, bool in_place, bool async) {
  const int n = comm.size(), r = comm.rank();
  const int root = static_cast<int>(count % static_cast<std::size_t>(n));
  const std::size_t total = count * static_cast<std::size_t>(n);
  std::vector<std::byte> in(count * size_of(t) + 1), out(total * size_of(t) + 1);
  std::byte* ip = in.data();
  if (in_place && r == root) ip = at(out, static_cast<std::size_t>(r) * count, t);
  verify::fill(ip, count, r, t, ReduceOp::sum, static_cast<std::size_t>(r) * count);
  if (async)
    comm.gather_async(ip, out.data(), count, t, root).wait();
  else
    comm.gather(ip, out.data(), count, t, root);
  if (r != root) return;
  for (int j = 0; j < n; ++j)
    EXPECT_EQ(wrong_block(at(out, static_cast<std::size_t>(j) * count, t), count, j, t,
                          static_cast<std::size_t>(j) * count),
              0u)
        << "block " << j;
}

void check_scatter(Communicator& comm, DataType t, std::size_t count, bool in_place, bool async) {
  const int n = comm.size(), r = comm.rank();
  const int root = static_cast<int>(count % static_cast<std::size_t>(n));
  const std::size_t total = count * static_cast<std::size_t>(n);
  std::vector<std::byte> in(total * size_of(t) + 1), out(count * size_of(t) + 1);
  if (r == root)
    for (int j = 0; j < n; ++j)
      verify::fill(at(in, static_cast<std::size_t>(j) * count, t), count, j, t, ReduceOp::sum,
                   static_cast<std::size_t>(j) * count);
  std::byte* op =
      in_place && r == root ? at(in, static_cast<std::size_t>(r) * count, t) : out.data();
  if (async)
    comm.scatter_async(in.data(), op, count, t, root).wait();
  else
    comm.scatter(in.data(), op, count, t, root);
  EXPECT_EQ(wrong_block(op, count, r, t, static_cast<std::size_t>(r) * count), 0u);
}

// What rank `from` sends rank `to` in the uneven tests: some pairs nothing, none the same.
std::size_t pair_count(int from, int to, std::size_t scale) {
  return static_cast<std::size_t>((from * 3 + to * 5) % 7) * scale;
}

std::vector<std::size_t> displacements(const std::vector<std::size_t>& counts, std::size_t gap) {
  std::vector<std::size_t> displs(counts.size());
  std::size_t at = gap;
  for (std::size_t j = 0; j < counts.size(); ++j) displs[j] = at, at += counts[j] + gap;
  return displs;
}

std::size_t end_of(const std::vector<std::size_t>& counts, const std::vector<std::size_t>& displs) {
  std::size_t end = 0;
  for (std::size_t j = 0; j < counts.size(); ++j) end = std::max(end, displs[j] + counts[j]);
  return end + 1;
}

void check_all_to_all_v(Communicator& comm, DataType t, std::size_t scale, bool async) {
  const int n = comm.size(), r = comm.rank();
  std::vector<std::size_t> send_counts(n), recv_counts(n);
  for (int j = 0; j < n; ++j)
    send_counts[j] = pair_count(r, j, scale), recv_counts[j] = pair_count(j, r, scale);
  const auto send_displs = displacements(send_counts, 3),
             recv_displs = displacements(recv_counts, 5);
  std::vector<std::byte> in(end_of(send_counts, send_displs) * size_of(t));
  std::vector<std::byte> out(end_of(recv_counts, recv_displs) * size_of(t));
  for (int j = 0; j < n; ++j)  // the block for j: r's pattern starting at j * 1000
    verify::fill(at(in, send_displs[j], t), send_counts[j], r, t, ReduceOp::sum,
                 static_cast<std::size_t>(j) * 1000);
  if (async)
    comm.all_to_all_v_async(in.data(), send_counts, send_displs, out.data(), recv_counts,
                            recv_displs, t)
        .wait();
  else
    comm.all_to_all_v(in.data(), send_counts, send_displs, out.data(), recv_counts, recv_displs, t);
  for (int j = 0; j < n; ++j)
    EXPECT_EQ(wrong_block(at(out, recv_displs[j], t), recv_counts[j], j, t,
                          static_cast<std::size_t>(r) * 1000),
              0u)
        << "block from rank " << j;
}

std::vector<std::size_t> uneven_counts(int n, std::size_t scale) {
  std::vector<std::size_t> counts(n);
  for (int j = 0; j < n; ++j) counts[j] = static_cast<std::size_t>((j * 3 + 1) % 5) * scale;
  return counts;
}

void check_all_gather_v(Communicator& comm, DataType t, std::size_t scale, bool in_place,
                        bool async) {
  const int n = comm.size(), r = comm.rank();
  const auto counts = uneven_counts(n, scale);
  const auto displs = displacements(counts, 2);
  std::vector<std::byte> in(counts[r] * size_of(t) + 1), out(end_of(counts, displs) * size_of(t));
  std::byte* ip = in_place ? at(out, displs[r], t) : in.data();
  verify::fill(ip, counts[r], r, t, ReduceOp::sum, displs[r]);
  if (async)
    comm.all_gather_v_async(ip, out.data(), counts, displs, t).wait();
  else
    comm.all_gather_v(ip, out.data(), counts, displs, t);
  for (int j = 0; j < n; ++j)
    EXPECT_EQ(wrong_block(at(out, displs[j], t), counts[j], j, t, displs[j]), 0u)
        << "block of rank " << j;
}

void check_reduce_scatter_v(Communicator& comm, DataType t, ReduceOp op, std::size_t scale,
                            bool in_place, bool async) {
  const int n = comm.size(), r = comm.rank();
  const auto counts = uneven_counts(n, scale);
  const auto displs = displacements(counts, 4);
  const std::size_t end = end_of(counts, displs);
  std::vector<std::byte> in(end * size_of(t)), out(counts[r] * size_of(t) + 1);
  verify::fill(in.data(), end, r, t, op);
  std::byte* op_ = in_place ? at(in, displs[r], t) : out.data();
  if (async)
    comm.reduce_scatter_v_async(in.data(), op_, counts, displs, t, op).wait();
  else
    comm.reduce_scatter_v(in.data(), op_, counts, displs, t, op);
  const auto want = verify::expected_reduction(displs[r], counts[r], n, t, op);
  EXPECT_EQ(verify::count_wrong(op_, want.data(), counts[r], t), 0u);
}

// World size, the algorithm named for gather and scatter, or for all-to-all ("single_copy")
// ("" lets the model pick), transport.
class MoreCollectives : public ::testing::TestWithParam<std::tuple<int, std::string, std::string>> {
 protected:
  int world() const { return std::get<0>(GetParam()); }
  testing::RunOptions run_options() const {
    testing::RunOptions o;
    const std::string& algo = std::get<1>(GetParam());
    if (algo == "single_copy")
      o.options.algorithm = "alltoall:single_copy,alltoallv:single_copy";
    else if (!algo.empty())
      o.options.algorithm = "gather:" + algo + ",scatter:" + algo;
    o.options.transport = std::get<2>(GetParam());
    if (o.options.transport == "auto")
      o.host_id = [](int rank, int size) { return rank < size / 2 ? "half-a" : "half-b"; };
    return o;
  }
};

TEST_P(MoreCollectives, EveryCallAndDtypeMatchesTheReference) {
  run_ranks(
      world(),
      [](Communicator& comm) {
        for (DataType t : kTypes)
          for (std::size_t count : {1u, 7u, 4093u})
            for (bool in_place : {false, true}) {
              SCOPED_TRACE(::testing::Message()
                           << to_string(t) << " count " << count << (in_place ? " in place" : ""));
              const bool async = count == 7;
              check_gather(comm, t, count, in_place, async);
              check_scatter(comm, t, count, in_place, async);
              if (!in_place) check_all_to_all(comm, t, count, async);
              if (!in_place) check_all_to_all_v(comm, t, count, async);
              check_all_gather_v(comm, t, count, in_place, async);
            }
        for (DataType t : kTypes)
          for (ReduceOp op : kOps)
            for (bool in_place : {false, true}) {
              SCOPED_TRACE(::testing::Message() << to_string(t) << " " << to_string(op)
                                                << (in_place ? " in place" : ""));
              check_reduce_scatter_v(comm, t, op, 301, in_place, op == ReduceOp::max);
            }
      },
      run_options());
}

TEST_P(MoreCollectives, LargeBlocksPipelineThroughTheSlots) {
  if (world() > 4) GTEST_SKIP() << "covered at smaller world sizes; keeps the suite short";
  run_ranks(
      world(),
      [](Communicator& comm) {
        const std::size_t count = (1u << 18) + 3;
        check_gather(comm, DataType::f32, count, false, false);
        check_scatter(comm, DataType::i32, count, true, false);
        check_all_to_all(comm, DataType::f32, count, false);
        check_all_to_all_v(comm, DataType::u8, 100000, true);
        check_all_gather_v(comm, DataType::bf16, 100000, true, false);
        check_reduce_scatter_v(comm, DataType::f32, ReduceOp::sum, 100000, false, false);
      },
      run_options());
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, MoreCollectives,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 5, 8),
                                            ::testing::Values("", "linear", "binomial"),
                                            loom::testing::transports_and_auto()),
                         [](const auto& info) {
                           const std::string& algo = std::get<1>(info.param);
                           return std::get<2>(info.param) + "_world" +
                                  std::to_string(std::get<0>(info.param)) + "_" +
                                  (algo.empty() ? std::string("auto") : algo);
                         });

// All-to-all read out of the peers' memory: one host over shm only.
INSTANTIATE_TEST_SUITE_P(OneCopy, MoreCollectives,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 5, 8),
                                            ::testing::Values("single_copy"),
                                            ::testing::Values("shm")),
                         [](const auto& info) {
                           return "shm_world" + std::to_string(std::get<0>(info.param));
                         });

// Counts that disagree between ranks: every rank raises CollectiveMismatch, naming the ranks
// and counts, within seconds (the timeout is a minute), never waiting: at that call, or at the
// next one where its own part of the call could finish.
void expect_mismatch_everywhere(const std::function<void(Communicator&)>& call,
                                const std::string& algorithm = "") {
  testing::RunOptions opts;
  opts.options.timeout = std::chrono::seconds(60);
  opts.options.algorithm = algorithm;
  if (!algorithm.empty()) opts.options.transport = "shm";
  run_ranks(
      3,
      [&call](Communicator& comm) {
        const auto start = std::chrono::steady_clock::now();
        try {
          call(comm);
          comm.barrier();
          ADD_FAILURE() << "rank " << comm.rank() << ": no error";
        } catch (const CollectiveMismatch& e) {
          const std::string what = e.what();
          EXPECT_NE(what.find("rank"), std::string::npos) << what;
        } catch (const Error& e) {
          ADD_FAILURE() << "rank " << comm.rank() << ": not a CollectiveMismatch: " << e.what();
        }
        EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15));
      },
      opts);
}

TEST(UnevenMismatch, AllGatherVWithOtherCountsOnOneRank) {
  expect_mismatch_everywhere([](Communicator& comm) {
    std::vector<std::size_t> counts{4, 4, 4};
    if (comm.rank() == 1) counts = {4, 5, 4};
    const std::vector<std::size_t> displs{0, 8, 16};
    std::vector<float> in(8), out(32);
    comm.all_gather_v(in.data(), out.data(), counts, displs, DataType::f32);
  });
}

TEST(UnevenMismatch, AllToAllVWhereASenderSendsWhatItsReceiverDoesNotExpect) {
  for (const char* algorithm : {"", "alltoallv:single_copy"})
    for (std::size_t expected : {0u, 2u, 5u}) {  // rank 0 sends 3 to rank 1 (0: sends nothing)
      SCOPED_TRACE(::testing::Message() << expected << " " << algorithm);
      expect_mismatch_everywhere(
          [expected](Communicator& comm) {
            std::vector<std::size_t> send(3, 3), recv(3, 3);
            if (comm.rank() == 1) recv[0] = expected;
            if (expected == 5 && comm.rank() == 0) send[1] = 0;  // the receiver waits for data
            const std::vector<std::size_t> displs{0, 8, 16};
            std::vector<float> in(32), out(32);
            comm.all_to_all_v(in.data(), send, displs, out.data(), recv, displs, DataType::f32);
          },
          algorithm);
    }
}

TEST(UnevenMismatch, AllToAllWithAnotherCountOnOneRankInOneCopy) {
  expect_mismatch_everywhere(
      [](Communicator& comm) {
        const std::size_t count = comm.rank() == 2 ? 5 : 4;
        std::vector<float> in(3 * count), out(3 * count);
        comm.all_to_all(in.data(), out.data(), count, DataType::f32);
      },
      "alltoall:single_copy");
}

// Rank 1 advertised at init that it reads its peers' memory, then lost the right: its reads of
// the first single-copy call fail, each of its peers learns it from its done message, and their
// blocks of that call and of the later ones move through the slots (ranks 0 and 2 go on reading
// each other's), with every element right on every rank.
TEST(SingleCopyAllToAll, ARankRefusedItsReadsTurnsItsPairsToTheSlots) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "the test's seccomp filter is written for x86-64";
#endif
  testing::RunOptions opts;
  opts.options.transport = "shm";
  opts.options.algorithm = "alltoall:single_copy,alltoallv:single_copy";
  run_ranks(
      3,
      [](Communicator& comm) {
        comm.barrier();
        if (comm.rank() == 1) testing::refuse_system_call(SYS_process_vm_readv);
        for (int call = 0; call < 3; ++call) {
          SCOPED_TRACE(call);
          check_all_to_all(comm, DataType::i32, 70000 + static_cast<std::size_t>(call), false);
          check_all_to_all_v(comm, DataType::u8, 5000, call == 1);
        }
      },
      opts);
}

// Counts that disagree: every rank raises CollectiveMismatch naming the ranks and counts.
TEST(UnevenMismatch, AllReduceWithAnotherCountOnOneRankInOneCopy) {
  expect_mismatch_everywhere(
      [](Communicator& comm) {
        const std::size_t count = comm.rank() == 2 ? 5000 : 4096;
        std::vector<float> in(count), out(count);
        comm.all_reduce(in.data(), out.data(), count, DataType::f32, ReduceOp::sum);
      },
      "single_copy");
}

// A rank SIGKILLed while single-copy all-to-alls run (between its messages, or while peers read
// its memory): every survivor raises PeerError naming it within seconds.
TEST(SingleCopyAllToAll, ARankDyingMidCallIsNamedOnEverySurvivor) {
  testing::all_to_all_kill_trial("alltoall:single_copy", false);
}

TEST(UnevenArguments, WrongLengthsAndAliasedBuffersAreRefusedAndLeaveTheCommunicatorUsable) {
  run_ranks(2, [](Communicator& comm) {
    std::vector<float> a(64), b(64);
    const std::vector<std::size_t> two{4, 4}, three{4, 4, 4}, displs{0, 8};
    EXPECT_THROW(comm.all_gather_v(a.data(), b.data(), three, displs, DataType::f32),
                 InvalidArgument);
    EXPECT_THROW(comm.all_to_all(a.data(), a.data(), 4, DataType::f32), InvalidArgument);
    EXPECT_THROW(comm.gather(a.data(), b.data(), 4, DataType::f32, 2), InvalidArgument);
    EXPECT_THROW(comm.scatter(nullptr, b.data(), 4, DataType::f32, comm.rank()), InvalidArgument);
    const std::vector<std::size_t> huge{SIZE_MAX / 8, 1};
    EXPECT_THROW(comm.all_gather_v(a.data(), b.data(), huge, displs, DataType::f32),
                 InvalidArgument);
    try {
      comm.reduce_scatter_v(a.data(), b.data(), two, three, DataType::f32, ReduceOp::sum);
      ADD_FAILURE() << "three displacements for two ranks were accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("one per rank"), std::string::npos) << e.what();
    }
    // Still usable.
    comm.all_gather_v(a.data(), b.data(), two, displs, DataType::f32);
  });
}

}  // namespace
}  // namespace loom
