// Bad arguments raise InvalidArgument before any communication (a call's; init's and split's
// after telling their peers) and leave the communicator usable.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "../support/ranks.hpp"

namespace loom {
namespace {

using testing::run_ranks;

// The message names the operation, the rank and the cause.
template <typename F>
void expect_invalid(F&& call, const std::string& op, const std::string& cause) {
  try {
    call();
    ADD_FAILURE() << op << ": no InvalidArgument for " << cause;
  } catch (const InvalidArgument& e) {
    std::string what = e.what();
    EXPECT_NE(what.find(op), std::string::npos) << what;
    EXPECT_NE(what.find("rank"), std::string::npos) << what;
    EXPECT_NE(what.find(cause), std::string::npos) << what;
  }
}

TEST(BadInput, EveryCaseRaisesInvalidArgumentAndTheNextAllReduceSucceeds) {
  run_ranks(3, [](Communicator& comm) {
    std::vector<float> buf(16, 1.0f);
    auto all_reduce_still_works = [&] {
      float x = 1.0f, y = 0.0f;
      comm.all_reduce(&x, &y, 1, DataType::f32, ReduceOp::sum);
      EXPECT_EQ(y, 3.0f);
    };
    expect_invalid([&] { comm.all_reduce(nullptr, buf.data(), 4, DataType::f32, ReduceOp::sum); },
                   "all_reduce", "'in' is null");
    all_reduce_still_works();
    expect_invalid([&] { comm.all_reduce(buf.data(), nullptr, 4, DataType::f32, ReduceOp::sum); },
                   "all_reduce", "'out' is null");
    all_reduce_still_works();
    expect_invalid(
        [&] {
          comm.all_reduce(buf.data(), buf.data(), SIZE_MAX / 2, DataType::f32, ReduceOp::sum);
        },
        "all_reduce", "overflows");
    all_reduce_still_works();
    expect_invalid([&] { comm.all_gather(buf.data(), buf.data(), SIZE_MAX / 8, DataType::u8); },
                   "all_gather", "overflows");
    all_reduce_still_works();
    expect_invalid(
        [&] {
          comm.all_reduce(buf.data(), buf.data(), 4, static_cast<DataType>(99), ReduceOp::sum);
        },
        "all_reduce", "unknown data type");
    all_reduce_still_works();
    // A CUDA stream only orders calls on device buffers (never dereferenced here).
    auto* stream = reinterpret_cast<CudaStream>(std::uintptr_t{0x1000});
    expect_invalid(
        [&] { comm.all_reduce(buf.data(), buf.data(), 4, DataType::f32, ReduceOp::sum, stream); },
        "all_reduce", "a CUDA stream was given but");
    all_reduce_still_works();
    expect_invalid([&] { comm.broadcast(buf.data(), 4, DataType::f32, 0, stream); }, "broadcast",
                   "a CUDA stream was given but");
    all_reduce_still_works();
    expect_invalid(
        [&] {
          comm.all_reduce(buf.data(), buf.data(), 4, DataType::f32, static_cast<ReduceOp>(42));
        },
        "all_reduce", "unknown reduce op");
    all_reduce_still_works();
    expect_invalid([&] { comm.broadcast(buf.data(), 4, DataType::f32, 3); }, "broadcast",
                   "root 3 is outside");
    all_reduce_still_works();
    expect_invalid(
        [&] { comm.reduce(buf.data(), buf.data(), 4, DataType::f32, ReduceOp::max, -1); }, "reduce",
        "root -1 is outside");
    all_reduce_still_works();
    expect_invalid([&] { comm.send(buf.data(), 4, DataType::f32, 7); }, "send",
                   "peer 7 is outside");
    all_reduce_still_works();
    expect_invalid([&] { comm.recv(buf.data(), 4, DataType::f32, comm.rank()); }, "recv",
                   "this rank itself");
    all_reduce_still_works();
    expect_invalid(
        [&] { comm.all_reduce_async(nullptr, nullptr, 1, DataType::i32, ReduceOp::sum); },
        "all_reduce", "is null");
    all_reduce_still_works();
    // A null buffer is fine with count 0, and where the rank does not use it.
    comm.all_reduce(nullptr, nullptr, 0, DataType::f32, ReduceOp::sum);
    float root_value = 5.0f;
    comm.broadcast(comm.rank() == 0 ? &root_value : nullptr, &root_value, 1, DataType::f32, 0);
    EXPECT_EQ(root_value, 5.0f);
    all_reduce_still_works();
  });
}

// Each block of an uneven call fits the address space, but their sum wraps: five blocks of a
// quarter of it each total 1 element modulo 2^64. That passed every check (the call then ran with
// a count of 1 over buffers that hold nothing like the blocks, or, with an 'out' left null, as
// one that writes nothing); the sum is checked now, on every rank alike.
TEST(BadInput, UnevenCountsWhoseSumWrapsAreRefused) {
  run_ranks(5, [](Communicator& comm) {
    const std::size_t quarter = SIZE_MAX / 4;
    const std::vector<std::size_t> counts{quarter, quarter, quarter, quarter, 5};
    const std::vector<std::size_t> displs(5, 0);
    std::vector<std::uint8_t> buf(64, 1);
    expect_invalid([&] { comm.all_gather_v(buf.data(), buf.data(), counts, displs, DataType::u8); },
                   "all_gather_v", "the sum of counts");
    expect_invalid(
        [&] {
          comm.reduce_scatter_v(buf.data(), buf.data(), counts, displs, DataType::u8,
                                ReduceOp::sum);
        },
        "reduce_scatter_v", "the sum of counts");
    expect_invalid([&] { comm.all_gather_v(buf.data(), nullptr, counts, displs, DataType::u8); },
                   "all_gather_v", "the sum of counts");
    std::int32_t x = 1, y = 0;
    comm.all_reduce(&x, &y, 1, DataType::i32, ReduceOp::sum);
    EXPECT_EQ(y, 5);
  });
}

TEST(BadInput, UseAfterDestroyRaisesInvalidArgument) {
  run_ranks(2, [](Communicator& comm) {
    comm.barrier();
    comm.destroy();
    float x = 0;
    expect_invalid([&] { comm.all_reduce(&x, &x, 1, DataType::f32, ReduceOp::sum); }, "all_reduce",
                   "destroyed");
    expect_invalid([&] { comm.barrier(); }, "barrier", "destroyed");
  });
}

TEST(BadInput, MovedFromCommunicatorRaisesInvalidArgument) {
  run_ranks(2, [](Communicator& comm) {
    Communicator moved = std::move(comm);
    float x = 1;
    EXPECT_THROW(comm.all_reduce(&x, &x, 1, DataType::f32, ReduceOp::sum), InvalidArgument);
    moved.all_reduce(&x, &x, 1, DataType::f32, ReduceOp::sum);
    EXPECT_EQ(x, 2.0f);
    comm = std::move(moved);
  });
}

TEST(BadInput, BadWorldArgumentsAreRejected) {
  const std::string path = ::testing::TempDir() + "/loom-bad-world-store";
  auto store = std::make_shared<FileStore>(path);
  EXPECT_THROW(Communicator(store, 2, 2), InvalidArgument);
  EXPECT_THROW(Communicator(store, -1, 2), InvalidArgument);
  EXPECT_THROW(Communicator(store, 0, 0), InvalidArgument);
  EXPECT_THROW(Communicator(nullptr, 0, 1), InvalidArgument);
  ::unlink(path.c_str());
}

}  // namespace
}  // namespace loom
