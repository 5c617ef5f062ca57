// The trials (algorithms/trials.hpp) over real ranks: more ranks than cores over shared memory,
// all-to-alls of two sizes interleaved, synchronous and not, each call checked element by element
// through both schedules of each trial and the winner after it, and the trace read for which
// algorithm ran each call. Ranks that kept different winners
// would send one schedule's messages into the other's and fail the call (a trial judged on each
// rank's own times alone failed so in 3 of 3 runs).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "../support/all_to_all_check.hpp"
#include "../support/kill_trial.hpp"
#include "../support/ranks.hpp"
#include "../support/scoped_env.hpp"
#include "algorithms/trials.hpp"
#include "base/config.hpp"
#include "base/process_memory.hpp"
#include "base/trace_internal.hpp"
#include "loom/trace.hpp"

namespace loom {
namespace {

using testing::check_all_to_all;
using testing::run_ranks;

// One all-to-all call as the trace saw it: the algorithms that ran it, and a trial's verdict
// ("<winner> kept over <loser> for ...") where it was the trial's last call.
struct TracedCall {
  std::int64_t start_us = 0;
  std::vector<std::string> algorithms;
  std::string verdict;
};

// This rank's calls of `kind` ("all_to_all") by their element type and count ("(i32 x 70001)"),
// in order. A call's algorithm and verdict spans end within its own span and on its thread.
std::map<std::string, std::vector<TracedCall>> traced_calls(const std::string& kind) {
  std::map<int, TracedCall> open;  // by thread: what the call running there has recorded so far
  std::map<std::string, std::vector<TracedCall>> calls;
  for (const trace::Event& e : trace::events()) {
    TracedCall& now = open[e.thread];
    if (e.category == "algorithm") now.algorithms.push_back(e.name);
    if (e.category == "trial") now.verdict = e.name;
    if (e.category != "collective") continue;
    if (e.name.rfind(kind + " #", 0) == 0) {
      now.start_us = e.start_us;
      calls[e.name.substr(e.name.find('('))].push_back(now);
    }
    now = TracedCall{};
  }
  for (auto& [size, list] : calls)
    std::sort(list.begin(), list.end(),
              [](const TracedCall& a, const TracedCall& b) { return a.start_us < b.start_us; });
  return calls;
}

// Each size's calls ran one algorithm each: the model's choice, then the rival for the trial's
// last calls (kRivalWarm + kCounted, or with `rival_warms_as_choice` as many as the choice ran),
// a verdict at the last, and the winner it names ever after.
void expect_trial_then_winner(const std::string& size, const std::vector<TracedCall>& calls,
                              bool rival_warms_as_choice = false) {
  using algorithms::Trials;
  SCOPED_TRACE(size);
  for (std::size_t i = 0; i < calls.size(); ++i)
    ASSERT_EQ(calls[i].algorithms.size(), 1u) << "call " << i << " ran as many algorithms";
  const auto judged = std::find_if(calls.begin(), calls.end(),
                                   [](const TracedCall& c) { return !c.verdict.empty(); });
  ASSERT_NE(judged, calls.end()) << "no verdict";
  const std::size_t last = static_cast<std::size_t>(judged - calls.begin());
  const std::size_t rival_calls =
      rival_warms_as_choice ? (last + 1) / 2 : Trials::kRivalWarm + Trials::kCounted;
  if (rival_warms_as_choice) {
    EXPECT_EQ((last + 1) % 2, 0u) << "a trial of " << last + 1 << " calls";
  }
  // Each side ran its counted calls after at least one it did not count.
  ASSERT_GE(rival_calls, static_cast<std::size_t>(Trials::kCounted + 1));
  ASSERT_GT(last + 1, rival_calls + Trials::kCounted);
  const std::string& choice = calls[0].algorithms[0];
  const std::string& rival = calls[last].algorithms[0];
  EXPECT_NE(choice, rival);
  for (std::size_t i = 0; i <= last; ++i)
    EXPECT_EQ(calls[i].algorithms[0], i + rival_calls <= last ? choice : rival) << "call " << i;
  const std::string& v = judged->verdict;
  const std::string winner = v.substr(0, v.find(" kept over "));
  EXPECT_TRUE(v == winner + " kept over " + (winner == choice ? rival : choice) +
                       v.substr(v.find(" for ")))
      << v;
  ASSERT_LT(last + 1, calls.size()) << "no call after the trial";
  for (std::size_t i = last + 1; i < calls.size(); ++i)
    EXPECT_EQ(calls[i].algorithms[0], winner) << "call " << i << ", after the verdict: " << v;
  EXPECT_EQ(std::count_if(calls.begin(), calls.end(),
                          [](const TracedCall& c) { return !c.verdict.empty(); }),
            1);
}

// More ranks than cores, at least 4 (0: this machine has too many cores for the test).
int crowded_world() {
  const int world = std::max(4, static_cast<int>(std::thread::hardware_concurrency()) + 1);
  return world <= 8 ? world : 0;
}

TEST(Trials, RanksOnSharedCoresMeasureBothSchedulesAndKeepTheSameWinner) {
  if (crowded_world() == 0) GTEST_SKIP() << "over 8 ranks to outnumber this machine's cores";
  if (!base::cross_memory_attach_available())
    GTEST_SKIP() << "process_vm_readv is refused here: no single copy to measure against";
  testing::RunOptions opts;
  opts.options.transport = "shm";
  opts.options.timeout = std::chrono::seconds(60);
  run_ranks(
      crowded_world(),
      [](Communicator& comm) {
        // Enough calls of each size for its trial and a few after it.
        using algorithms::Trials;
        constexpr int kCalls = Trials::kMostWarm + Trials::kRivalWarm + 2 * Trials::kCounted + 4;
        const std::uint64_t before = Trials::judged();
        // What ran each call: the algorithm's span within each call's, and the verdicts.
        base::start_trace(::testing::TempDir() + "/trials-%r.json");
        for (int call = 0; call < kCalls; ++call) {
          SCOPED_TRACE(call);
          check_all_to_all(comm, DataType::i32, 70001, call % 3 == 0);
          check_all_to_all(comm, DataType::u8, 33333, false);
        }
        EXPECT_EQ(Trials::judged() - before, 2u) << "one trial for each size";
        const auto traced = traced_calls("all_to_all");
        EXPECT_EQ(traced.size(), 2u);
        for (const auto& [size, calls] : traced) {
          EXPECT_EQ(calls.size(), static_cast<std::size_t>(kCalls));
          expect_trial_then_winner(size, calls);
        }
      },
      opts);
}

// Ranks in two halves on two pretend hosts, shared memory inside each and TCP across; no tuning
// table, whose rule would name the algorithm instead.
testing::RunOptions two_pretend_hosts() {
  testing::RunOptions opts;
  opts.options.transport = "auto";
  opts.options.timeout = std::chrono::seconds(60);
  opts.options.tuning_file = "off";
  opts.host_id = [](int rank, int size) { return rank < size / 2 ? "host-a" : "host-b"; };
  return opts;
}

// Every rank's input for an i32 sum all-reduce call, and the sum every rank must read back.
std::vector<std::int32_t> all_reduce_input(int rank, int call, std::size_t count) {
  std::vector<std::int32_t> v(count);
  for (std::size_t i = 0; i < count; ++i)
    v[i] = static_cast<std::int32_t>(
        (i * 31 + static_cast<std::size_t>(rank) * 7 + static_cast<std::size_t>(call)) % 100003);
  return v;
}

// The all-reduce across (pretend) hosts, whose links the model does not measure: each size's
// first calls run the model's choice, then its rival (the two cheapest rows: at 1 MiB
// hierarchical and halving-doubling in one run here, at 8 MiB hierarchical and the ring), every
// call exact, one verdict, and the winner it names on every later call.
TEST(Trials, TheAllReduceAcrossHostsMeasuresBothAndKeepsTheSameWinner) {
  run_ranks(
      4,
      [](Communicator& comm) {
        using algorithms::Trials;
        // 1 MiB: each side warms up for 8 calls with the default slots; 8 MiB: for 1.
        constexpr std::size_t kCounts[] = {std::size_t{1} << 18, std::size_t{1} << 21};
        constexpr int kCalls = 2 * (Trials::kMostWarm + Trials::kCounted) + 3;
        const std::uint64_t before = Trials::judged();
        base::start_trace(::testing::TempDir() + "/trials-hosts-%r.json");
        for (int call = 0; call < kCalls; ++call)
          for (std::size_t count : kCounts) {
            SCOPED_TRACE(::testing::Message() << "call " << call << ", " << count);
            std::vector<std::int32_t> buf = all_reduce_input(comm.rank(), call, count);
            comm.all_reduce(buf.data(), buf.data(), count, DataType::i32, ReduceOp::sum);
            std::vector<std::int32_t> want(count, 0);
            for (int r = 0; r < comm.size(); ++r) {
              const auto in = all_reduce_input(r, call, count);
              for (std::size_t i = 0; i < count; ++i) want[i] += in[i];
            }
            ASSERT_EQ(buf, want);
          }
        EXPECT_EQ(Trials::judged() - before, 2u) << "one trial for each size";
        const auto traced = traced_calls("all_reduce");
        EXPECT_EQ(traced.size(), 2u);
        for (const auto& [size, calls] : traced) {
          EXPECT_EQ(calls.size(), static_cast<std::size_t>(kCalls));
          expect_trial_then_winner(size, calls, true);
        }
      },
      two_pretend_hosts());
}

// LOOM_TRIALS=0 on every rank: the all-reduce across hosts runs the model's choice on every
// call, with no trial.
TEST(Trials, LoomTrialsOffRunsTheModelsChoiceOnEveryCall) {
  const testing::ScopedEnv off("LOOM_TRIALS", "0");  // the ranks are forked from here
  run_ranks(
      4,
      [](Communicator& comm) {
        using algorithms::Trials;
        constexpr std::size_t kCount = std::size_t{1} << 18;
        const std::uint64_t before = Trials::judged();
        base::start_trace(::testing::TempDir() + "/trials-off-%r.json");
        constexpr int kCalls = 2 * (Trials::kMostWarm + Trials::kCounted) + 3;
        for (int call = 0; call < kCalls; ++call) {
          std::vector<std::int32_t> buf = all_reduce_input(comm.rank(), call, kCount);
          comm.all_reduce(buf.data(), buf.data(), kCount, DataType::i32, ReduceOp::sum);
        }
        EXPECT_EQ(Trials::judged(), before);
        const auto traced = traced_calls("all_reduce");
        ASSERT_EQ(traced.size(), 1u);
        const auto& calls = traced.begin()->second;
        ASSERT_EQ(calls.size(), static_cast<std::size_t>(kCalls));
        for (const TracedCall& c : calls) {
          ASSERT_EQ(c.algorithms.size(), 1u);
          EXPECT_EQ(c.algorithms[0], calls[0].algorithms[0]);
          EXPECT_TRUE(c.verdict.empty());
        }
      },
      two_pretend_hosts());
}

// A rank SIGKILLed 30 ms into a loop of 1 MiB-block all-to-alls, with nothing forced: on 4 ranks
// and 2 cores such a call took 1.2-1.9 ms, so the kill lands within the size's trial (23 calls
// and the swap) or soon after it. Every survivor raises PeerError naming it within seconds.
TEST(Trials, ARankDyingMidTrialIsNamedOnEverySurvivor) {
  if (std::thread::hardware_concurrency() >= 4) GTEST_SKIP() << "4 ranks have a core each here";
  if (!base::cross_memory_attach_available())
    GTEST_SKIP() << "process_vm_readv is refused here: no single copy to measure against";
  testing::all_to_all_kill_trial("", false);
}

// The all-reduce's trial across (pretend) hosts with a rank SIGKILLed within it: in the choice's
// counted calls, in the rival's first call (which opens connections the choice never used), in
// its counted calls, and in the last call (the one that ends with the round of times). Every
// survivor raises PeerError naming it within seconds; no verdict is reached, and no call that
// returned passed off a wrong sum.
class TrialAcrossHostsKill : public ::testing::TestWithParam<std::string> {};

TEST_P(TrialAcrossHostsKill, EverySurvivorNamesTheDeadRank) {
  using algorithms::Trials;
  const testing::ScopedEnv trials("LOOM_TRIALS", "1");  // whatever the environment says
  constexpr std::size_t kBytes = std::size_t{4} << 20;
  testing::RunOptions run = two_pretend_hosts();
  Options& o = run.options;
  o.algorithm = "";  // no rule, whatever LOOM_ALGO says
  o.slots = base::LinkConfig{}.slots;
  o.buffer_bytes = base::LinkConfig{}.buffer_bytes;
  const Trials::Trial::Warm warm =
      Trials::warm_calls(algorithms::Kind::all_reduce, kBytes, *o.slots,
                         *o.buffer_bytes / static_cast<std::size_t>(*o.slots));
  const int rival_first = warm.choice + Trials::kCounted;
  const int last = rival_first + warm.rival + Trials::kCounted - 1;
  const std::string& when = GetParam();
  testing::all_reduce_across_hosts_kill_trial(run, when == "choice"        ? warm.choice + 1
                                                   : when == "rival_first" ? rival_first
                                                   : when == "rival"       ? last - 1
                                                                           : last);
}

INSTANTIATE_TEST_SUITE_P(Calls, TrialAcrossHostsKill,
                         ::testing::Values("choice", "rival_first", "rival", "last"),
                         [](const auto& info) { return info.param; });

// A rule names the schedule: nothing is tried, where it would be without the rule.
TEST(Trials, LoomAlgoNamesTheScheduleInstead) {
  if (crowded_world() == 0) GTEST_SKIP() << "over 8 ranks to outnumber this machine's cores";
  testing::RunOptions opts;
  opts.options.transport = "shm";
  opts.options.algorithm = "alltoall:pairwise";
  run_ranks(
      crowded_world(),
      [](Communicator& comm) {
        const std::uint64_t before = algorithms::Trials::judged();
        for (int call = 0; call < 2 * algorithms::Trials::kMostWarm + 8; ++call)
          check_all_to_all(comm, DataType::f32, 4099, false);
        EXPECT_EQ(algorithms::Trials::judged(), before);
      },
      opts);
}

}  // namespace
}  // namespace loom
