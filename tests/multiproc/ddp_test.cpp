// DistributedDataParallel in real processes: the same parameters as one process training on the
// whole batch, whatever the bucket sizes and wherever the buckets lie; gradient accumulation under
// no_sync; communication that really overlaps backward; and clear errors for models that differ
// between ranks.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "../support/ranks.hpp"
#include "algorithms/algorithms.hpp"
#include "base/trace_internal.hpp"
#include "loom/ddp/data.hpp"
#include "loom/ddp/ddp.hpp"
#include "loom/ddp/layers.hpp"
#include "loom/ddp/optim.hpp"
#include "loom/trace.hpp"

namespace loom::ddp {
namespace {

using testing::run_ranks;

const std::vector<std::size_t> kWidths{20, 48, 32, 5};
constexpr std::uint64_t kSeed = 11;

std::vector<float> flat_parameters(Module& model) {
  std::vector<float> all;
  for (Parameter* p : model.parameters())
    all.insert(all.end(), p->value.data(), p->value.data() + p->value.numel());
  return all;
}

// One process, batch `batch` per step: the reference the data-parallel runs must reproduce.
std::vector<float> train_alone(const Dataset& data, std::size_t batch, int steps) {
  Sequential model = make_mlp(kWidths, kSeed);
  Sgd sgd(model.parameters(), SgdOptions{0.05, 0.9, 1e-4});
  SoftmaxCrossEntropy ce;
  std::vector<std::size_t> order(data.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  Tensor x;
  std::vector<int> y;
  for (int s = 0; s < steps; ++s) {
    data.batch(order, static_cast<std::size_t>(s) * batch, batch, x, y);
    ce.forward(model.forward(x), y);
    model.backward(ce.backward());
    sgd.step();
    sgd.zero_grad();
  }
  return flat_parameters(model);
}

// Rank r of n takes samples [step*n*b + r*b, +b): together the ranks see the single batch of n*b.
// With accumulate k, each step is k micro-batches of b per rank, the first k-1 under no_sync.
std::vector<float> train_ddp(Communicator& comm, const Dataset& data, std::size_t b, int steps,
                             DdpOptions options, std::size_t accumulate = 1) {
  // Every rank but 0 starts from other values: DDP must broadcast rank 0's.
  Sequential model = make_mlp(kWidths, comm.rank() == 0 ? kSeed : kSeed + 100 + comm.rank());
  DistributedDataParallel ddp(model, comm, options);
  Sgd sgd(model.parameters(), SgdOptions{0.05, 0.9, 1e-4});
  SoftmaxCrossEntropy ce;
  std::vector<std::size_t> order(data.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  const std::size_t n = static_cast<std::size_t>(comm.size()),
                    r = static_cast<std::size_t>(comm.rank());
  Tensor x;
  std::vector<int> y;
  for (int s = 0; s < steps; ++s) {
    for (std::size_t k = 0; k < accumulate; ++k) {
      // Micro-batch k of this step: rank r's slice of the k-th part of the step's samples.
      const std::size_t base = static_cast<std::size_t>(s) * n * b * accumulate + k * n * b;
      data.batch(order, base + r * b, b, x, y);
      std::optional<DistributedDataParallel::NoSync> quiet;
      if (k + 1 < accumulate) quiet.emplace(ddp);
      ce.forward(ddp.forward(x), y);
      ddp.backward(ce.backward(1.0f / static_cast<float>(accumulate)));
      ddp.finalize();
    }
    sgd.step();
    sgd.zero_grad();
  }
  return flat_parameters(model);
}

// Float sums in another order differ in the last bits; after 20 steps of SGD with momentum the
// parameters of a data-parallel run stay within 5e-5 of one process's, relative to
// max(|value|, 1e-3) (measured here: at most 1.5e-5, with 3 ranks).
void expect_close(const std::vector<float>& got, const std::vector<float>& want,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    worst =
        std::max(worst, std::abs(double(got[i]) - want[i]) / (1e-3 + std::abs(double(want[i]))));
  EXPECT_LT(worst, 5e-5) << what << ": worst relative difference " << worst;
}

TEST(Ddp, MatchesOneProcessWithTheWholeBatchForTwoThreeAndFourRanks) {
  for (int world : {2, 3, 4}) {
    SCOPED_TRACE(world);
    run_ranks(world, [](Communicator& comm) {
      const Dataset data = make_teacher_dataset(2048, kWidths.front(), kWidths.back(), 3);
      const std::size_t b = 8, n = static_cast<std::size_t>(comm.size());
      const auto want = train_alone(data, n * b, 20);
      expect_close(train_ddp(comm, data, b, 20, DdpOptions{}), want, "default buckets");
    });
  }
}

TEST(Ddp, BucketSizesAndCompressionAgree) {
  run_ranks(3, [](Communicator& comm) {
    const Dataset data = make_teacher_dataset(1024, kWidths.front(), kWidths.back(), 4);
    const auto want = train_alone(data, 3 * 8, 20);
    for (double mb : {0.01, 1.0, 25.0}) {
      DdpOptions o;
      o.bucket_cap_mb = o.first_bucket_mb = mb;
      expect_close(train_ddp(comm, data, 8, 20, o), want, "bucket " + std::to_string(mb) + " MB");
    }
    // Compressed gradients move away from the f32 result, but only by their rounding.
    for (CommHook hook : {CommHook::fp16, CommHook::bf16}) {
      DdpOptions o;
      o.comm_hook = hook;
      const auto got = train_ddp(comm, data, 8, 20, o);
      double worst = 0;
      for (std::size_t i = 0; i < got.size(); ++i)
        worst = std::max(worst, double(std::abs(got[i] - want[i])));
      EXPECT_LT(worst, hook == CommHook::fp16 ? 1e-3 : 1e-2) << to_string(hook);
      EXPECT_GT(worst, 0.0) << to_string(hook) << " compressed nothing";
    }
  });
}

// The buckets lie in the communicator's shared windows by default: with the all-reduce forced to
// read the peers' buckets in place (which it does only when they are there), training still
// matches one process. When the DDP goes, every gradient moves to memory of its own with its
// values, and the bucket it left is the communicator's to free; private buckets are not.
TEST(Ddp, SharedBucketsAreReadInPlaceAndTheGradientsOutliveTheDdp) {
  for (int world : {2, 3}) {
    SCOPED_TRACE(world);
    testing::RunOptions run;
    run.options.algorithm = "allreduce:direct";
    run_ranks(
        world,
        [](Communicator& comm) {
          const Dataset data = make_teacher_dataset(1024, kWidths.front(), kWidths.back(), 6);
          const std::size_t b = 8, n = static_cast<std::size_t>(comm.size());
          const auto want = train_alone(data, n * b, 20);
          const std::uint64_t before = algorithms::direct_host_calls();
          expect_close(train_ddp(comm, data, b, 20, DdpOptions{}), want, "shared, in place");
          EXPECT_GE(algorithms::direct_host_calls() - before, 20u)
              << "the buckets' all-reduces did not read the peers' buckets in place";
          DdpOptions hooked;
          hooked.comm_hook = CommHook::bf16;  // the compressed copy is what lies in the window
          const auto got = train_ddp(comm, data, b, 20, hooked);
          double worst = 0;
          for (std::size_t i = 0; i < got.size(); ++i)
            worst = std::max(worst, double(std::abs(got[i] - want[i])));
          EXPECT_LT(worst, 1e-2) << "bf16, shared, in place";

          for (bool shared : {true, false}) {
            SCOPED_TRACE(shared ? "shared buckets" : "private buckets");
            Sequential model = make_mlp(kWidths, kSeed);
            const std::vector<Parameter*> params = model.parameters();
            const float* bucket = nullptr;  // the last parameter's gradient opens the first bucket
            std::vector<const float*> inside;  // each gradient's place in its bucket
            std::vector<std::vector<float>> grads;
            {
              DdpOptions o;
              o.shared_buckets = shared;
              DistributedDataParallel ddp(model, comm, o);
              Tensor x;
              std::vector<int> y;
              std::vector<std::size_t> order(data.size());
              for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
              data.batch(order, static_cast<std::size_t>(comm.rank()) * b, b, x, y);
              SoftmaxCrossEntropy ce;
              ce.forward(ddp.forward(x), y);
              ddp.backward(ce.backward());
              ddp.finalize();
              bucket = params.back()->grad.data();
              for (Parameter* p : params) {
                inside.push_back(p->grad.data());
                grads.emplace_back(p->grad.data(), p->grad.data() + p->grad.numel());
              }
            }
            for (std::size_t i = 0; i < params.size(); ++i)
              EXPECT_EQ(params[i]->grad.data() != inside[i], shared)
                  << params[i]->name << (shared ? " is still in its bucket" : " moved");
            if (shared) {
              // Unmapped now: a gradient left in it would fault below.
              EXPECT_NO_THROW(comm.free(const_cast<float*>(bucket)));
            } else {
              EXPECT_THROW(comm.free(const_cast<float*>(bucket)), InvalidArgument);
            }
            for (std::size_t i = 0; i < params.size(); ++i) {
              const Tensor& g = params[i]->grad;
              ASSERT_EQ(g.numel(), grads[i].size());
              EXPECT_TRUE(std::equal(grads[i].begin(), grads[i].end(), g.data()))
                  << params[i]->name << " changed when the DDP went";
            }
          }
        },
        run);
  }
}

// Every parameter's gradient equals `want`'s, bit for bit.
void expect_same_gradients(Module& got, Module& want, const char* when) {
  const auto a = got.parameters(), b = want.parameters();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i]->grad.numel(), b[i]->grad.numel()) << when << ": " << a[i]->name;
    EXPECT_EQ(std::memcmp(a[i]->grad.data(), b[i]->grad.data(), a[i]->grad.numel() * 4), 0)
        << when << ": " << a[i]->name;
  }
}

// The recovery idiom replaces the failed communicator (move assignment destroys it, and the
// memory of its windows went with it) before the DDP leaves it: continue_on then read the
// gradients it releases from unmapped memory (SIGSEGV). The buckets own their memory now. And a
// communicator gone before its DDP leaves the gradients readable, and the DDP goes quietly.
// Both ranks train on the same batch, so the average is the local gradient, exactly.
TEST(Ddp, TheCommunicatorMayGoBeforeTheDdpLeavesIt) {
  run_ranks(2, [](Communicator& comm) {
    const Dataset data = make_teacher_dataset(64, kWidths.front(), kWidths.back(), 8);
    std::vector<std::size_t> order(data.size());
    std::iota(order.begin(), order.end(), 0);
    Tensor x;
    std::vector<int> y;
    data.batch(order, 0, 8, x, y);
    Sequential alone = make_mlp(kWidths, kSeed), model = make_mlp(kWidths, kSeed);
    SoftmaxCrossEntropy ce;
    ce.forward(alone.forward(x), y);
    alone.backward(ce.backward());
    auto pass = [&](DistributedDataParallel& ddp) {
      ce.forward(ddp.forward(x), y);
      ddp.backward(ce.backward());
      ddp.finalize();
    };

    DistributedDataParallel ddp(model, comm);
    pass(ddp);
    expect_same_gradients(model, alone, "before the shrink");
    comm = comm.shrink();  // every rank joins: a new communicator of the same two
    ddp.continue_on(comm);
    pass(ddp);
    expect_same_gradients(model, alone, "after continue_on");

    Sequential other = make_mlp(kWidths, kSeed);
    std::optional<Communicator> child = comm.split(0, comm.rank());
    ASSERT_TRUE(child);
    auto on_child = std::make_unique<DistributedDataParallel>(other, *child);
    pass(*on_child);
    child.reset();  // its windows go; the gradients keep their buckets
    expect_same_gradients(other, alone, "after the communicator went");
    on_child.reset();
    expect_same_gradients(other, alone, "after the DDP went too");
  });
}

TEST(Ddp, NoSyncAccumulationEqualsOneStepOnTheLargerBatch) {
  run_ranks(2, [](Communicator& comm) {
    const Dataset data = make_teacher_dataset(2048, kWidths.front(), kWidths.back(), 5);
    const std::size_t b = 8, k = 3;
    const auto want = train_alone(data, k * 2 * b, 10);
    expect_close(train_ddp(comm, data, b, 10, DdpOptions{}, k), want, "no_sync x3");
  });
}

TEST(Ddp, FirstBucketAllReduceStartsBeforeBackwardEnds) {
  const std::string dir = ::testing::TempDir();
  run_ranks(2, [&dir](Communicator& comm) {
    // Small buckets, one per parameter, and a backward of tens of milliseconds: on 2 cores the
    // communication thread competes with both ranks' compute, and the scheduler may leave it
    // waiting for a few milliseconds before it runs.
    Sequential model = make_mlp({1024, 1024, 1024, 1024, 10}, 1);
    DdpOptions o;
    o.bucket_cap_mb = o.first_bucket_mb = 0.001;
    DistributedDataParallel ddp(model, comm, o);
    base::start_trace(dir + "/overlap-%r.json");
    Tensor x({128, 1024});
    x.fill(0.5f);
    std::vector<int> y(128, 3);
    SoftmaxCrossEntropy ce;
    for (int step = 0; step < 3; ++step) {
      ce.forward(ddp.forward(x), y);
      ddp.backward(ce.backward());
      ddp.finalize();
    }
    // Per step: the span of the whole backward, and the first all-reduce after its start.
    const auto events = trace::events();
    int overlapped = 0, steps = 0;
    for (const auto& e : events) {
      if (e.name != "backward") continue;
      ++steps;
      const std::int64_t end = e.start_us + e.duration_us;
      std::int64_t first = -1;
      for (const auto& c : events)
        if (c.category == "collective" && c.name.rfind("all_reduce", 0) == 0 &&
            c.start_us >= e.start_us && (first < 0 || c.start_us < first))
          first = c.start_us;
      ASSERT_GE(first, 0) << "no all-reduce recorded after backward began";
      overlapped += first < end;
    }
    EXPECT_EQ(steps, 3);
    EXPECT_EQ(overlapped, 3) << "the first bucket's all-reduce did not start during backward";
  });
}

TEST(Ddp, DifferentModelsAcrossRanksAreAnErrorOnEveryRank) {
  run_ranks(3, [](Communicator& comm) {
    Sequential model = make_mlp({10, comm.rank() == 2 ? 17u : 16u, 4}, 1);
    try {
      DistributedDataParallel ddp(model, comm);
      ADD_FAILURE() << "DDP accepted different models";
    } catch (const InvalidArgument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("fc0.weight"), std::string::npos) << what;
      EXPECT_NE(what.find("rank 2"), std::string::npos) << what;
    }
    // Nothing is broken: the communicator still works.
    float v = 1;
    comm.all_reduce(&v, 1, DataType::f32, ReduceOp::sum);
    EXPECT_EQ(v, 3.0f);
  });
}

TEST(Ddp, DifferentOptionsAcrossRanksAreAnErrorOnEveryRank) {
  run_ranks(3, [](Communicator& comm) {
    Sequential model = make_mlp({10, 16, 4}, 1);
    // Each would make other buckets, and other collective calls, on rank 1.
    for (int which = 0; which < 4; ++which) {
      DdpOptions o;
      if (comm.rank() == 1) {
        if (which == 0) o.bucket_cap_mb = 0.5;
        if (which == 1) o.first_bucket_mb = 0.001;
        if (which == 2) o.comm_hook = CommHook::fp16;
        if (which == 3) o.shared_buckets = false;
      }
      const char* names[] = {"bucket_cap_mb", "first_bucket_mb", "comm_hook", "shared_buckets"};
      try {
        DistributedDataParallel ddp(model, comm, o);
        ADD_FAILURE() << "DDP accepted different " << names[which];
      } catch (const InvalidArgument& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find(names[which]), std::string::npos) << what;
        EXPECT_NE(what.find("rank 1"), std::string::npos) << what;
      }
    }
    float v = 1;
    comm.all_reduce(&v, 1, DataType::f32, ReduceOp::sum);
    EXPECT_EQ(v, 3.0f);
  });
}

TEST(Ddp, BackwardAgainBeforeFinalizeIsRefused) {
  run_ranks(2, [](Communicator& comm) {
    Sequential model = make_mlp({4, 3}, 1);
    DistributedDataParallel ddp(model, comm);
    Tensor x({2, 4});
    Tensor g({2, 3});
    g.fill(1);
    ddp.forward(x);
    ddp.backward(g);
    EXPECT_THROW(ddp.backward(g), InvalidArgument);
    ddp.finalize();
    ddp.forward(x);
    ddp.backward(g);
    ddp.finalize();
  });
}

}  // namespace
}  // namespace loom::ddp
