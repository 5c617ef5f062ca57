// A communicator's lifetime against the threads that use it: destroy() and abort() from a
// watchdog thread while a call runs, and a constructor that fails after its setup.
#include <gtest/gtest.h>

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
