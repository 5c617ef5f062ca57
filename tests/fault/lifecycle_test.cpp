// A communicator's lifetime against the threads that use it: destroy() and abort() from a
// watchdog thread while a call runs, and a constructor that fails after its setup.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "../support/ranks.hpp"
#include "../support/transports.hpp"

namespace loom {
namespace {

using namespace std::chrono_literals;
using testing::RankContext;
using testing::run_ranks_raw;

TEST(Lifecycle, AbortThenDestroyFromAWatchdogWhileACallWaitsEndsTheCallCleanly) {
  for (const char* transport : loom::testing::kTransports) {
    SCOPED_TRACE(transport);
    run_ranks_raw(2, [transport](RankContext& ctx) {
      Options o;
      o.timeout = 30s;
      o.transport = transport;
      Communicator comm(ctx.store, ctx.rank, ctx.size, o);
      float x = 1;
      comm.all_reduce(&x, &x, 1, DataType::f32, ReduceOp::sum);  // every connection is up
      if (ctx.rank == 1) {  // alive, but never enters the second call
        ctx.store->get("finished", 60s);
        return;
      }
      std::thread watchdog([&comm] {
        std::this_thread::sleep_for(300ms);
        comm.abort();
        comm.destroy();  // must not free what the waiting call still uses
      });
      const auto start = std::chrono::steady_clock::now();
      EXPECT_THROW(comm.all_reduce(&x, &x, 1, DataType::f32, ReduceOp::sum), Aborted);
      EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
      watchdog.join();
      EXPECT_THROW(comm.barrier(), Aborted);
      ctx.store->set("finished", std::string("1"));
    });
  }
}

TEST(Lifecycle, DestroyFromAnotherThreadWaitsForTheRunningCall) {
  run_ranks_raw(2, [](RankContext& ctx) {
    Options o;
    o.timeout = 30s;
    Communicator comm(ctx.store, ctx.rank, ctx.size, o);
    std::vector<std::int32_t> v(1 << 16, ctx.rank + 1);
    comm.all_reduce(v.data(), v.data(), v.size(), DataType::i32, ReduceOp::sum);
    if (ctx.rank == 1) {
      ctx.store->get("destroying", 30s);  // rank 0's call is running and its destroy() waits
      std::this_thread::sleep_for(300ms);
      // Rank 0's call cannot end before this one starts: its destroy() must still be waiting.
      ctx.store->set("joining", std::string("1"));
      comm.all_reduce(v.data(), v.data(), v.size(), DataType::i32, ReduceOp::sum);
      EXPECT_EQ(v.front(), 6);
      return;
    }
    std::thread destroyer([&] {
      std::this_thread::sleep_for(200ms);
      ctx.store->set("destroying", std::string("1"));
      comm.destroy();
      EXPECT_TRUE(ctx.store->check({"joining"})[0]) << "destroy() returned while a call still ran";
    });
    comm.all_reduce(v.data(), v.data(), v.size(), DataType::i32, ReduceOp::sum);
    destroyer.join();
    EXPECT_EQ(v.front(), 6);
    EXPECT_EQ(v.back(), 6);
    EXPECT_THROW(comm.barrier(), InvalidArgument);
  });
}

// CPU seconds this process has used (all its threads).
double cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// destroy() while another thread's blocking call runs and an asynchronous call waits behind it:
// the worker thread, seeing the communicator destroyed and a call queued but the engine busy,
// looked again at once, and again, a core at 100% until the running call ended (up to
// LOOM_TIMEOUT). Now it sleeps until that call ends.
TEST(Lifecycle, DestroyWithACallRunningAndOneQueuedDoesNotSpin) {
  run_ranks_raw(2, [](RankContext& ctx) {
    Options o;
    o.timeout = 30s;
    Communicator comm(ctx.store, ctx.rank, ctx.size, o);
    std::int32_t x = 1, y = 2;
    comm.all_reduce(&x, &x, 1, DataType::i32, ReduceOp::sum);  // every connection is up
    if (ctx.rank == 1) {                                       // joins rank 0's two calls 2 s late
      ctx.store->get("measured", 60s);
      comm.all_reduce(&x, &x, 1, DataType::i32, ReduceOp::sum);
      comm.all_reduce(&y, &y, 1, DataType::i32, ReduceOp::sum);
      return;
    }
    std::thread blocking([&] { comm.all_reduce(&x, &x, 1, DataType::i32, ReduceOp::sum); });
    std::this_thread::sleep_for(200ms);  // the blocking call runs on its own thread
    Work queued = comm.all_reduce_async(&y, &y, 1, DataType::i32, ReduceOp::sum);
    std::thread destroyer([&] { comm.destroy(); });
    std::this_thread::sleep_for(200ms);
    const double cpu_before = cpu_seconds();
    const auto wall_before = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(1500ms);
    const double cpu = cpu_seconds() - cpu_before;
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_before).count();
    ctx.store->set("measured", std::string("1"));
    blocking.join();
    queued.wait();
    destroyer.join();
    EXPECT_EQ(x, 4);
    EXPECT_EQ(y, 4);
    EXPECT_LT(cpu, 0.3 * wall) << "the process used " << cpu << " s of CPU in " << wall
                               << " s while its calls waited";
  });
}

// A store whose second connection (the health monitor's) cannot be made.
class StoreWithoutClones final : public Store {
 public:
  explicit StoreWithoutClones(std::shared_ptr<Store> inner) : inner_(std::move(inner)) {}
  void set(const std::string& k, const Bytes& v) override { inner_->set(k, v); }
  Bytes get(const std::string& k, std::chrono::milliseconds t) override {
    return inner_->get(k, t);
  }
  std::int64_t add(const std::string& k, std::int64_t d) override { return inner_->add(k, d); }
  Bytes compare_set(const std::string& k, const Bytes& e, const Bytes& d) override {
    return inner_->compare_set(k, e, d);
  }
  bool remove(const std::string& k) override { return inner_->remove(k); }
  void wait(const std::vector<std::string>& k, std::chrono::milliseconds t) override {
    inner_->wait(k, t);
  }
  std::vector<bool> check(const std::vector<std::string>& k) override { return inner_->check(k); }
  std::shared_ptr<Store> clone() const override {
    throw StoreError("store clone: cannot open a second connection (refused by the test)");
  }
  using Store::set;

 private:
  std::shared_ptr<Store> inner_;
};

TEST(Lifecycle, ConstructorThatFailsAfterItsSetupRaisesInsteadOfTerminating) {
  run_ranks_raw(2, [](RankContext& ctx) {
    auto store = std::make_shared<StoreWithoutClones>(ctx.store);
    try {
      Communicator comm(store, ctx.rank, ctx.size);
      ADD_FAILURE() << "the communicator was built without its monitor's store connection";
    } catch (const StoreError& e) {
      EXPECT_NE(std::string(e.what()).find("second connection"), std::string::npos) << e.what();
    }
  });
}

}  // namespace
}  // namespace loom
