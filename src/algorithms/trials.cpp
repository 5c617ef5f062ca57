#include "algorithms/trials.hpp"

#include <algorithm>
#include <array>
#include <atomic>

#include "algorithms/engine.hpp"
#include "algorithms/primitives.hpp"

namespace loom::algorithms {

namespace {

std::atomic<std::uint64_t> judged_trials{0};
std::atomic<std::uint64_t> tried_calls{0};

// The median of one side's counted calls, each call the slowest rank's.
double median_of(const std::vector<Trials::Times>& ranks, bool rival) {
  std::array<double, Trials::kCounted> side{};
  for (int call = 0; call < Trials::kCounted; ++call)
    for (const Trials::Times& t : ranks)
      side[call] = std::max(side[call], rival ? t.rival_us[call] : t.choice_us[call]);
  std::sort(side.begin(), side.end());
  constexpr int n = Trials::kCounted;
  return n % 2 == 1 ? side[n / 2] : (side[n / 2 - 1] + side[n / 2]) / 2;
}

}  // namespace

Trials::Judgement Trials::judge(const std::vector<Times>& ranks) {
  Judgement j;
  j.choice_us = median_of(ranks, false);
  j.rival_us = median_of(ranks, true);
  j.rival_wins = j.rival_us < j.choice_us;
  return j;
}

std::uint64_t Trials::judged() {
  return judged_trials.load(std::memory_order_relaxed);
}

std::uint64_t Trials::calls_tried() {
  return tried_calls.load(std::memory_order_relaxed);
}

bool Trials::Trial::record(double us) {
  if (winner_ != nullptr || calls_ >= calls()) return false;
  tried_calls.fetch_add(1, std::memory_order_relaxed);
  const bool rival = calls_ >= choice_calls();
  const int counted = rival ? calls_ - choice_calls() - warm_.rival : calls_ - warm_.choice;
  if (counted >= 0) (rival ? times_.rival_us : times_.choice_us)[counted] = us;
  return ++calls_ == calls();
}

Trials::Judgement Trials::Trial::decide(const std::vector<Times>& ranks) {
  const Judgement j = judge(ranks);
  winner_ = j.rival_wins ? rival_ : choice_;
  judged_trials.fetch_add(1, std::memory_order_relaxed);
  return j;
}

Trials::Trial::Warm Trials::warm_calls(Kind kind, std::size_t bytes, int slots,
                                       std::size_t slot_bytes) {
  if (kind == Kind::all_to_all) return {std::clamp(2 * slots, 0, kMostWarm), kRivalWarm};
  const std::size_t slots_bytes = 2 * static_cast<std::size_t>(std::max(slots, 0)) * slot_bytes;
  const std::size_t per_call = std::max<std::size_t>(bytes, 1);
  const int calls = static_cast<int>(
      std::clamp<std::size_t>((slots_bytes + per_call - 1) / per_call, 1, kMostWarm));
  return {calls, calls};
}

Trials::Trial* Trials::of(Key key, const Algorithm* choice, const Algorithm* rival,
                          Trial::Warm warm) {
  if (!reduces(key.kind)) {
    key.dtype = DataType::u8;
    key.op = ReduceOp::sum;
  }
  if (auto it = trials_.find(key); it != trials_.end()) return &it->second;
  if (trials_.size() >= kMostTrials) return nullptr;
  warm.choice = std::clamp(warm.choice, 0, kMostWarm);
  warm.rival = std::clamp(warm.rival, 0, kMostWarm);
  return &trials_.emplace(key, Trial(choice, rival, warm)).first->second;
}

// Step k sends the times received at step k - 1 (this rank's own at the first) to the next rank
// and receives the times of rank - k from the previous one. A send waits at most for the room of
// one message on the connection, which the next rank frees by receiving the step before's.
std::vector<Trials::Times> Trials::swap(Engine& engine, const Times& mine) {
  const int n = engine.size(), r = engine.rank();
  std::vector<Times> all(static_cast<std::size_t>(n));
  all[static_cast<std::size_t>(r)] = mine;
  if (n < 2) return all;
  const RingPosition ring = engine.ring();
  for (int k = 1; k < n; ++k) {
    const Times& out = all[static_cast<std::size_t>(engine.ring_prev(k - 1))];
    Primitives(engine, nullptr, ring.next).send_message(&out, sizeof out);
    Primitives(engine, ring.prev, nullptr)
        .recv_message(&all[static_cast<std::size_t>(engine.ring_prev(k))], sizeof(Times));
  }
  return all;
}

}  // namespace loom::algorithms
