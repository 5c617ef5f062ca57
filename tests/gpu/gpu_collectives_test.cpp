// Every collective on device buffers, in 2 and 4 processes sharing one GPU (CUDA IPC between
// them, or staged through host shared memory with LOOM_CUDA_IPC=0, or over TCP), against the
// reference results; the ordering of calls on a user's stream; the refusals. Skipped, with the
// reason, where no NVIDIA GPU is visible.
//
// The parent never touches CUDA (a CUDA context does not survive fork): it looks for the
// driver's device files, the ranks do the rest.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "../support/ranks.hpp"
#include "verify/patterns.hpp"

namespace loom {
namespace {

using testing::run_ranks;

std::string why_no_gpu() {
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

// World size and path: "cudaipc" (device slots), "staged" (LOOM_CUDA_IPC=0: host shared
// memory), "tcp" (host sockets).
class GpuCollectives : public ::testing::TestWithParam<std::tuple<int, std::string>> {
 protected:
  void SetUp() override {
    if (auto why = why_no_gpu(); !why.empty()) GTEST_SKIP() << why;
    const std::string& path = std::get<1>(GetParam());
    if (path == "staged") ::setenv("LOOM_CUDA_IPC", "0", 1);
    if (path == "tcp") options_.options.transport = "tcp";
  }
  void TearDown() override { ::unsetenv("LOOM_CUDA_IPC"); }
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
              // 1 element, a count with a scalar tail, and one that crosses several slots.
              for (std::size_t count : {std::size_t{1}, std::size_t{4093}, std::size_t{300007}})
                for (bool in_place : {false, true}) {
                  if (coll == Coll::send_recv && in_place) continue;
                  check(comm, coll, t, op, count, in_place, stream);
                }
            }
        cudaStreamDestroy(stream);
      },
      options_);
}

INSTANTIATE_TEST_SUITE_P(Paths, GpuCollectives,
                         ::testing::Combine(::testing::Values(2, 4),
                                            ::testing::Values("cudaipc", "staged", "tcp")),
                         [](const auto& info) {
                           return std::get<1>(info.param) + "_world" +
                                  std::to_string(std::get<0>(info.param));
                         });

// The stream's order: the input is written by a copy queued on the stream just before the call,
// and the result is read by a copy queued just after it; neither waits on the host.
TEST(GpuStreams, AsyncCallIsOrderedBetweenTheStreamsWork) {
  LOOM_REQUIRE_GPU();
  run_ranks(2, [](Communicator& comm) {
    const std::size_t count = 1 << 22;  // 16 MiB of f32: the copies take long enough to race
    std::vector<float> host(count, static_cast<float>(comm.rank() + 1)), result(count, 0.0f);
    float *pinned_in = nullptr, *pinned_out = nullptr;
    cuda_ok(cudaMallocHost(reinterpret_cast<void**>(&pinned_in), count * 4), "cudaMallocHost");
    cuda_ok(cudaMallocHost(reinterpret_cast<void**>(&pinned_out), count * 4), "cudaMallocHost");
    std::memcpy(pinned_in, host.data(), count * 4);
    DeviceBuffer buf(count * 4);
    cudaStream_t stream = nullptr;
    cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    for (int round = 0; round < 3; ++round) {
      cuda_ok(cudaMemcpyAsync(buf.p, pinned_in, count * 4, cudaMemcpyHostToDevice, stream), "h2d");
      Work w = comm.all_reduce_async(buf.p, buf.p, count, DataType::f32, ReduceOp::sum,
                                     reinterpret_cast<CudaStream>(stream));
      cuda_ok(cudaMemcpyAsync(pinned_out, buf.p, count * 4, cudaMemcpyDeviceToHost, stream), "d2h");
      w.wait();
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
