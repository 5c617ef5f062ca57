// The fuzz targets in any build (ctest label `fuzz`): runs LLVMFuzzerTestOneInput on every seed
// file in the folders given, then on inputs mutated from them (bits flipped, bytes changed,
// inserted, dropped, the input cut or doubled) for --seconds, from a seed it prints so that a
// failure can be run again (--seed). A target that crashes, traps or lets an exception out fails
// the test. With clang and LOOM_FUZZ=ON the same targets run under libFuzzer instead
// (tools/fuzz.sh, in CI).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

using Input = std::vector<std::uint8_t>;

// The input being run, for the report of a crash (written from the signal handler).
const Input* current = nullptr;

void report_and_die(int sig) {
  static const char digits[] = "0123456789abcdef";
  const char head[] = "fuzz replay: the failing input, in hex: ";
  (void)!::write(2, head, sizeof head - 1);
  if (current != nullptr)
    for (std::uint8_t b : *current) {
      const char hex[2] = {digits[b >> 4], digits[b & 15]};
      (void)!::write(2, hex, 2);
    }
  (void)!::write(2, "\n", 1);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void run(const Input& in) {
  current = &in;
  LLVMFuzzerTestOneInput(in.data(), in.size());
}

Input mutate(Input in, std::mt19937_64& rng) {
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits; ++e) {
    const std::size_t at = in.empty() ? 0 : rng() % in.size();
    switch (rng() % 7) {
      case 0:
        if (!in.empty()) in[at] ^= static_cast<std::uint8_t>(1u << (rng() % 8));
        break;
      case 1:
        if (!in.empty()) in[at] = static_cast<std::uint8_t>(rng());
        break;
      case 2:
        in.insert(in.begin() + static_cast<std::ptrdiff_t>(at), static_cast<std::uint8_t>(rng()));
        break;
      case 3:
        if (!in.empty()) in.erase(in.begin() + static_cast<std::ptrdiff_t>(at));
        break;
      case 4:
        in.resize(in.empty() ? 0 : rng() % (in.size() + 1));
        break;
      case 5:  // an interesting value: 0, 0xff.., a small or huge count
        if (in.size() >= 8) {
          const std::uint64_t values[] = {0, ~0ull, 1, 0x7fffffffffffffffull, 0x100000000ull};
          const std::uint64_t v = values[rng() % 5];
          const std::size_t where = rng() % (in.size() - 7);
          for (int b = 0; b < 8; ++b) in[where + b] = static_cast<std::uint8_t>(v >> (8 * b));
        }
        break;
      default:
        in.insert(in.end(), in.begin(), in.end());
        if (in.size() > 1 << 16) in.resize(1 << 16);
    }
  }
  return in;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 5;
  std::uint64_t seed = std::random_device{}();
  std::vector<Input> seeds;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (arg == "--seed" && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else {
      for (const auto& entry : std::filesystem::directory_iterator(arg)) {
        std::ifstream file(entry.path(), std::ios::binary);
        seeds.emplace_back(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
      }
    }
  }
  std::printf("fuzz replay: %zu seed(s), %.0f s, --seed %llu\n", seeds.size(), seconds,
              static_cast<unsigned long long>(seed));
  std::fflush(stdout);
  for (int sig : {SIGILL, SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGTRAP}) ::signal(sig, report_and_die);
  seeds.emplace_back();  // the empty input
  for (const Input& in : seeds) run(in);
  std::mt19937_64 rng(seed);
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  std::uint64_t runs = 0;
  while (std::chrono::steady_clock::now() < end) {
    for (int k = 0; k < 64; ++k, ++runs) {
      const Input in = mutate(seeds[rng() % seeds.size()], rng);
      run(in);
    }
  }
  std::printf("fuzz replay: %llu inputs, no failure\n", static_cast<unsigned long long>(runs));
  return 0;
}
