// Reduction kernels against the memory limit of this machine, single thread (Google Benchmark).
// Bytes counted per element: two reads and one write. bench/kernels/kernel_ratios.sh turns a
// run into the ratios the kernels are held to.
#include <benchmark/benchmark.h>

#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kernels/cpu/cpu_kernels.hpp"
#include "plain_add.hpp"

namespace loom {
namespace {

constexpr std::size_t kLarge = std::size_t{64} << 20;  // bytes per array
constexpr std::size_t kCached = std::size_t{256} << 10;

struct Arrays {
  std::vector<std::byte> a, b, c;
  explicit Arrays(std::size_t bytes) : a(bytes), b(bytes), c(bytes) {
    // Small finite values of every type: no NaN or inf on the timed path.
    for (std::size_t i = 0; i < bytes; ++i) a[i] = b[i] = static_cast<std::byte>((i * 7) % 61 + 1);
    std::memset(c.data(), 0, bytes);  // touch every page before timing
  }
};

void set_bytes(benchmark::State& state, std::size_t bytes) {
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * 3 * bytes));
  state.SetLabel(kernels::simd_target());
}

template <typename T>
void BM_PlainAdd(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  Arrays x(bytes);
  const std::size_t n = bytes / sizeof(T);
  for (auto _ : state) {
    bench::plain_add(reinterpret_cast<T*>(x.c.data()), reinterpret_cast<const T*>(x.a.data()),
                     reinterpret_cast<const T*>(x.b.data()), n);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * 3 * bytes));
}

// state.range(0): bytes per array. nt: allow non-temporal stores (the default) or not.
void BM_Reduce(benchmark::State& state, DataType t, bool nt) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  kernels::set_stream_threshold(nt ? kernels::kDefaultStreamBytes : SIZE_MAX);
  Arrays x(bytes);
  const std::size_t n = bytes / size_of(t);
  for (auto _ : state) {
    kernels::reduce(x.c.data(), x.a.data(), x.b.data(), n, t, ReduceOp::sum);
    benchmark::ClobberMemory();
  }
  kernels::set_stream_threshold(kernels::kDefaultStreamBytes);
  set_bytes(state, bytes);
}

void BM_Reference(benchmark::State& state, DataType t) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  Arrays x(bytes);
  const std::size_t n = bytes / size_of(t);
  for (auto _ : state) {
    kernels::reference::reduce(x.c.data(), x.a.data(), x.b.data(), n, t, ReduceOp::sum);
    benchmark::ClobberMemory();
  }
  set_bytes(state, bytes);
}

// A slice copied out of a page-aligned slot into a buffer `distance` bytes into its page (a large
// malloc'd buffer starts 16 bytes in): memcpy against kernels::copy. state.range(0): bytes,
// state.range(1): the distance.
void BM_Copy(benchmark::State& state, bool loom) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const auto distance = static_cast<std::size_t>(state.range(1));
  std::vector<std::byte> src(bytes + 8192), dst(bytes + 8192, std::byte{1});
  const auto page = [](std::byte* p) {
    return p + (4096 - reinterpret_cast<std::uintptr_t>(p) % 4096) % 4096;
  };
  std::byte* from = page(src.data());
  std::byte* to = page(dst.data()) + distance;
  std::memset(from, 3, bytes);
  for (auto _ : state) {
    if (loom)
      kernels::copy(to, from, bytes);
    else
      std::memcpy(to, from, bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * 2 * bytes));
}

void register_all() {
  auto bytes_arg = [](benchmark::internal::Benchmark* b, std::size_t bytes) {
    b->Arg(static_cast<std::int64_t>(bytes))->UseRealTime();
  };
  bytes_arg(benchmark::RegisterBenchmark("limit/f32", BM_PlainAdd<float>), kLarge);
  bytes_arg(benchmark::RegisterBenchmark("limit/f32", BM_PlainAdd<float>), kCached);
  bytes_arg(benchmark::RegisterBenchmark("limit/f64", BM_PlainAdd<double>), kLarge);
  bytes_arg(benchmark::RegisterBenchmark("limit/i32", BM_PlainAdd<std::int32_t>), kLarge);
  for (DataType t :
       {DataType::f32, DataType::f64, DataType::i32, DataType::f16, DataType::bf16, DataType::i8})
    for (bool nt : {true, false}) {
      const std::string name = fmt::format("loom/{}{}", to_string(t), nt ? "" : "/cached-stores");
      bytes_arg(benchmark::RegisterBenchmark(name.c_str(),
                                             [t, nt](benchmark::State& s) { BM_Reduce(s, t, nt); }),
                kLarge);
    }
  bytes_arg(benchmark::RegisterBenchmark(
                "loom/f32", [](benchmark::State& s) { BM_Reduce(s, DataType::f32, true); }),
            kCached);
  bytes_arg(benchmark::RegisterBenchmark(
                "reference/f32", [](benchmark::State& s) { BM_Reference(s, DataType::f32); }),
            kCached);
  // 64 KiB at three distances; the larger sizes at 16 find where memcpy stops paying for it.
  for (bool loom : {false, true}) {
    auto* b = benchmark::RegisterBenchmark(loom ? "copy/loom" : "copy/memcpy",
                                           [loom](benchmark::State& s) { BM_Copy(s, loom); });
    for (std::int64_t distance : {0, 16, 64}) b->Args({64 << 10, distance});
    for (std::int64_t bytes : {256 << 10, 512 << 10, 1 << 20, 4 << 20, 64 << 20})
      b->Args({bytes, 16});
    b->UseRealTime();
  }
}

}  // namespace
}  // namespace loom

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  loom::register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
}
