// Algorithm choices for one all-reduce size, compared call by call in one launch: each choice is a
// communicator split off with its own LOOM_ALGO rule ("model": none), and the calls alternate
// between them (each round starting at the next choice), so a slow spell of the host lands on
// every choice alike. Each rank times each of
// its calls; a call's time is its slowest rank's, and each choice's figure the median over its
// calls (as loom-perf's --per-op). Over shared memory every choice adds its own slots to the
// caches' load: compare in separate launches there.
//
//   loomrun --nproc-per-node 2 alternate_algos BYTES CALLS model ring@124K ...
// prints "alternate,<ranks>,<bytes>,<choice>,<median us>,<busbw GB/s>" per choice.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <loom/loom.hpp>

namespace {

struct Choice {
  std::string rule;
  std::optional<loom::Communicator> comm;
  std::vector<double> us;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: alternate_algos BYTES CALLS CHOICE... (model | alg[@slice])\n");
    return 2;
  }
  const std::size_t bytes = std::strtoull(argv[1], nullptr, 10);
  const int calls = std::atoi(argv[2]);
  constexpr int kWarmup = 5;
  if (bytes < sizeof(float) || calls < 1) {
    std::fprintf(stderr, "alternate_algos: BYTES must be at least 4 and CALLS at least 1\n");
    return 2;
  }
  loom::Communicator world = loom::init();
  std::vector<Choice> choices;
  for (int i = 3; i < argc; ++i) {
    Choice c{argv[i], std::nullopt, {}};
    loom::Options options;
    if (c.rule != "model") options.algorithm = "allreduce:" + c.rule;
    c.comm = world.split(0, world.rank(), options);
    choices.push_back(std::move(c));
  }
  const std::size_t count = bytes / sizeof(float);
  std::vector<float> in(count, 1.0f), out(count, 0.0f);
  // Each round starts at the next choice, so that none always follows the same one.
  for (int call = 0; call < kWarmup + calls; ++call)
    for (std::size_t k = 0; k < choices.size(); ++k) {
      Choice& c = choices[(static_cast<std::size_t>(call) + k) % choices.size()];
      const auto start = std::chrono::steady_clock::now();
      c.comm->all_reduce(in.data(), out.data(), count, loom::DataType::f32, loom::ReduceOp::sum);
      const std::chrono::duration<double, std::micro> took =
          std::chrono::steady_clock::now() - start;
      if (call >= kWarmup) c.us.push_back(took.count());
    }
  const int n = world.size();
  for (Choice& c : choices) {
    world.all_reduce(c.us.data(), c.us.size(), loom::DataType::f64, loom::ReduceOp::max);
    std::nth_element(c.us.begin(), c.us.begin() + c.us.size() / 2, c.us.end());
    const double median = c.us[c.us.size() / 2];
    const double busbw =
        static_cast<double>(count * sizeof(float)) * 2.0 * (n - 1) / n / median / 1e3;
    if (world.rank() == 0)
      std::printf("alternate,%d,%zu,%s,%.1f,%.3f\n", n, bytes, c.rule.c_str(), median, busbw);
  }
  return 0;
}
