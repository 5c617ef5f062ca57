// Gloo's side of the comparison: one collective at one size, timed by the method of per_op.hpp.
// One process per rank (RANK and WORLD_SIZE from the environment, e.g. under loomrun); ranks meet
// through a Gloo FileStore in the directory given by --store, and talk over TCP on loopback, or on
// the address given by --host (a test-bed node's; Gloo has no shared-memory transport). Prints one
// CSV row on rank 0:
//   gloo:<algo>,<op>,<ranks>,<bytes>,<time_us>,<busbw_gbps>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <gloo/allreduce.h>
#include <gloo/allreduce_bcube.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/gather.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include "per_op.hpp"

namespace {

constexpr const char* kUsage =
    "usage: gloo_bench --store DIR [--op allreduce|alltoall] [--algo ALGO] --bytes N [-n iters]\n"
    "                  [-w warmup] [--fresh-inputs] [--host ADDR]\n"
    "  allreduce ALGO: ring | ring_chunked | halving_doubling | bcube (the classic algorithms)\n"
    "                  | allreduce_ring | allreduce_bcube (gloo::allreduce, as torch uses it)\n"
    "  alltoall  ALGO: alltoall (gloo::alltoall)\n"
    "  bytes: the whole buffer (alltoall: each rank's input of WORLD_SIZE blocks)\n"
    "  --fresh-inputs: rewrite the input's cache lines before every call, untimed\n"
    "  --host: the address this rank listens on and is reached at (default 127.0.0.1)\n";

int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v) {
    std::fprintf(stderr, "gloo_bench: %s is not set\n", name);
    std::exit(2);
  }
  return std::atoi(v);
}

using Context = std::shared_ptr<gloo::rendezvous::Context>;
using Call = std::function<void()>;

// f32 sum all-reduce of data by the algorithm named algo (empty when there is none of that name).
Call allreduce(const Context& context, const std::string& algo, std::vector<float>& data) {
  std::vector<float*> ptrs{data.data()};
  const int count = static_cast<int>(data.size());
  std::shared_ptr<gloo::Algorithm> classic;
  if (algo == "ring")
    classic = std::make_shared<gloo::AllreduceRing<float>>(context, ptrs, count);
  else if (algo == "ring_chunked")
    classic = std::make_shared<gloo::AllreduceRingChunked<float>>(context, ptrs, count);
  else if (algo == "halving_doubling")
    classic = std::make_shared<gloo::AllreduceHalvingDoubling<float>>(context, ptrs, count);
  else if (algo == "bcube")
    classic = std::make_shared<gloo::AllreduceBcube<float>>(context, ptrs, count);
  if (classic) return [classic] { classic->run(); };
  using Algorithm = gloo::AllreduceOptions::Algorithm;
  Algorithm which;
  if (algo == "allreduce_ring")
    which = Algorithm::RING;
  else if (algo == "allreduce_bcube")
    which = Algorithm::BCUBE;
  else
    return {};
  auto opts = std::make_shared<gloo::AllreduceOptions>(context);
  opts->setAlgorithm(which);
  opts->setOutput(data.data(), data.size());
  opts->setReduceFunction(
      static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
  return [opts] { gloo::allreduce(*opts); };
}

}  // namespace

int main(int argc, char** argv) {
  std::string store_dir, op = "allreduce", algo, host = "127.0.0.1";
  std::size_t bytes = 8;
  int iters = 20, warmup = 5;
  bool fresh = false;
  for (int i = 1; i < argc; i += 2) {
    const std::string f = argv[i];
    if (f == "--fresh-inputs") {
      fresh = true;
      --i;  // a flag without a value
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "gloo_bench: %s needs a value\n%s", f.c_str(), kUsage);
      return 2;
    }
    const std::string v = argv[i + 1];
    if (f == "--store")
      store_dir = v;
    else if (f == "--op")
      op = v;
    else if (f == "--algo")
      algo = v;
    else if (f == "--host")
      host = v;
    else if (f == "--bytes")
      bytes = std::strtoull(v.c_str(), nullptr, 10);
    else if (f == "-n")
      iters = std::max(1, std::atoi(v.c_str()));
    else if (f == "-w")
      warmup = std::max(0, std::atoi(v.c_str()));
    else {
      std::fprintf(stderr, "gloo_bench: unknown option %s\n%s", f.c_str(), kUsage);
      return 2;
    }
  }
  if (store_dir.empty() || (op != "allreduce" && op != "alltoall")) {
    std::fprintf(stderr, "%s", kUsage);
    return 2;
  }
  if (algo.empty()) algo = op == "alltoall" ? "alltoall" : "ring";
  const int rank = env_int("RANK"), size = env_int("WORLD_SIZE");
  gloo::transport::tcp::attr attr(host.c_str());
  auto device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore file_store(store_dir);
  gloo::rendezvous::PrefixStore store(op + "." + algo, file_store);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->connectFullMesh(store, device);

  // The buffer's elements: alltoall's are whole blocks, one per rank.
  const std::size_t unit = op == "alltoall" ? static_cast<std::size_t>(size) : 1;
  const std::size_t count = std::max<std::size_t>(1, bytes / sizeof(float) / unit) * unit;
  std::vector<float> in(count, 1.0f), out(count, 0.0f);
  Call call;
  double factor = 2.0 * (size - 1) / size;
  if (op == "allreduce") {
    call = allreduce(context, algo, out);
  } else if (algo == "alltoall") {
    auto opts = std::make_shared<gloo::AlltoallOptions>(context);
    opts->setInput(in.data(), count);
    opts->setOutput(out.data(), count);
    call = [opts] { gloo::alltoall(*opts); };
    factor = static_cast<double>(size - 1) / size;
  }
  if (!call) {
    std::fprintf(stderr, "gloo_bench: no %s algorithm %s\n%s", op.c_str(), algo.c_str(), kUsage);
    return 2;
  }

  // The all-reduce runs in place on `out`; the all-to-all reads `in`.
  float* input = op == "allreduce" ? out.data() : in.data();
  std::vector<double> mine = bench::time_each_call_us(warmup, iters, call, [&] {
    if (fresh) bench::rewrite_lines(input, count * sizeof(float));
  });
  std::vector<double> all(mine.size() * static_cast<std::size_t>(size));
  gloo::GatherOptions gather(context);
  gather.setInput(mine.data(), mine.size());
  if (rank == 0) gather.setOutput(all.data(), all.size());
  gather.setRoot(0);
  gloo::gather(gather);
  // No rank leaves while another may still read from it: a rank that exits with bytes unread in
  // its sockets resets them, and a peer still finishing its last call fails with "Connection
  // closed by peer" (seen across the test bed's shaped links, where ranks finish far apart).
  gloo::BarrierOptions leave(context);
  gloo::barrier(leave);
  if (rank == 0) {
    const double us = bench::median_of_slowest(all, size);
    const double b = static_cast<double>(count * sizeof(float));
    std::printf("gloo:%s,%s,%d,%.0f,%.3f,%.4f\n", algo.c_str(), op.c_str(), size, b, us,
                bench::busbw_gbps(b, us, factor));
  }
  return 0;
}
