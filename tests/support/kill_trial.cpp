#include "kill_trial.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "algorithms/trials.hpp"
#include "ranks.hpp"

namespace loom::testing {

namespace {

Options shm_options(const std::string& algorithm) {
  Options o;
  o.timeout = std::chrono::seconds(60);  // far beyond what a survivor may take
  o.transport = std::string("shm");
  o.algorithm = algorithm;
  return o;
}

// Rank 2 runs `call` until it is SIGKILLed 30 ms in; the others must raise PeerError naming it.
void kill_trial(const std::string& algorithm, const std::function<void(Communicator&)>& setup,
                const std::function<void(Communicator&)>& call) {
  constexpr int kDyingRank = 2;
  const Options options = shm_options(algorithm);
  RunOptions opts;
  opts.may_die = {kDyingRank};
  run_ranks_raw(
      4,
      [&](RankContext& ctx) {
        Communicator comm(ctx.store, ctx.rank, ctx.size, options);
        setup(comm);
        call(comm);
        if (ctx.rank == kDyingRank) {
          std::thread([&ctx] {
            std::this_thread::sleep_for(std::chrono::milliseconds(30));
            die_by_sigkill(ctx);
          }).detach();
          for (;;) call(comm);
        }
        const auto start = std::chrono::steady_clock::now();
        try {
          for (int i = 0; i < 100000; ++i) call(comm);
          ADD_FAILURE() << "rank " << ctx.rank << " never noticed rank " << kDyingRank << " die";
        } catch (const PeerError& e) {
          EXPECT_EQ(e.peer(), kDyingRank) << e.what();
        }
        // The victim dies 30 ms in; the timeout is a minute.
        EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15));
      },
      opts);
}

// A call that returned passed off no wrong result: every element of `out` is `want`.
void expect_every(const std::vector<float>& out, float want) {
  const auto wrong = std::count_if(out.begin(), out.end(), [want](float v) { return v != want; });
  EXPECT_EQ(wrong, 0) << "elements other than " << want << " after a call that returned";
}

}  // namespace

void all_to_all_kill_trial(const std::string& algorithm, bool shared) {
  const std::size_t count = 1 << 18;  // 1 MiB blocks of f32
  std::vector<float> plain, out;
  float* in = nullptr;
  kill_trial(
      algorithm,
      [&](Communicator& comm) {
        plain.assign(shared ? 0 : 4 * count, 1.0f);
        out.assign(4 * count, 0.0f);
        in = shared ? static_cast<float*>(comm.alloc(4 * count * sizeof(float))) : plain.data();
        std::fill(in, in + 4 * count, 1.0f);
      },
      [&](Communicator& comm) {
        std::fill(out.begin(), out.end(), 0.0f);
        comm.all_to_all(in, out.data(), count, DataType::f32);
        expect_every(out, 1.0f);
      });
}

void all_reduce_kill_trial(const std::string& algorithm) {
  const std::size_t count = 1 << 20;  // 4 MiB of f32
  std::vector<float> in, out;
  kill_trial(
      algorithm, [&](Communicator&) { in.assign(count, 1.0f), out.assign(count, 0.0f); },
      [&](Communicator& comm) {
        std::fill(out.begin(), out.end(), 0.0f);
        comm.all_reduce(in.data(), out.data(), count, DataType::f32, ReduceOp::sum);
        expect_every(out, static_cast<float>(comm.size()));
      });
}

void all_reduce_across_hosts_kill_trial(RunOptions opts, int dying_call) {
  constexpr int kDyingRank = 2;
  constexpr std::size_t kCount = std::size_t{1} << 20;  // 4 MiB of i32
  opts.may_die = {kDyingRank};
  const Options& options = opts.options;
  run_ranks_raw(
      4,
      [&](RankContext& ctx) {
        Communicator comm(ctx.store, ctx.rank, ctx.size, options);
        std::vector<std::int32_t> buf(kCount);
        auto value = [](std::size_t i, int n) {
          return static_cast<std::int32_t>((i + static_cast<std::size_t>(n)) % 7 + 1);
        };
        auto call = [&](int n) {
          for (std::size_t i = 0; i < kCount; ++i) buf[i] = (ctx.rank + 1) * value(i, n);
          // As its call would start, in this thread: a killer thread could be scheduled after
          // the call's end on 2 busy cores, even after the trial's last call sent its times.
          // The survivors' call `dying_call` is the one that fails (the rival's first: while it
          // opens connections the choice never used; the last: before any times arrive).
          if (ctx.rank == kDyingRank && n == dying_call) die_by_sigkill(ctx);
          comm.all_reduce(buf.data(), buf.data(), kCount, DataType::i32, ReduceOp::sum);
          for (std::size_t i = 0; i < kCount; ++i)
            if (buf[i] != 10 * value(i, n)) {
              ADD_FAILURE() << "call " << n << ": element " << i << " is " << buf[i];
              break;
            }
        };
        const std::uint64_t judged = algorithms::Trials::judged();
        const std::uint64_t tried = algorithms::Trials::calls_tried();
        int n = 0;
        if (ctx.rank == kDyingRank)
          for (;; ++n) call(n);
        const auto start = std::chrono::steady_clock::now();
        try {
          for (; n < 1000; ++n) call(n);
          ADD_FAILURE() << "rank " << ctx.rank << " never noticed rank " << kDyingRank << " die";
        } catch (const PeerError& e) {
          EXPECT_EQ(e.peer(), kDyingRank) << e.what();
        }
        EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15));
        EXPECT_EQ(algorithms::Trials::judged(), judged)
            << "a trial was judged: the death fell after it, not within it (call " << n << ")";
        // Every call that returned was one of the trial's: it was under way at the death. (The
        // call that failed may have been counted: a call's time is recorded before its last
        // wait for the peers, the trial's round of times or the flush.)
        const std::uint64_t counted = algorithms::Trials::calls_tried() - tried;
        EXPECT_GE(counted, static_cast<std::uint64_t>(n));
        EXPECT_LE(counted, static_cast<std::uint64_t>(n) + 1);
        // The victim's same-host peer may still be reading its previous call's data from the
        // slots when it dies, and so fail in that call.
        EXPECT_GE(n, dying_call - 1) << "the survivor failed before the victim died";
        EXPECT_LE(n, dying_call + 1) << "the survivor ran on past the victim's death";
      },
      opts);
}

}  // namespace loom::testing
