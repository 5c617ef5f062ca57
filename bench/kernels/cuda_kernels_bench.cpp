// The CUDA reduction kernels against a device-to-device cudaMemcpy on the same GPU (Google
// Benchmark, timed with CUDA events). Bytes counted as moved: a copy of S bytes reads S and
// writes S; a reduction with an S-byte output reads 2S and writes S.
// bench/kernels/cuda_kernel_ratios.sh turns a run into ratios against the copy.
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>

#include "kernels/cuda/cuda_kernels.cuh"

namespace loom {
namespace {

constexpr std::int64_t kSizes[] = {std::int64_t{64} << 20, std::int64_t{1} << 30};

struct Device {
  void *a = nullptr, *b = nullptr, *c = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  std::string error;
  explicit Device(std::size_t bytes) {
    if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess ||
        cudaMalloc(&c, bytes) != cudaSuccess) {
      error = cudaGetErrorString(cudaGetLastError());
      return;
    }
    // Small finite values of every type: 0x3c3c... is 1.06 in f16, 0.0115 in bf16.
    cudaMemset(a, 0x3c, bytes);
    cudaMemset(b, 0x3c, bytes);
    cudaMemset(c, 0, bytes);
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    cudaDeviceSynchronize();
  }
  ~Device() {
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    if (stream) cudaStreamDestroy(stream);
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
  }
};

bool skip_without_gpu(benchmark::State& state) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    state.SkipWithError("no GPU visible");
    return true;
  }
  return false;
}

template <typename Launch>
void timed(benchmark::State& state, Device& d, std::size_t moved, Launch&& launch) {
  for (auto _ : state) {
    cudaEventRecord(d.start, d.stream);
    launch();
    cudaEventRecord(d.stop, d.stream);
    cudaEventSynchronize(d.stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, d.start, d.stop);
    state.SetIterationTime(ms / 1e3);
  }
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) state.SkipWithError(cudaGetErrorString(e));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * moved));
}

void BM_CopyD2D(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  const auto bytes = static_cast<std::size_t>(state.range(0));
  Device d(bytes);
  if (!d.error.empty()) return state.SkipWithError(d.error.c_str());
  timed(state, d, 2 * bytes,
        [&] { cudaMemcpyAsync(d.c, d.a, bytes, cudaMemcpyDeviceToDevice, d.stream); });
}

void BM_Reduce(benchmark::State& state, DataType dtype, ReduceOp op) {
  if (skip_without_gpu(state)) return;
  const auto bytes = static_cast<std::size_t>(state.range(0));
  Device d(bytes);
  if (!d.error.empty()) return state.SkipWithError(d.error.c_str());
  const std::size_t n = bytes / size_of(dtype);
  timed(state, d, 3 * bytes,
        [&] { kernels::cuda::reduce_copy(d.c, nullptr, d.a, d.b, n, dtype, op, 1, d.stream); });
}

void register_all() {
  auto sizes = [](benchmark::internal::Benchmark* b) {
    for (auto s : kSizes) b->Arg(s);
    b->UseManualTime()->Unit(benchmark::kMicrosecond);
  };
  sizes(benchmark::RegisterBenchmark("copy_d2d", BM_CopyD2D));
  for (DataType t :
       {DataType::f32, DataType::bf16, DataType::f16, DataType::f64, DataType::i32, DataType::i8})
    sizes(
        benchmark::RegisterBenchmark(("reduce_sum/" + std::string(to_string(t))).c_str(),
                                     [t](benchmark::State& s) { BM_Reduce(s, t, ReduceOp::sum); }));
  sizes(benchmark::RegisterBenchmark(
      "reduce_max/f32", [](benchmark::State& s) { BM_Reduce(s, DataType::f32, ReduceOp::max); }));
}

}  // namespace
}  // namespace loom

int main(int argc, char** argv) {
  loom::register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
