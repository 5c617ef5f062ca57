// Baseline: Gloo's all-reduce algorithms on the same sizes loom-perf measures. One process per
// rank (RANK and WORLD_SIZE from the environment, e.g. under loomrun); ranks meet through a Gloo
// FileStore in the directory given by --store. Prints CSV rows: algo,size,time_us,busbw_gbps.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gloo/allreduce.h>
#include <gloo/allreduce_bcube.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

namespace {

int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v) {
    std::fprintf(stderr, "gloo_allreduce: %s is not set\n", name);
    std::exit(2);
  }
  return std::atoi(v);
}

}  // namespace

int main(int argc, char** argv) {
  std::string store_dir, algo = "ring_chunked";
  std::size_t bytes = 8;
  int iters = 20, warmup = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string f = argv[i], v = argv[i + 1];
    if (f == "--store")
      store_dir = v;
    else if (f == "--algo")
      algo = v;
    else if (f == "--bytes")
      bytes = std::strtoull(v.c_str(), nullptr, 10);
    else if (f == "-n")
      iters = std::atoi(v.c_str());
    else if (f == "-w")
      warmup = std::atoi(v.c_str());
    else {
      std::fprintf(
          stderr,
          "usage: gloo_allreduce --store DIR --algo "
          "ring_chunked|halving_doubling|bcube|allreduce_ring --bytes N [-n iters] [-w warmup]\n");
      return 2;
    }
  }
  const int rank = env_int("RANK"), size = env_int("WORLD_SIZE");
  gloo::transport::tcp::attr attr("127.0.0.1");
  auto device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore file_store(store_dir);
  gloo::rendezvous::PrefixStore store(algo, file_store);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->connectFullMesh(store, device);

  const std::size_t count = std::max<std::size_t>(1, bytes / sizeof(float));
  std::vector<float> data(count, 1.0f);
  std::vector<float*> ptrs{data.data()};
  std::unique_ptr<gloo::Algorithm> classic;
  if (algo == "ring_chunked")
    classic =
        std::make_unique<gloo::AllreduceRingChunked<float>>(context, ptrs, static_cast<int>(count));
  else if (algo == "halving_doubling")
    classic = std::make_unique<gloo::AllreduceHalvingDoubling<float>>(context, ptrs,
                                                                      static_cast<int>(count));
  else if (algo == "bcube")
    classic = std::make_unique<gloo::AllreduceBcube<float>>(context, ptrs, static_cast<int>(count));
  else if (algo != "allreduce_ring") {
    std::fprintf(stderr, "gloo_allreduce: unknown algorithm %s\n", algo.c_str());
    return 2;
  }
  auto run = [&] {
    if (classic) {
      classic->run();
      return;
    }
    gloo::AllreduceOptions opts(context);
    opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    opts.setOutput(data.data(), count);
    opts.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    gloo::allreduce(opts);
  };
  for (int i = 0; i < warmup; ++i) run();
  gloo::BarrierAllToAll(context).run();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) run();
  double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
      iters;
  // The slowest rank's time, as loom-perf reports.
  std::vector<double> t{us};
  std::vector<double*> tp{t.data()};
  gloo::AllreduceRing<double>(context, tp, 1, gloo::ReductionFunction<double>::max).run();
  if (rank == 0) {
    double algbw = static_cast<double>(count * sizeof(float)) / (t[0] * 1e-6) / 1e9;
    std::printf("%s,%zu,%.3f,%.4f\n", algo.c_str(), count * sizeof(float), t[0],
                algbw * 2.0 * (size - 1) / size);
  }
  return 0;
}
