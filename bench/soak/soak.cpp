// loom-soak: one worker of the soak (bench/soak.sh). Runs collectives and point-to-point calls
// of random kinds, sizes and types, the same sequence on every rank (drawn from the step
// number), and checks every result exactly against what the ranks' patterns must give. A
// failure (a rank killed or frozen by the soak) is printed with what it names; then, under
// loomrun --on-failure shrink, the survivors shrink and go on from a step they agree on, and
// otherwise the worker exits 1 for loomrun --max-restarts to start the job again.
//   loomrun --nproc-per-node 4 --on-failure shrink loom-soak --seconds 60
// Lines it prints: "soak: rank R step S ops N wrong W" every 200 steps, "soak: rank R failure:
// ..." per failure, and at the end "soak: rank R done steps S ops N wrong W failures F shrinks K".
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "loom/loom.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using loom::Communicator;
using loom::DataType;
using loom::ReduceOp;

struct Counters {
  std::uint64_t ops = 0, wrong = 0, failures = 0, shrinks = 0;
};

// Element i of rank r's input at step s: small integers, so that every sum is exact in f32 too.
std::int64_t pattern(int r, std::uint64_t s, std::size_t i) {
  return static_cast<std::int64_t>((static_cast<std::uint64_t>(r) * 31 + s * 7 + i * 13) % 1000);
}

template <typename T>
std::vector<T> filled(std::size_t n, int r, std::uint64_t s, std::size_t offset = 0) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<T>(pattern(r, s, offset + i));
  return v;
}

// One step: the kind, size and type come from the step alone (every rank draws alike).
template <typename T>
std::uint64_t run_step(Communicator& comm, std::uint64_t step, int kind, std::size_t n,
                       DataType dt) {
  const int r = comm.rank(), p = comm.size();
  std::uint64_t wrong = 0;
  switch (kind) {
    case 0: {  // all_reduce sum
      auto v = filled<T>(n, r, step);
      comm.all_reduce(v.data(), n, dt, ReduceOp::sum);
      for (std::size_t i = 0; i < n; ++i) {
        std::int64_t want = 0;
        for (int q = 0; q < p; ++q) want += pattern(q, step, i);
        wrong += static_cast<std::int64_t>(v[i]) != want;
      }
      break;
    }
    case 1: {  // all_gather
      auto in = filled<T>(n, r, step);
      std::vector<T> out(n * static_cast<std::size_t>(p));
      comm.all_gather(in.data(), out.data(), n, dt);
      for (int q = 0; q < p; ++q)
        for (std::size_t i = 0; i < n; ++i)
          wrong += static_cast<std::int64_t>(out[static_cast<std::size_t>(q) * n + i]) !=
                   pattern(q, step, i);
      break;
    }
    case 2: {  // broadcast from a root the step picks
      const int root = static_cast<int>(step % static_cast<std::uint64_t>(p));
      auto v = r == root ? filled<T>(n, root, step) : std::vector<T>(n);
      comm.broadcast(v.data(), n, dt, root);
      for (std::size_t i = 0; i < n; ++i)
        wrong += static_cast<std::int64_t>(v[i]) != pattern(root, step, i);
      break;
    }
    case 3: {  // reduce_scatter sum
      auto in = filled<T>(n * static_cast<std::size_t>(p), r, step);
      std::vector<T> out(n);
      comm.reduce_scatter(in.data(), out.data(), n, dt, ReduceOp::sum);
      for (std::size_t i = 0; i < n; ++i) {
        std::int64_t want = 0;
        for (int q = 0; q < p; ++q) want += pattern(q, step, static_cast<std::size_t>(r) * n + i);
        wrong += static_cast<std::int64_t>(out[i]) != want;
      }
      break;
    }
    default: {  // a ring of sends and receives, posted side by side
      auto out = filled<T>(n, r, step);
      std::vector<T> in(n);
      loom::Work recv = comm.recv_async(in.data(), n, dt, (r + p - 1) % p);
      loom::Work send = comm.send_async(out.data(), n, dt, (r + 1) % p);
      send.wait(), recv.wait();
      for (std::size_t i = 0; i < n; ++i)
        wrong += static_cast<std::int64_t>(in[i]) != pattern((r + p - 1) % p, step, i);
    }
  }
  return wrong;
}

std::uint64_t step_once(Communicator& comm, std::uint64_t seed, std::uint64_t step) {
  std::mt19937_64 rng(seed * 1000003 + step);
  const int kind = static_cast<int>(rng() % 5);
  // Sizes from 1 element to 256 Ki, most of them small.
  const std::size_t n = std::size_t{1} << (rng() % 19);
  const std::size_t count = std::max<std::size_t>(1, n - rng() % n / 2);
  if (kind == 4 && comm.size() < 2) return 0;
  switch (rng() % 4) {
    case 0:
      return run_step<std::int32_t>(comm, step, kind, count, DataType::i32);
    case 1:
      return run_step<std::int64_t>(comm, step, kind, count, DataType::i64);
    case 2:
      return run_step<float>(comm, step, kind, count, DataType::f32);
    default:
      return run_step<double>(comm, step, kind, count, DataType::f64);
  }
}

// The survivors shrink, then go on from the furthest step any of them reached. A rank lost while
// they do (after the shrink stood) makes them shrink again from the newest communicator, up to
// once per rank there was, as loom-train does: a worker that gave up instead left a frozen rank,
// which no survivor then named, running under loomrun for ever. False when this rank cannot go
// on.
bool shrink_and_agree(std::optional<Communicator>& comm, std::uint64_t& step, Counters& c,
                      int first_rank) {
  const int before = comm->size();
  for (int tries = 1;; ++tries) {
    bool shrunk = false;
    try {
      comm.emplace(comm->shrink(std::chrono::seconds(20)));
      shrunk = true;
      ++c.shrinks;
      comm->all_reduce(&step, 1, DataType::u64, ReduceOp::max);
      return true;
    } catch (const loom::Error& again) {
      ++c.failures;
      std::printf("soak: rank %d failure: %s (while shrinking)\n", first_rank, again.what());
      std::fflush(stdout);
      const bool lost_meanwhile =
          again.kind() == loom::ErrorKind::peer || again.kind() == loom::ErrorKind::timeout;
      if (!shrunk || !lost_meanwhile || tries >= before) return false;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 60;
  std::uint64_t seed = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--seconds") == 0) seconds = std::atof(argv[i + 1]);
    if (std::strcmp(argv[i], "--seed") == 0) seed = std::strtoull(argv[i + 1], nullptr, 10);
  }
  const char* mode = std::getenv("LOOM_ON_FAILURE");
  const bool shrink = mode != nullptr && std::string(mode) == "shrink";
  Counters c;
  std::optional<Communicator> comm;
  try {
    comm.emplace(loom::init());
  } catch (const loom::Error& e) {
    std::printf("soak: failure: %s\n", e.what());
    return 1;
  }
  const int first_rank = comm->rank();
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  std::uint64_t step = 0;
  for (;;) {
    try {
      // Every rank stops at the same step: every 50, they agree whether any one's time is up.
      if (step % 50 == 0) {
        std::uint8_t up = Clock::now() >= end ? 1 : 0;
        comm->all_reduce(&up, 1, DataType::u8, ReduceOp::max);
        if (up) break;
      }
      c.wrong += step_once(*comm, seed, step);
      ++c.ops, ++step;
      if (step % 200 == 0) {
        std::printf("soak: rank %d step %llu ops %llu wrong %llu\n", first_rank,
                    static_cast<unsigned long long>(step), static_cast<unsigned long long>(c.ops),
                    static_cast<unsigned long long>(c.wrong));
        std::fflush(stdout);
      }
    } catch (const loom::Error& e) {
      ++c.failures;
      std::printf("soak: rank %d failure: %s\n", first_rank, e.what());
      std::fflush(stdout);
      if (!shrink || !shrink_and_agree(comm, step, c, first_rank)) return 1;
    }
  }
  std::printf("soak: rank %d done steps %llu ops %llu wrong %llu failures %llu shrinks %llu\n",
              first_rank, static_cast<unsigned long long>(step),
              static_cast<unsigned long long>(c.ops), static_cast<unsigned long long>(c.wrong),
              static_cast<unsigned long long>(c.failures),
              static_cast<unsigned long long>(c.shrinks));
  return c.wrong == 0 ? 0 : 3;
}
