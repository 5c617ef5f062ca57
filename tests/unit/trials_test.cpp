// The trials (trials.hpp): where the selector names a rival, the order of a trial's calls, the
// judgement from every rank's times, and the sizes a communicator tries.
#include <gtest/gtest.h>

#include <string_view>
#include <utility>
#include <vector>

#include "algorithms/trials.hpp"
#include "selection_inputs.hpp"

namespace loom::algorithms {
namespace {

using namespace test_inputs;

SelectionInputs crowded_shm(int ranks, int cores) {
  return shm_host(ranks, cores, zen4_rates());
}

std::string_view rival(const SelectionInputs& in, Kind kind, std::size_t bytes, bool device = false,
                       bool windows = false) {
  const Algorithm* r = Selector(in).choose(kind, bytes, device, windows).rival;
  return r == nullptr ? "" : r->name;
}

// Only the all-to-all of host buffers on one host over shared memory with more ranks than
// cores: there the two schedules' prices are not measured. Wherever a rule names the
// algorithm, it stands.
TEST(Trials, TheAllToAllWhereRanksOutnumberCoresHasARival) {
  const auto crowded = crowded_shm(4, 2);
  for (std::size_t bytes : {std::size_t{64} << 10, std::size_t{1} << 20, std::size_t{4} << 20}) {
    const Selector::Choice c = Selector(crowded).choose(Kind::all_to_all, bytes, false, false);
    ASSERT_NE(c.rival, nullptr) << bytes;
    EXPECT_NE(c.rival, c.algorithm);
    const std::string_view names[] = {c.algorithm->name, c.rival->name};
    EXPECT_TRUE((names[0] == "pairwise" && names[1] == "single_copy") ||
                (names[0] == "single_copy" && names[1] == "pairwise"))
        << names[0] << " " << names[1];
  }
  EXPECT_EQ(rival(crowded_shm(2, 2), Kind::all_to_all, 1 << 20), "");     // a core each
  EXPECT_EQ(rival(crowded, Kind::all_to_all, 1 << 20, true), "");         // device buffers
  EXPECT_EQ(rival(crowded, Kind::all_to_all, 1 << 20, false, true), "");  // in the windows
  EXPECT_EQ(rival(crowded, Kind::all_reduce, 1 << 20), "");
  EXPECT_EQ(rival(crowded, Kind::all_to_all_v, 1 << 20), "");
  auto tcp = crowded;
  tcp.local = TransportKind::tcp;
  EXPECT_EQ(rival(tcp, Kind::all_to_all, 1 << 20), "");
  auto unreadable = crowded;
  unreadable.reads_peers = false;  // the single copy cannot run: nothing to measure against
  EXPECT_EQ(rival(unreadable, Kind::all_to_all, 1 << 20), "");
  auto forced = crowded;
  forced.overrides = "alltoall:pairwise";
  EXPECT_EQ(rival(forced, Kind::all_to_all, 1 << 20), "");
  auto tuned = crowded;
  tuned.tuned = "alltoall:single_copy";
  EXPECT_EQ(rival(tuned, Kind::all_to_all, 1 << 20), "");
}

// `ranks` ranks' times, every rank the same: the choice's counted calls, then the rival's.
std::vector<Trials::Times> ranks_with(const double (&choice)[Trials::kCounted],
                                      const double (&rival)[Trials::kCounted], int ranks = 3) {
  std::vector<Trials::Times> all(static_cast<std::size_t>(ranks));
  for (auto& t : all)
    for (int c = 0; c < Trials::kCounted; ++c) t.choice_us[c] = choice[c], t.rival_us[c] = rival[c];
  return all;
}

TEST(Trials, EachCallIsItsSlowestRanksAndEachSideItsMedian) {
  auto all = ranks_with({300, 310, 290}, {200, 210, 9000});
  Trials::Judgement j = Trials::judge(all);
  EXPECT_DOUBLE_EQ(j.choice_us, 300);
  EXPECT_DOUBLE_EQ(j.rival_us, 210);
  EXPECT_TRUE(j.rival_wins);
  // One rank slower at two of the rival's calls: those calls take its time, and the median moves.
  all[2].rival_us[0] = 400, all[2].rival_us[1] = 500;
  j = Trials::judge(all);
  EXPECT_DOUBLE_EQ(j.rival_us, 500);
  EXPECT_FALSE(j.rival_wins);
  // The same on the choice's side: two ranks each slower at one call make the choice's median
  // their time, and the rival, faster than that, wins.
  all = ranks_with({100, 100, 100}, {150, 150, 150});
  all[0].choice_us[1] = 160, all[1].choice_us[2] = 170;
  j = Trials::judge(all);
  EXPECT_DOUBLE_EQ(j.choice_us, 160);
  EXPECT_TRUE(j.rival_wins);
  // A tie keeps the model's choice.
  EXPECT_FALSE(Trials::judge(ranks_with({100, 100, 100}, {100, 100, 100})).rival_wins);
}

// The choice's calls, then the rival's, each its warm-up then its counted calls; only the
// counted calls' times are kept.
TEST(Trials, ATrialWarmsUpEachSideCountsThenKeepsItsWinner) {
  const auto in = crowded_shm(4, 2);
  const Selector::Choice c = Selector(in).choose(Kind::all_to_all, 1 << 20, false, false);
  ASSERT_NE(c.rival, nullptr);
  Trials trials;
  Trials::Trial* t = trials.of({Kind::all_to_all, 1 << 20}, c.algorithm, c.rival, {2, 1});
  ASSERT_NE(t, nullptr);
  const int choice_calls = 2 + Trials::kCounted;
  ASSERT_EQ(t->calls(), choice_calls + Trials::kRivalWarm + Trials::kCounted);
  for (int call = 0; call < t->calls(); ++call) {
    EXPECT_EQ(t->next(), call < choice_calls ? c.algorithm : c.rival) << call;
    EXPECT_EQ(t->winner(), nullptr);
    // Warm-up calls take 1000 us, counted ones the call's number.
    const bool warm =
        call < 2 || (call >= choice_calls && call < choice_calls + Trials::kRivalWarm);
    EXPECT_EQ(t->record(warm ? 1000 : call), call == t->calls() - 1) << call;
  }
  for (int k = 0; k < Trials::kCounted; ++k) {
    EXPECT_DOUBLE_EQ(t->times().choice_us[k], 2 + k);
    EXPECT_DOUBLE_EQ(t->times().rival_us[k], choice_calls + Trials::kRivalWarm + k);
  }
  const std::vector<Trials::Times> all(2, t->times());
  EXPECT_FALSE(t->decide(all).rival_wins);
  EXPECT_EQ(t->winner(), c.algorithm);
  EXPECT_FALSE(t->record(1));  // judged: nothing more is recorded
  // The same trial for the same kind and size, whatever the plan says now.
  EXPECT_EQ(trials.of({Kind::all_to_all, 1 << 20}, c.rival, c.algorithm, {2, 1}), t);
}

// A rival that warms up for more than one call (the all-reduce's): its uncounted calls come
// first, and only its last kCounted are kept.
TEST(Trials, ARivalsLongerWarmUpIsNotCounted) {
  const auto in = crowded_shm(4, 2);
  const Selector::Choice c = Selector(in).choose(Kind::all_to_all, 1 << 20, false, false);
  Trials trials;
  Trials::Trial* t = trials.of({Kind::all_to_all, 1 << 20}, c.algorithm, c.rival, {2, 3});
  const int choice_calls = 2 + Trials::kCounted, rival_from = choice_calls + 3;
  ASSERT_EQ(t->calls(), rival_from + Trials::kCounted);
  for (int call = 0; call < t->calls(); ++call) {
    EXPECT_EQ(t->next(), call < choice_calls ? c.algorithm : c.rival) << call;
    const bool warm = call < 2 || (call >= choice_calls && call < rival_from);
    EXPECT_EQ(t->record(warm ? 1000 : call), call == t->calls() - 1) << call;
  }
  for (int k = 0; k < Trials::kCounted; ++k) {
    EXPECT_DOUBLE_EQ(t->times().choice_us[k], 2 + k);
    EXPECT_DOUBLE_EQ(t->times().rival_us[k], rival_from + k);
  }
}

// The warm-up: for an all-to-all, the choice's twice the connections' slots and the rival's
// kRivalWarm; for an all-reduce, each side's the calls that carry twice the slots' bytes, at
// least one; at most kMostWarm either way.
TEST(Trials, EachSidesWarmUpIsTheSlotsUpToAFew) {
  constexpr std::size_t kSlot = 512 << 10;
  const auto warm = [](Kind kind, std::size_t bytes, int slots) {
    const Trials::Trial::Warm w = Trials::warm_calls(kind, bytes, slots, kSlot);
    return std::make_pair(w.choice, w.rival);
  };
  using P = std::pair<int, int>;
  constexpr int most = Trials::kMostWarm, rival = Trials::kRivalWarm;
  EXPECT_EQ(warm(Kind::all_to_all, 1, 4), P(8, rival));
  EXPECT_EQ(warm(Kind::all_to_all, 64 << 20, 4), P(8, rival));
  EXPECT_EQ(warm(Kind::all_to_all, 1, 64), P(most, rival));
  EXPECT_EQ(warm(Kind::all_reduce, 8, 8), P(most, most));
  EXPECT_EQ(warm(Kind::all_reduce, 1 << 20, 8), P(8, 8));
  EXPECT_EQ(warm(Kind::all_reduce, (1 << 20) + 1, 8), P(8, 8));
  EXPECT_EQ(warm(Kind::all_reduce, 8 << 20, 8), P(1, 1));
  EXPECT_EQ(warm(Kind::all_reduce, 64 << 20, 8), P(1, 1));
  EXPECT_EQ(warm(Kind::all_reduce, 0, 8), P(most, most));
  Trials trials;
  const auto in = crowded_shm(4, 2);
  const Selector::Choice c = Selector(in).choose(Kind::all_to_all, 1 << 20, false, false);
  EXPECT_EQ(trials.of({Kind::all_to_all, 1}, c.algorithm, c.rival, {8, 1})->calls(),
            8 + Trials::kCounted + 1 + Trials::kCounted);
  EXPECT_EQ(trials.of({Kind::all_to_all, 2}, c.algorithm, c.rival, {64, 64})->calls(),
            2 * (most + Trials::kCounted));
}

// The all-reduce across hosts, whose links the model does not measure: its two cheapest rows
// (hierarchical and the flat ring at 64 MiB over 2 x 2 ranks) are measured. Not within one
// host, nor for device buffers, nor where a rule names the algorithm, nor for the other kinds.
TEST(Trials, TheAllReduceAcrossHostsHasARival) {
  const auto two = hosts(2, 2);
  const Selector::Choice c = Selector(two).choose(Kind::all_reduce, 64 << 20, false, false);
  ASSERT_NE(c.rival, nullptr);
  const std::string_view names[] = {c.algorithm->name, c.rival->name};
  EXPECT_TRUE((names[0] == "hierarchical" && names[1] == "ring") ||
              (names[0] == "ring" && names[1] == "hierarchical"))
      << names[0] << " " << names[1];
  for (std::size_t bytes : {std::size_t{8}, std::size_t{1} << 20})
    EXPECT_NE(rival(two, Kind::all_reduce, bytes), "") << bytes;
  EXPECT_NE(rival(hosts(4, 2), Kind::all_reduce, 64 << 20), "");
  EXPECT_EQ(rival(one_host(4), Kind::all_reduce, 64 << 20), "");
  EXPECT_EQ(rival(two, Kind::all_reduce, 64 << 20, true), "");  // device buffers
  EXPECT_EQ(rival(two, Kind::all_gather, 64 << 20), "");
  EXPECT_EQ(rival(two, Kind::reduce_scatter, 64 << 20), "");
  auto forced = two;
  forced.overrides = "allreduce:ring";
  EXPECT_EQ(rival(forced, Kind::all_reduce, 64 << 20), "");
  // LOOM_TRIALS=0: the model's choice alone, here and for the crowded all-to-all.
  auto off = two;
  off.trials = false;
  EXPECT_EQ(rival(off, Kind::all_reduce, 64 << 20), "");
  auto crowded_off = crowded_shm(4, 2);
  crowded_off.trials = false;
  EXPECT_EQ(rival(crowded_off, Kind::all_to_all, 1 << 20), "");
}

TEST(Trials, ACommunicatorTriesAtMostSoManySizes) {
  const auto in = crowded_shm(4, 2);
  const Selector::Choice c = Selector(in).choose(Kind::all_to_all, 1 << 20, false, false);
  Trials trials;
  for (std::size_t k = 0; k < Trials::kMostTrials; ++k)
    EXPECT_NE(trials.of({Kind::all_to_all, 4096 + k}, c.algorithm, c.rival, {8, 1}), nullptr) << k;
  EXPECT_EQ(trials.of({Kind::all_to_all, 1 << 30}, c.algorithm, c.rival, {8, 1}), nullptr);
  // The sizes already tried keep their trials.
  EXPECT_NE(trials.of({Kind::all_to_all, 4096}, c.algorithm, c.rival, {8, 1}), nullptr);
}

// A reduction's trial is its dtype's and op's: a program alternating two at one size times each
// side on its own calls. An all-to-all moves bytes alone: one trial whatever its dtype.
TEST(Trials, AReductionsTrialIsItsDtypesAndOpsAndOtherKindsAreTheirSizes) {
  const auto in = crowded_shm(4, 2);
  const Selector::Choice c = Selector(in).choose(Kind::all_to_all, 1 << 20, false, false);
  Trials trials;
  const std::size_t b = 1 << 20;
  Trials::Trial* f32_sum =
      trials.of({Kind::all_reduce, b, DataType::f32, ReduceOp::sum}, c.algorithm, c.rival, {});
  ASSERT_NE(f32_sum, nullptr);
  Trials::Trial* bf16_sum =
      trials.of({Kind::all_reduce, b, DataType::bf16, ReduceOp::sum}, c.algorithm, c.rival, {});
  Trials::Trial* f32_max =
      trials.of({Kind::all_reduce, b, DataType::f32, ReduceOp::max}, c.algorithm, c.rival, {});
  EXPECT_NE(bf16_sum, f32_sum);
  EXPECT_NE(f32_max, f32_sum);
  EXPECT_NE(f32_max, bf16_sum);
  EXPECT_EQ(
      trials.of({Kind::all_reduce, b, DataType::f32, ReduceOp::sum}, c.rival, c.algorithm, {}),
      f32_sum);
  EXPECT_NE(
      trials.of({Kind::reduce_scatter, b, DataType::f32, ReduceOp::sum}, c.algorithm, c.rival, {}),
      f32_sum);
  Trials::Trial* bytes =
      trials.of({Kind::all_to_all, b, DataType::f32, ReduceOp::sum}, c.algorithm, c.rival, {});
  EXPECT_EQ(
      trials.of({Kind::all_to_all, b, DataType::i64, ReduceOp::max}, c.algorithm, c.rival, {}),
      bytes);
  EXPECT_EQ(trials.of({Kind::all_to_all, b}, c.algorithm, c.rival, {}), bytes);
}

}  // namespace
}  // namespace loom::algorithms
