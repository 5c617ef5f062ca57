// Every collective on device buffers, in 2 and 4 processes sharing one GPU (CUDA IPC between
// them: the direct path, or the device slots with LOOM_CUDA_DIRECT=0; or staged through host
// shared memory with LOOM_CUDA_IPC=0, or over TCP), against the reference results; the ordering
// of calls on a user's stream; the refusals. Skipped, with the reason, where no NVIDIA GPU is
// visible. Built with LOOM_CUDA=EMULATED, the same tests run on the emulated runtime
// (tests/cuda_emulation), which also reports what was asked of it.
//
// The parent never touches CUDA (a CUDA context does not survive fork): it looks for the
// driver's device files, the ranks do the rest.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "../support/key_audit.hpp"
#include "../support/ranks.hpp"
#ifdef LOOM_CUDA_EMULATED
#include "../cuda_emulation/emulation.hpp"
#endif
#include "verify/patterns.hpp"

namespace loom {
namespace {

using testing::run_ranks;

std::string why_no_gpu() {
#ifdef LOOM_CUDA_EMULATED
  return {};  // the emulated runtime (tests/cuda_emulation) has its device
#endif
  if (!std::filesystem::exists("/dev/nvidiactl") || !std::filesystem::exists("/dev/nvidia0"))
    return "no NVIDIA GPU on this machine (/dev/nvidia0 absent): GPU tests need one";
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES"); v && (*v == '\0' || *v == '-'))
    return "CUDA_VISIBLE_DEVICES hides every GPU";
  return {};
}

#define LOOM_REQUIRE_GPU()                                          \
  do {                                                              \
    if (auto why = why_no_gpu(); !why.empty()) GTEST_SKIP() << why; \
  } while (0)

void cuda_ok(cudaError_t e, const char* what) {
  ASSERT_EQ(e, cudaSuccess) << what << ": " << cudaGetErrorString(e);
}

// A device buffer that frees itself.
struct DeviceBuffer {
  void* p = nullptr;
  std::size_t bytes;
  explicit DeviceBuffer(std::size_t n) : bytes(std::max<std::size_t>(n, 1)) {
    if (cudaMalloc(&p, bytes) != cudaSuccess) throw std::runtime_error("cudaMalloc failed");
    cudaMemset(p, 0x5a, bytes);
  }
  ~DeviceBuffer() { cudaFree(p); }
  std::byte* at(std::size_t off) const { return static_cast<std::byte*>(p) + off; }
};

enum class Coll { all_reduce, reduce_scatter, all_gather, broadcast, reduce, send_recv };

// Runs one call on device buffers with the verification data and checks every element.
void check(Communicator& comm, Coll coll, DataType t, ReduceOp op, std::size_t count, bool in_place,
           cudaStream_t stream) {
  const int n = comm.size(), r = comm.rank();
  const std::size_t elem = size_of(t), total = count * static_cast<std::size_t>(n);
  const int root = static_cast<int>(count % static_cast<std::size_t>(n));
  std::vector<std::byte> host(total * elem + 1), got(total * elem + 1);
  DeviceBuffer in(total * elem + 1), out(total * elem + 1);
  std::byte* ip = in.at(0);
  std::byte* op_ = out.at(0);
  std::size_t wrong = 0;
  SCOPED_TRACE(::testing::Message() << "collective " << static_cast<int>(coll) << " "
                                    << to_string(t) << " " << to_string(op) << " count " << count
                                    << (in_place ? " in place" : "") << " rank " << r);
  auto upload = [&](std::byte* dst, std::size_t elems) {
    cuda_ok(cudaMemcpy(dst, host.data(), elems * elem, cudaMemcpyHostToDevice), "upload");
  };
  auto download = [&](const std::byte* src, std::size_t elems) {
    cuda_ok(cudaStreamSynchronize(stream), "stream");
    cuda_ok(cudaMemcpy(got.data(), src, elems * elem, cudaMemcpyDeviceToHost), "download");
  };
  switch (coll) {
    case Coll::all_reduce: {
      verify::fill(host.data(), count, r, t, op);
      upload(ip, count);
      if (in_place) op_ = ip;
      comm.all_reduce(ip, op_, count, t, op, reinterpret_cast<CudaStream>(stream));
      download(op_, count);
      auto want = verify::expected_reduction(0, count, n, t, op);
      wrong = verify::count_wrong(got.data(), want.data(), count, t);
      break;
    }
    case Coll::reduce_scatter: {
      verify::fill(host.data(), total, r, t, op);
      upload(ip, total);
      if (in_place) op_ = ip + static_cast<std::size_t>(r) * count * elem;
      comm.reduce_scatter(ip, op_, count, t, op, reinterpret_cast<CudaStream>(stream));
      download(op_, count);
      auto want = verify::expected_reduction(static_cast<std::size_t>(r) * count, count, n, t, op);
      wrong = verify::count_wrong(got.data(), want.data(), count, t);
      break;
    }
    case Coll::all_gather: {
      if (in_place) ip = op_ + static_cast<std::size_t>(r) * count * elem;
      verify::fill(host.data(), count, r, t, op, static_cast<std::size_t>(r) * count);
      upload(ip, count);
      comm.all_gather(ip, op_, count, t, reinterpret_cast<CudaStream>(stream));
      download(op_, total);
      std::vector<std::byte> want(count * elem);
      for (int b = 0; b < n; ++b) {
        verify::fill(want.data(), count, b, t, op, static_cast<std::size_t>(b) * count);
        wrong += verify::count_wrong(got.data() + static_cast<std::size_t>(b) * count * elem,
                                     want.data(), count, t);
      }
      break;
    }
    case Coll::broadcast: {
      verify::fill(host.data(), count, r, t, op);
      upload(ip, count);
      if (in_place) op_ = ip;
      comm.broadcast(ip, op_, count, t, root, reinterpret_cast<CudaStream>(stream));
      download(op_, count);
      std::vector<std::byte> want(count * elem);
      verify::fill(want.data(), count, root, t, op);
      wrong = verify::count_wrong(got.data(), want.data(), count, t);
      break;
    }
    case Coll::reduce: {
      verify::fill(host.data(), count, r, t, op);
      upload(ip, count);
      if (in_place) op_ = ip;
      comm.reduce(ip, op_, count, t, op, root, reinterpret_cast<CudaStream>(stream));
      if (r == root) {
        download(op_, count);
        auto want = verify::expected_reduction(0, count, n, t, op);
        wrong = verify::count_wrong(got.data(), want.data(), count, t);
      }
      break;
    }
    case Coll::send_recv: {  // a ring of messages: every rank sends to the next
      verify::fill(host.data(), count, r, t, op);
      upload(ip, count);
      auto stream_handle = reinterpret_cast<CudaStream>(stream);
      Work sent = comm.send_async(ip, count, t, (r + 1) % n, stream_handle);
      comm.recv(op_, count, t, (r + n - 1) % n, stream_handle);
      sent.wait();
      download(op_, count);
      std::vector<std::byte> want(count * elem);
      verify::fill(want.data(), count, (r + n - 1) % n, t, op);
      wrong = verify::count_wrong(got.data(), want.data(), count, t);
      break;
    }
  }
  EXPECT_EQ(wrong, 0u);
}

constexpr DataType kTypes[] = {DataType::f32, DataType::f64, DataType::f16, DataType::bf16,
                               DataType::i8,  DataType::u8,  DataType::i32, DataType::u32,
                               DataType::i64, DataType::u64};
constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max,
                             ReduceOp::avg};
constexpr Coll kColls[] = {Coll::all_reduce, Coll::reduce_scatter, Coll::all_gather,
                           Coll::broadcast,  Coll::reduce,         Coll::send_recv};

// World size and path: "cudaipc" (direct: the peers' buffers in place), "cudaipc_slots"
// (LOOM_CUDA_DIRECT=0: device slots), "staged" (LOOM_CUDA_IPC=0: host shared memory), "tcp"
// (host sockets).
class GpuCollectives : public ::testing::TestWithParam<std::tuple<int, std::string>> {
 protected:
  void SetUp() override {
    if (auto why = why_no_gpu(); !why.empty()) GTEST_SKIP() << why;
    const std::string& path = std::get<1>(GetParam());
    if (path == "staged") ::setenv("LOOM_CUDA_IPC", "0", 1);
    if (path == "cudaipc_slots") ::setenv("LOOM_CUDA_DIRECT", "0", 1);
    if (path == "tcp") options_.options.transport = "tcp";
  }
  void TearDown() override {
    ::unsetenv("LOOM_CUDA_IPC");
    ::unsetenv("LOOM_CUDA_DIRECT");
  }
  testing::RunOptions options_;
};

TEST_P(GpuCollectives, EveryCollectiveTypeAndReductionMatchesTheReference) {
  run_ranks(
      std::get<0>(GetParam()),
      [](Communicator& comm) {
        cudaStream_t stream = nullptr;
        cuda_ok(cudaStreamCreate(&stream), "cudaStreamCreate");
        for (Coll coll : kColls)
          for (DataType t : kTypes)
            for (ReduceOp op : kOps) {
              const bool reduces =
                  coll == Coll::all_reduce || coll == Coll::reduce_scatter || coll == Coll::reduce;
              if (!reduces && op != ReduceOp::sum) continue;
              // 1 element, a count with a scalar tail, and one that crosses several slots. Past 2
              // ranks the last runs for one dtype of each element size only: every dtype crosses
              // the slots at 2 ranks, and under ASan on the emulated runtime the 4-rank cells of
              // all ten took 330 s of CI's time.
              const bool every_count = comm.size() == 2 || t == DataType::f32 ||
                                       t == DataType::f16 || t == DataType::i8 ||
                                       t == DataType::i64;
              for (std::size_t count : {std::size_t{1}, std::size_t{4093}, std::size_t{300007}})
                for (bool in_place : {false, true}) {
                  if (count == 300007 && !every_count) continue;
                  if (coll == Coll::send_recv && in_place) continue;
                  check(comm, coll, t, op, count, in_place, stream);
                }
            }
        cudaStreamDestroy(stream);
      },
      options_);
}

// estimate() on device buffers names what the call runs: the direct rows where the peers' memory
// is mapped (CUDA IPC with LOOM_CUDA_DIRECT on), another row on every other path.
TEST_P(GpuCollectives, EstimateNamesThePathTheCallRuns) {
  const bool direct = std::get<1>(GetParam()) == "cudaipc";
  run_ranks(
      std::get<0>(GetParam()),
      [direct](Communicator& comm) {
        for (std::size_t bytes : {std::size_t{64}, std::size_t{1} << 20, std::size_t{64} << 20}) {
          const Estimate e = comm.estimate(Operation::all_reduce, bytes, true);
          EXPECT_EQ(e.algorithm == "direct", direct) << bytes << " bytes: " << e.algorithm;
          // Host buffers outside alloc()'s windows never take the direct rows.
          EXPECT_NE(comm.estimate(Operation::all_reduce, bytes, false).algorithm, "direct");
        }
      },
      options_);
}

INSTANTIATE_TEST_SUITE_P(Paths, GpuCollectives,
                         ::testing::Combine(::testing::Values(2, 4),
                                            ::testing::Values("cudaipc", "cudaipc_slots", "staged",
                                                              "tcp")),
                         [](const auto& info) {
                           return std::get<1>(info.param) + "_world" +
                                  std::to_string(std::get<0>(info.param));
                         });

// An asynchronous call on a user's stream holds nothing: whatever the user queues behind it,
// and a whole-device synchronisation on the host, finish without waiting for the call (which
// waits here for the other rank). Once its Work is waited for, work queued on the stream is
// ordered after the call: the copy reads the result, without the host in between.
TEST(GpuStreams, AsyncCallHoldsNothingAndOrdersTheStreamOnceWaitedFor) {
  LOOM_REQUIRE_GPU();
  run_ranks(2, [](Communicator& comm) {
    const std::size_t count = 1 << 22;  // 16 MiB of f32: the copies take long enough to race
    float *pinned_in = nullptr, *pinned_out = nullptr;
    cuda_ok(cudaMallocHost(reinterpret_cast<void**>(&pinned_in), count * 4), "cudaMallocHost");
    cuda_ok(cudaMallocHost(reinterpret_cast<void**>(&pinned_out), count * 4), "cudaMallocHost");
    for (std::size_t i = 0; i < count; ++i) pinned_in[i] = static_cast<float>(comm.rank() + 1);
    DeviceBuffer buf(count * 4), other(count * 4);
    cudaStream_t stream = nullptr;
    cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    for (int round = 0; round < 3; ++round) {
      cuda_ok(cudaMemcpyAsync(buf.p, pinned_in, count * 4, cudaMemcpyHostToDevice, stream), "h2d");
      if (comm.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(200));
      Work w = comm.all_reduce_async(buf.p, buf.p, count, DataType::f32, ReduceOp::sum,
                                     reinterpret_cast<CudaStream>(stream));
      // Unrelated work behind the call, and the whole device synchronised, before any wait.
      cuda_ok(cudaMemcpyAsync(other.p, pinned_in, count * 4, cudaMemcpyHostToDevice, stream),
              "unrelated h2d");
      cuda_ok(cudaStreamSynchronize(stream), "the stream with the call still running");
      cuda_ok(cudaDeviceSynchronize(), "the device with the call still running");
      w.wait();
      cuda_ok(cudaMemcpyAsync(pinned_out, buf.p, count * 4, cudaMemcpyDeviceToHost, stream), "d2h");
      cuda_ok(cudaStreamSynchronize(stream), "sync");
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < count; ++i) wrong += pinned_out[i] != 3.0f;
      EXPECT_EQ(wrong, 0u) << "round " << round;
    }
    cudaStreamDestroy(stream);
    cudaFreeHost(pinned_in);
    cudaFreeHost(pinned_out);
  });
}

// A call that cannot finish (the other rank never enters it) fails with TimeoutError at the
// communicator's timeout; the user's stream is never held by it, before or after.
TEST(GpuStreams, CallThatTimesOutFailsAndLeavesTheStreamFree) {
  LOOM_REQUIRE_GPU();
  testing::RunOptions opts;
  opts.options.timeout = std::chrono::seconds(3);
  run_ranks(
      2,
      [](Communicator& comm) {
        DeviceBuffer buf(1 << 20);
        cudaStream_t stream = nullptr;
        cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
        comm.all_reduce(buf.p, 1 << 18, DataType::f32, ReduceOp::sum,
                        reinterpret_cast<CudaStream>(stream));  // connections up
        if (comm.rank() == 1) {
          std::this_thread::sleep_for(std::chrono::seconds(6));  // never enters the second call
          return;
        }
        const auto start = std::chrono::steady_clock::now();
        Work w = comm.all_reduce_async(buf.p, buf.p, 1 << 18, DataType::f32, ReduceOp::sum,
                                       reinterpret_cast<CudaStream>(stream));
        cuda_ok(cudaStreamSynchronize(stream), "the stream while the call waits");
        EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
        EXPECT_THROW(w.wait(), TimeoutError);
        cuda_ok(cudaStreamSynchronize(stream), "the stream after the failure");
        EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(8));
        cudaStreamDestroy(stream);
      },
      opts);
}

// Buffers without an IPC handle (pool memory from cudaMallocAsync) on one rank: every rank
// takes the slots for that call, and the result is right.
TEST(GpuStreams, BufferWithoutAnIpcHandleOnOneRankMovesThroughTheSlots) {
  LOOM_REQUIRE_GPU();
  run_ranks(2, [](Communicator& comm) {
    const std::size_t count = 100000;
    cudaStream_t stream = nullptr;
    cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    void* p = nullptr;
    if (comm.rank() == 0)
      cuda_ok(cudaMallocAsync(&p, count * 4, stream), "cudaMallocAsync");
    else
      cuda_ok(cudaMalloc(&p, count * 4), "cudaMalloc");
    std::vector<std::int32_t> host(count, comm.rank() + 5), back(count);
    cuda_ok(cudaMemcpy(p, host.data(), count * 4, cudaMemcpyHostToDevice), "upload");
    comm.all_reduce(p, count, DataType::i32, ReduceOp::sum, reinterpret_cast<CudaStream>(stream));
    cuda_ok(cudaStreamSynchronize(stream), "sync");
    cuda_ok(cudaMemcpy(back.data(), p, count * 4, cudaMemcpyDeviceToHost), "download");
    for (auto v : back) ASSERT_EQ(v, 11);
    if (comm.rank() == 0)
      cudaFreeAsync(p, stream);
    else
      cudaFree(p);
    cuda_ok(cudaStreamSynchronize(stream), "sync");
    cudaStreamDestroy(stream);
  });
}

// A job on device buffers writes each store key once: the CUDA IPC handles and the segments of
// the CUDA IPC connections' counters among them (they once shared a key, and every CUDA IPC job
// failed). Through the device slots (LOOM_CUDA_DIRECT=0), so that every connection is made.
TEST(KeyAudit, AJobOnDeviceBuffersSetsEachKeyOnce) {
  LOOM_REQUIRE_GPU();
  ::setenv("LOOM_CUDA_DIRECT", "0", 1);
  testing::audit_keys(3, [](Communicator& comm) {
    const std::size_t count = 1 << 16;
    std::vector<std::int32_t> host(count, comm.rank() + 1), back(count);
    DeviceBuffer buf(count * 4);
    cuda_ok(cudaMemcpy(buf.p, host.data(), count * 4, cudaMemcpyHostToDevice), "upload");
    comm.all_reduce(buf.p, count, DataType::i32, ReduceOp::sum);
    cuda_ok(cudaDeviceSynchronize(), "sync");
    cuda_ok(cudaMemcpy(back.data(), buf.p, count * 4, cudaMemcpyDeviceToHost), "download");
    for (auto v : back) ASSERT_EQ(v, 6);
  });
  ::unsetenv("LOOM_CUDA_DIRECT");
}

#ifdef LOOM_CUDA_EMULATED
// The direct path maps a peer's allocation once: calls on the same buffers open nothing more,
// and a buffer freed and made again (another allocation, perhaps at the same address) is mapped
// afresh, with the right result.
TEST(GpuDirect, PeerBuffersAreMappedOnceAndRemappedWhenReallocated) {
  run_ranks(2, [](Communicator& comm) {
    const std::size_t count = 1 << 16;
    std::vector<std::int32_t> host(count), back(count);
    auto round = [&](DeviceBuffer& buf, std::int32_t base) {
      for (std::size_t i = 0; i < count; ++i)
        host[i] = base + comm.rank() + static_cast<std::int32_t>(i % 7);
      cuda_ok(cudaMemcpy(buf.p, host.data(), count * 4, cudaMemcpyHostToDevice), "upload");
      comm.all_reduce(buf.p, count, DataType::i32, ReduceOp::sum);
      cuda_ok(cudaDeviceSynchronize(), "sync");
      cuda_ok(cudaMemcpy(back.data(), buf.p, count * 4, cudaMemcpyDeviceToHost), "download");
      for (std::size_t i = 0; i < count; ++i)
        ASSERT_EQ(back[i], 2 * base + 1 + 2 * static_cast<std::int32_t>(i % 7)) << "at " << i;
    };
    {
      DeviceBuffer buf(count * 4);
      round(buf, 10);
      const auto opened = cuda_emulation::counts().ipc_memory_opens;
      EXPECT_GE(opened, 1u) << "the direct path mapped nothing";
      for (int i = 0; i < 5; ++i) round(buf, 20 + i);
      EXPECT_EQ(cuda_emulation::counts().ipc_memory_opens, opened) << "mapped again";
    }
    const auto before = cuda_emulation::counts().ipc_memory_opens;
    DeviceBuffer again(count * 4);
    round(again, 40);
    EXPECT_GT(cuda_emulation::counts().ipc_memory_opens, before) << "a new allocation not mapped";
  });
}

// Host slots are pinned when first used, so the staged path's copies are DMA and its kernels
// read the slots in place.
TEST(GpuStaged, HostSlotsArePinnedOnce) {
  ::setenv("LOOM_CUDA_IPC", "0", 1);
  run_ranks(2, [](Communicator& comm) {
    DeviceBuffer buf(1 << 20);
    comm.all_reduce(buf.p, 1 << 18, DataType::f32, ReduceOp::sum);
    const auto pinned = cuda_emulation::counts().host_registrations;
    EXPECT_GE(pinned, 1u);
    for (int i = 0; i < 3; ++i) comm.all_reduce(buf.p, 1 << 18, DataType::f32, ReduceOp::sum);
    EXPECT_EQ(cuda_emulation::counts().host_registrations, pinned);
  });
  ::unsetenv("LOOM_CUDA_IPC");
}
#endif

// Blocking calls on CUDA's default stream (nullptr), host calls in between on the same
// communicator, and a refusal that leaves the communicator usable.
TEST(GpuStreams, DefaultStreamHostCallsAndRefusalsMix) {
  LOOM_REQUIRE_GPU();
  run_ranks(2, [](Communicator& comm) {
    const std::size_t count = 1000;
    std::vector<std::int32_t> host(count, comm.rank() + 1), back(count);
    DeviceBuffer dev(count * 4);
    cuda_ok(cudaMemcpy(dev.p, host.data(), count * 4, cudaMemcpyHostToDevice), "upload");
    comm.all_reduce(dev.p, count, DataType::i32, ReduceOp::sum);
    cuda_ok(cudaMemcpy(back.data(), dev.p, count * 4, cudaMemcpyDeviceToHost), "download");
    for (auto v : back) ASSERT_EQ(v, 3);
    comm.all_reduce(host.data(), count, DataType::i32, ReduceOp::max);  // host path
    for (auto v : host) ASSERT_EQ(v, 2);
    try {
      comm.all_reduce(dev.p, host.data(), count, DataType::i32, ReduceOp::sum);
      ADD_FAILURE() << "device input with a host output was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("one side"), std::string::npos) << e.what();
    }
    comm.all_reduce(dev.p, count, DataType::i32, ReduceOp::sum);
    cuda_ok(cudaMemcpy(back.data(), dev.p, count * 4, cudaMemcpyDeviceToHost), "download");
    for (auto v : back) ASSERT_EQ(v, 6);
  });
}

}  // namespace
}  // namespace loom
