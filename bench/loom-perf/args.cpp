#include "args.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "tools/cli/cli.hpp"

namespace perf {
namespace {

[[noreturn]] void bad(const std::string& why) {
  loom::cli::bad("loom-perf", why);
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
  if (end == s.c_str() || *end != '\0' || v < 0) bad("'" + s + "' is not a size");
  return static_cast<std::size_t>(v * static_cast<double>(mul));
}

// "loom-perf: <what> '<value>'" and the help, exit code 2.
[[noreturn]] void refuse(const CLI::App& app, const char* what, const std::string& value) {
  loom::cli::refuse(app, std::string(what) + " '" + value + "'");
}

Op parse_op(const CLI::App& app, const std::string& name) {
  static const std::pair<const char*, Op> ops[] = {
      {"allreduce", Op::allreduce}, {"reducescatter", Op::reducescatter},
      {"allgather", Op::allgather}, {"broadcast", Op::broadcast},
      {"reduce", Op::reduce},       {"gather", Op::gather},
      {"scatter", Op::scatter},     {"alltoall", Op::alltoall}};
  for (auto& [n, op] : ops)
    if (name == n) return op;
  refuse(app, "unknown op", name);
}

constexpr const char* kFooter =
    "size is the whole buffer: for allgather the output, for reducescatter the input, for\n"
    "gather the root's output, for scatter the root's input, for alltoall each rank's input.";

// The operation, its element type and reduction, and the sweep of sizes.
void declare_sweep(CLI::App& app, Args& a) {
  using loom::cli::option;
  option(app, "-o,--op", "OP",
         "allreduce | reducescatter | allgather | broadcast | reduce | gather | scatter\n"
         "| alltoall (default allreduce)",
         [&](const std::string& v) { a.op = parse_op(app, a.op_name = v); });
  option(app, "-d,--dtype", "TYPE",
         "f32 f64 f16 bf16 i8 u8 i32 u32 i64 u64 (or float32, bfloat16, int32, ...)",
         [&](const std::string& v) {
           const auto t = loom::parse_data_type(v);
           if (!t) refuse(app, "unknown data type", v);
           a.dtype = *t;
         });
  option(app, "-r,--redop", "REDOP", "sum | prod | min | max | avg (default sum)",
         [&](const std::string& v) {
           const auto op = loom::parse_reduce_op(v);
           if (!op) refuse(app, "unknown reduction", v);
           a.redop = *op;
         });
  option(app, "-b,--minbytes", "SIZE", "smallest size in bytes, K/M/G suffixes (default 8)",
         [&](const std::string& v) { a.min_bytes = parse_size(v); });
  option(app, "-e,--maxbytes", "SIZE", "largest size (default 64M)",
         [&](const std::string& v) { a.max_bytes = parse_size(v); });
  option(app, "-f,--stepfactor", "FACTOR", "multiply the size by FACTOR each step (default 2)",
         [&](const std::string& v) { a.factor = std::atof(v.c_str()); });
  option(app, "-i,--stepbytes", "BYTES", "add BYTES each step instead",
         [&](const std::string& v) { a.increment = parse_size(v); });
  option(app, "-R,--root", "ROOT", "root of broadcast, reduce, gather and scatter (default 0)",
         [&](const std::string& v) { a.root = std::atoi(v.c_str()); });
}

// How each size is timed.
void declare_timing(CLI::App& app, Args& a) {
  using loom::cli::option;
  option(app, "-n,--iters", "ITERS", "timed iterations per size (default 20)",
         [&](const std::string& v) { a.iters = std::max(1, std::atoi(v.c_str())); });
  option(app, "-w,--warmup_iters", "ITERS", "warm-up iterations per size (default 5)",
         [&](const std::string& v) { a.warmup = std::max(0, std::atoi(v.c_str())); });
  option(app, "--iter-bytes", "BYTES",
         "fewer calls for larger sizes: each size runs BYTES / size timed\n"
         "calls (at least 1, at most -n) and a tenth of that warm-up (at least 1,\n"
         "at most -w), so one launch can sweep 64 KiB to 256 MiB",
         [&](const std::string& v) { a.iter_bytes = parse_size(v); });
  option(app, "--rounds", "R",
         "(per-op timing) each size's calls in R turns: the sweep runs R times over\n"
         "its sizes, each time a share of every size's timed calls after at least one\n"
         "warm-up; a size's figure is over all its calls. A spell of a slower host then\n"
         "falls on every size alike instead of on the sizes it happens to overlap\n"
         "(default 1: each size once, all its calls together)",
         [&](const std::string& v) {
           a.rounds = std::atoi(v.c_str());
           if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos ||
               a.rounds < 1 || a.rounds > 1000)
             refuse(app, "--rounds is 1-1000, not", v);
         });
  // The last of the two given wins.
  app.add_flag_callback(
         "--per-op", [&] { a.timing = Timing::per_op; },
         "(default) every rank times each call, without barriers; a call's time is its\n"
         "slowest rank's; time(us) is the median over the calls")
      ->trigger_on_parse();
  app.add_flag_callback(
         "--mean", [&] { a.timing = Timing::mean; },
         "a barrier, then time(us) is the slowest rank's mean over the calls")
      ->trigger_on_parse();
}

// Where the buffers are, and what is reported.
void declare_buffers(CLI::App& app, Args& a) {
  using loom::cli::option;
  app.add_flag("--inplace", a.in_place, "run in place (not alltoall)");
  app.add_flag("--fresh-inputs", a.fresh_inputs,
               "before every call (untimed), rewrite each cache line of the input,\n"
               "as a training step writes its gradients (per-op timing, host memory)");
  option(app, "--page-offset", "N",
         "host buffers start N bytes (0-4095) past a page boundary; by default\n"
         "where malloc puts them (16 bytes past one for mapped allocations)",
         [&](const std::string& v) {
           a.page_offset = std::atoi(v.c_str());
           if (v.empty() || v.size() > 4 ||
               v.find_first_not_of("0123456789") != std::string::npos || a.page_offset > 4095)
             refuse(app, "--page-offset is 0-4095, not", v);
         });
  option(app, "--device", "D",
         "host (default) or cuda: buffers in the memory of the local rank's GPU\n"
         "(LOCAL_RANK modulo the visible GPUs), calls ordered on a CUDA stream;\n"
         "or shared: host memory from Communicator::alloc, which the ranks of a\n"
         "host read in place",
         [&](const std::string& d) {
           if (d != "host" && d != "cuda" && d != "shared")
             bad("--device is host, cuda or shared, not '" + d + "'");
           a.cuda = d == "cuda";
           a.shared = d == "shared";
         });
  app.add_flag("-c,--check", a.check, "verify results: count wrong elements (#wrong)");
  app.add_flag("--csv", a.csv, "print CSV rows instead of the table");
  option(app, "--json", "F", "also write the rows to F as JSON",
         [&](const std::string& v) { a.json = v; });
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
  CLI::App app("", "loom-perf");
  loom::cli::set_up(app,
                    "usage: loom-perf [options]   (one process per rank, e.g. loomrun "
                    "--nproc-per-node 4 loom-perf)",
                    kFooter);
  declare_sweep(app, a);
  declare_timing(app, a);
  declare_buffers(app, a);
  loom::cli::parse(app, argc, argv);
  if (a.increment == 0 && a.factor <= 1.0) bad("-f must be above 1 (or use -i)");
  if (a.fresh_inputs && (a.cuda || a.timing != Timing::per_op))
    bad("--fresh-inputs needs host buffers and per-op timing (its rewrite is outside each "
        "call's time)");
  if (a.page_offset >= 0 && (a.cuda || a.shared))
    bad(std::string("--page-offset places host buffers, not --device ") +
        (a.cuda ? "cuda" : "shared") + " ones");
  if (a.rounds > 1 && a.timing != Timing::per_op)
    bad("--rounds needs per-op timing (--mean times calls together)");
  if (a.in_place && a.op == Op::alltoall) bad("alltoall has no in-place form (--inplace)");
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
