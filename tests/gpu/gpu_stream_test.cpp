// The CUDA runtime's streams as Loom's tools use them: a stream destroyed while another thread
// synchronises the whole device (what loom-perf does when it frees its buffers). CUDA lets both
// happen at once; the work queued on the destroyed stream completes and the device
// synchronisation returns. Skipped where no NVIDIA GPU is visible; built with
// LOOM_CUDA=EMULATED, the emulated runtime (tests/cuda_emulation) must do the same, under ASan too.
//
// The parent never touches CUDA (a CUDA context does not survive fork): a child does.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <vector>

#include "../support/ranks.hpp"

namespace loom {
namespace {

bool gpu_visible() {
#ifdef LOOM_CUDA_EMULATED
  return true;
#else
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES"); v && (*v == '\0' || *v == '-'))
    return false;
  return std::filesystem::exists("/dev/nvidiactl") && std::filesystem::exists("/dev/nvidia0");
#endif
}

TEST(DeviceStreams, DestroyedWhileAnotherThreadSynchronisesTheDevice) {
  if (!gpu_visible()) GTEST_SKIP() << "no NVIDIA GPU visible: GPU tests need one";
  testing::run_ranks_raw(1, [](testing::RankContext&) {
    constexpr int rounds = 300;
    constexpr std::size_t slice = 4096, bytes = rounds * slice;  // a slice per stream
    void* buf = nullptr;
    ASSERT_EQ(cudaMalloc(&buf, bytes), cudaSuccess);
    std::atomic<bool> done{false};
    std::atomic<int> sync_failures{0};
    std::thread syncer([&] {
      while (!done.load())
        if (cudaDeviceSynchronize() != cudaSuccess) sync_failures.fetch_add(1);
    });
    int failures = 0;
    for (int i = 0; i < rounds; ++i) {
      cudaStream_t s = nullptr;
      failures += cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess;
      failures += cudaMemsetAsync(static_cast<unsigned char*>(buf) + i * slice, (i + 1) & 0xff,
                                  slice, s) != cudaSuccess;
      failures += cudaStreamDestroy(s) != cudaSuccess;
    }
    done.store(true);
    syncer.join();
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    // Every memset, each queued on a stream destroyed at once, completed.
    std::vector<unsigned char> got(bytes);
    ASSERT_EQ(cudaMemcpy(got.data(), buf, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < bytes; ++i)
      wrong += got[i] != static_cast<unsigned char>((i / slice + 1) & 0xff);
    EXPECT_EQ(wrong, 0u);
    EXPECT_EQ(failures, 0);
    EXPECT_EQ(sync_failures.load(), 0);
    cudaFree(buf);
  });
}

}  // namespace
}  // namespace loom
