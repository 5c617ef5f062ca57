// The model's choice measured against its rival on the first calls of a size, where the model
// cannot price the two apart (Selector::Choice::rival): the first calls run the choice, a few
// after them the rival, every rank times each call, and at the trial's last call the ranks swap
// their times. A call's time is its slowest rank's; the faster of the two (medians) then runs
// every later call of that size. Every rank judges the same figures, so every rank keeps the same
// one. LOOM_ALGO, or a tuning table's rule, names an algorithm instead of a trial.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "algorithms/collective.hpp"

namespace loom::algorithms {

struct Algorithm;
class Engine;

class Trials {
 public:
  // The choice's calls: Warm::choice not counted, then kCounted that are; then the rival's:
  // Warm::rival not counted, then kCounted. A schedule's first calls at a new size run slow:
  // pairwise's, 4 ranks on 2 cores with 8 slots, before slots took only the pages their messages
  // reach, 9-10 calls at 17-30x its later time at a job's first size (16 and 4-5 with 16 and 4
  // slots), 3-4 at 2-15x at the next sizes, one or none from 512 KiB blocks. Much of it is the
  // slots' pages, taken as messages first reach them (reserved and mapped: bench/first_calls shows
  // each call's page faults). Since a slot takes only the pages its messages reach, not the whole
  // slot, the first 8 calls at 64 KiB blocks take 2.2x less time than before, and the 2nd-8th still
  // run 2.3x (1.1-4.8x) the later calls. So the choice warms up for twice the slots, at most
  // kMostWarm: it would have run those calls anyway (warm_calls). An all-reduce's calls each stream
  // the whole buffer through the slots, so its choice warms up until its calls have carried twice
  // the slots' bytes, at least one call: one at 8 MiB and up with the default 8 slots of 512 KiB.
  // The all-to-all's rival's calls are the trial's cost where it loses, so it warms up for
  // kRivalWarm (the single copy's first read of a peer; its second and third still ran 1.5-2.2x at
  // 512 KiB blocks); a rival that needs more is measured slower than it is, and the model's choice
  // stays. An all-reduce's rival warms up as its choice does: across hosts it often runs over
  // connections the choice never used (the flat ring's against hierarchical's), opened and first
  // filled in its first call. The swap's messages travel after the call's own on each connection,
  // in order: it relies on both schedules taking every message they send within the call.
  static constexpr int kCounted = 3;
  static constexpr int kMostWarm = 16;
  static constexpr int kRivalWarm = 1;
  // The calls a communicator tries (a kind and size, with a reduction's dtype and op); beyond
  // them the model's choice stands, so that a program calling with ever new sizes stops paying
  // for trials. Every rank makes the same calls in the same order, so every rank stops at the
  // same one.
  static constexpr std::size_t kMostTrials = 32;

  // What a trial is of. A reduction's dtype and op are part of it: its reduction's cost differs
  // between them, and a program alternating two of them at one size would otherwise time the
  // choice on one and the rival on the other. The other kinds move bytes alone: their dtype and
  // op are not (Trials::of sets them to u8 and sum).
  struct Key {
    Kind kind = Kind::all_reduce;
    std::size_t bytes = 0;
    DataType dtype = DataType::u8;
    ReduceOp op = ReduceOp::sum;
    auto operator<=>(const Key&) const = default;
  };

  // One rank's time of each counted call, in microseconds: the choice's, then the rival's.
  struct Times {
    double choice_us[kCounted] = {};
    double rival_us[kCounted] = {};
  };
  struct Judgement {
    bool rival_wins = false;
    double choice_us = 0;  // the median of the choice's counted calls, each the slowest rank's
    double rival_us = 0;
  };
  // The rival must be faster to win: a tie keeps the model's choice.
  static Judgement judge(const std::vector<Times>& ranks);
  // Trials judged in this process, and the calls trials ran to completion (tests check the path).
  static std::uint64_t judged();
  static std::uint64_t calls_tried();

  // The trial of one Key.
  class Trial {
   public:
    // The calls each side warms up for, not counted.
    struct Warm {
      int choice = 0;
      int rival = kRivalWarm;
    };
    Trial(const Algorithm* choice, const Algorithm* rival, Warm warm)
        : choice_(choice), rival_(rival), warm_(warm) {}
    // The winner once judged, else null.
    const Algorithm* winner() const { return winner_; }
    // The algorithm the next call runs.
    const Algorithm* next() const { return calls_ < choice_calls() ? choice_ : rival_; }
    // This rank's time of the call next() named; true when that was the trial's last call.
    bool record(double us);
    const Times& times() const { return times_; }
    // Judges every rank's times (this rank's among them) and keeps the winner.
    Judgement decide(const std::vector<Times>& ranks);
    const Algorithm* choice() const { return choice_; }
    const Algorithm* rival() const { return rival_; }
    int calls() const { return choice_calls() + warm_.rival + kCounted; }

   private:
    int choice_calls() const { return warm_.choice + kCounted; }

    const Algorithm* choice_;
    const Algorithm* rival_;
    Warm warm_;
    int calls_ = 0;
    Times times_;
    const Algorithm* winner_ = nullptr;
  };

  // The calls each side warms up for at `bytes`, with `slots` slots of `slot_bytes` on each
  // connection. The choice: twice the slots for an all-to-all; for every other kind, the calls
  // that carry twice the slots' bytes, at least one; at most kMostWarm. The rival: kRivalWarm for
  // an all-to-all, else as the choice.
  static Trial::Warm warm_calls(Kind kind, std::size_t bytes, int slots, std::size_t slot_bytes);

  // The trial of `key`, started with `choice` against `rival`, each warmed up as `warm` says (at
  // most kMostWarm), if there is none yet; null once kMostTrials keys have been tried.
  Trial* of(Key key, const Algorithm* choice, const Algorithm* rival, Trial::Warm warm);

  // Within the trial's last call, on every rank: every rank's times, indexed by rank. They go
  // around the ring (n - 1 steps, one small message each way on the two ring connections), so
  // judging opens at most the ring's two connections, however many hosts the ranks span.
  static std::vector<Times> swap(Engine& engine, const Times& mine);

 private:
  std::map<Key, Trial> trials_;
};

}  // namespace loom::algorithms
