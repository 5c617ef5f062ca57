#include "args.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>

namespace perf {
namespace {

[[noreturn]] void usage(int code) {
  std::fprintf(
      code ? stderr : stdout,
      "usage: loom-perf [options]   (one process per rank, e.g. loomrun --nproc-per-node 4 "
      "loom-perf)\n"
      "  -o OP      allreduce | reducescatter | allgather | broadcast | reduce | gather | scatter\n"
      "             | alltoall (default allreduce)\n"
      "  -d TYPE    f32 f64 f16 bf16 i8 u8 i32 u32 i64 u64 (or float32, bfloat16, int32, ...)\n"
      "  -r REDOP   sum | prod | min | max | avg (default sum)\n"
      "  -b SIZE    smallest size in bytes, K/M/G suffixes (default 8)\n"
      "  -e SIZE    largest size (default 64M)\n"
      "  -f FACTOR  multiply the size by FACTOR each step (default 2)\n"
      "  -i BYTES   add BYTES each step instead\n"
      "  -n ITERS   timed iterations per size (default 20)\n"
      "  -w ITERS   warm-up iterations per size (default 5)\n"
      "  --iter-bytes BYTES  fewer calls for larger sizes: each size runs BYTES / size timed\n"
      "             calls (at least 1, at most -n) and a tenth of that warm-up (at least 1,\n"
      "             at most -w), so one launch can sweep 64 KiB to 256 MiB\n"
      "  --rounds R  (per-op timing) each size's calls in R turns: the sweep runs R times over\n"
      "             its sizes, each time a share of every size's timed calls after at least one\n"
      "             warm-up; a size's figure is over all its calls. A spell of a slower host then\n"
      "             falls on every size alike instead of on the sizes it happens to overlap\n"
      "             (default 1: each size once, all its calls together)\n"
      "  -R ROOT    root of broadcast, reduce, gather and scatter (default 0)\n"
      "  --per-op   (default) every rank times each call, without barriers; a call's time is its\n"
      "             slowest rank's; time(us) is the median over the calls\n"
      "  --mean     a barrier, then time(us) is the slowest rank's mean over the calls\n"
      "  --inplace  run in place (not alltoall)\n"
      "  --fresh-inputs  before every call (untimed), rewrite each cache line of the input,\n"
      "             as a training step writes its gradients (per-op timing, host memory)\n"
      "  --page-offset N  host buffers start N bytes (0-4095) past a page boundary; by default\n"
      "             where malloc puts them (16 bytes past one for mapped allocations)\n"
      "  --device D host (default) or cuda: buffers in the memory of the local rank's GPU\n"
      "             (LOCAL_RANK modulo the visible GPUs), calls ordered on a CUDA stream;\n"
      "             or shared: host memory from Communicator::alloc, which the ranks of a\n"
      "             host read in place\n"
      "  -c, --check  verify results: count wrong elements (#wrong)\n"
      "  --csv      print CSV rows instead of the table\n"
      "  --json F   also write the rows to F as JSON\n"
      "size is the whole buffer: for allgather the output, for reducescatter the input, for\n"
      "gather the root's output, for scatter the root's input, for alltoall each rank's input.\n");
  std::exit(code);
}

[[noreturn]] void refuse(const char* what, const std::string& value) {
  std::fprintf(stderr, "loom-perf: %s '%s'\n", what, value.c_str());
  usage(2);
}

std::size_t parse_size(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  std::size_t mul = 1;
  if (*end == 'K' || *end == 'k')
    mul = 1u << 10, ++end;
  else if (*end == 'M' || *end == 'm')
    mul = 1u << 20, ++end;
  else if (*end == 'G' || *end == 'g')
    mul = 1u << 30, ++end;
  if (end == s.c_str() || *end != '\0' || v < 0) {
    std::fprintf(stderr, "loom-perf: '%s' is not a size\n", s.c_str());
    std::exit(2);
  }
  return static_cast<std::size_t>(v * static_cast<double>(mul));
}

Op parse_op(const std::string& name) {
  static const std::pair<const char*, Op> ops[] = {
      {"allreduce", Op::allreduce}, {"reducescatter", Op::reducescatter},
      {"allgather", Op::allgather}, {"broadcast", Op::broadcast},
      {"reduce", Op::reduce},       {"gather", Op::gather},
      {"scatter", Op::scatter},     {"alltoall", Op::alltoall}};
  for (auto& [n, op] : ops)
    if (name == n) return op;
  refuse("unknown op", name);
}

}  // namespace

bool rooted(Op op) {
  return op == Op::broadcast || op == Op::reduce || op == Op::gather || op == Op::scatter;
}

bool blocked(Op op) {
  return op == Op::allgather || op == Op::reducescatter || op == Op::gather || op == Op::scatter ||
         op == Op::alltoall;
}

double bus_factor(Op op, int ranks) {
  const double n = ranks;
  if (op == Op::allreduce) return 2.0 * (n - 1) / n;
  return blocked(op) ? (n - 1) / n : 1.0;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string f = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "loom-perf: %s needs a value\n", f.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (f == "-h" || f == "--help")
      usage(0);
    else if (f == "-o" || f == "--op") {
      a.op_name = next();
      a.op = parse_op(a.op_name);
    } else if (f == "-d" || f == "--dtype") {
      std::string d = next();
      auto t = loom::parse_data_type(d);
      if (!t) refuse("unknown data type", d);
      a.dtype = *t;
    } else if (f == "-r" || f == "--redop") {
      std::string r = next();
      auto op = loom::parse_reduce_op(r);
      if (!op) refuse("unknown reduction", r);
      a.redop = *op;
    } else if (f == "-b" || f == "--minbytes")
      a.min_bytes = parse_size(next());
    else if (f == "-e" || f == "--maxbytes")
      a.max_bytes = parse_size(next());
    else if (f == "-f" || f == "--stepfactor")
      a.factor = std::atof(next().c_str());
    else if (f == "-i" || f == "--stepbytes")
      a.increment = parse_size(next());
    else if (f == "-n" || f == "--iters")
      a.iters = std::max(1, std::atoi(next().c_str()));
    else if (f == "-w" || f == "--warmup_iters")
      a.warmup = std::max(0, std::atoi(next().c_str()));
    else if (f == "--iter-bytes")
      a.iter_bytes = parse_size(next());
    else if (f == "--rounds") {
      const std::string v = next();
      a.rounds = std::atoi(v.c_str());
      if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos || a.rounds < 1 ||
          a.rounds > 1000)
        refuse("--rounds is 1-1000, not", v);
    } else if (f == "-R" || f == "--root")
      a.root = std::atoi(next().c_str());
    else if (f == "--per-op")
      a.timing = Timing::per_op;
    else if (f == "--mean")
      a.timing = Timing::mean;
    else if (f == "-c" || f == "--check")
      a.check = true;
    else if (f == "--inplace")
      a.in_place = true;
    else if (f == "--fresh-inputs")
      a.fresh_inputs = true;
    else if (f == "--page-offset") {
      const std::string v = next();
      a.page_offset = std::atoi(v.c_str());
      if (v.empty() || v.size() > 4 || v.find_first_not_of("0123456789") != std::string::npos ||
          a.page_offset > 4095)
        refuse("--page-offset is 0-4095, not", v);
    } else if (f == "--device") {
      const std::string d = next();
      if (d != "host" && d != "cuda" && d != "shared") {
        std::fprintf(stderr, "loom-perf: --device is host, cuda or shared, not '%s'\n", d.c_str());
        std::exit(2);
      }
      a.cuda = d == "cuda";
      a.shared = d == "shared";
    } else if (f == "--csv")
      a.csv = true;
    else if (f == "--json")
      a.json = next();
    else
      refuse("unknown option", f);
  }
  if (a.increment == 0 && a.factor <= 1.0) {
    std::fprintf(stderr, "loom-perf: -f must be above 1 (or use -i)\n");
    std::exit(2);
  }
  if (a.fresh_inputs && (a.cuda || a.timing != Timing::per_op)) {
    std::fprintf(stderr,
                 "loom-perf: --fresh-inputs needs host buffers and per-op timing (its rewrite "
                 "is outside each call's time)\n");
    std::exit(2);
  }
  if (a.page_offset >= 0 && (a.cuda || a.shared)) {
    std::fprintf(stderr, "loom-perf: --page-offset places host buffers, not --device %s ones\n",
                 a.cuda ? "cuda" : "shared");
    std::exit(2);
  }
  if (a.rounds > 1 && a.timing != Timing::per_op) {
    std::fprintf(stderr, "loom-perf: --rounds needs per-op timing (--mean times calls together)\n");
    std::exit(2);
  }
  if (a.in_place && a.op == Op::alltoall) {
    std::fprintf(stderr, "loom-perf: alltoall has no in-place form (--inplace)\n");
    std::exit(2);
  }
  return a;
}

Iterations iterations_for(const Args& a, std::size_t bytes) {
  if (a.iter_bytes == 0 || bytes == 0) return {a.iters, a.warmup};
  const auto fit = static_cast<long long>(a.iter_bytes / bytes);
  const int timed = static_cast<int>(std::clamp<long long>(fit, 1, a.iters));
  return {timed, std::clamp(timed / 10, std::min(1, a.warmup), a.warmup)};
}

Iterations iterations_in_round(const Args& a, const Iterations& runs, int round) {
  if (a.rounds <= 1) return runs;
  const int timed = runs.timed / a.rounds + (round < runs.timed % a.rounds ? 1 : 0);
  // The first turn warms up as a sweep without turns does; a later one finds the caches and the
  // connections as the other sizes left them.
  const int warmup = round == 0 ? runs.warmup : std::max(1, runs.warmup / a.rounds);
  return {timed, timed == 0 ? 0 : warmup};
}

}  // namespace perf
