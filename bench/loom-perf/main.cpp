// loom-perf: collective bandwidth and latency over a size sweep, in the manner of nccl-tests.
// Launch one process per rank (loomrun). Rank 0 prints one row per size.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "device.hpp"
#include "loom/loom.hpp"
#include "verify/patterns.hpp"

using loom::verify::count_wrong;
using loom::verify::expected_reduction;
using loom::verify::fill;

namespace {

enum class Op { allreduce, reducescatter, allgather, broadcast, reduce };

struct Args {
  Op op = Op::allreduce;
  std::string op_name = "allreduce";
  loom::DataType dtype = loom::DataType::f32;
  loom::ReduceOp redop = loom::ReduceOp::sum;
  std::size_t min_bytes = 8, max_bytes = 64u << 20;
  double factor = 2;
  std::size_t increment = 0;
  int iters = 20, warmup = 5, root = 0;
  bool check = false, csv = false, in_place = false;
  bool cuda = false;  // --device cuda
  std::string json;
};

[[noreturn]] void usage(int code) {
  std::fprintf(
      code ? stderr : stdout,
      "usage: loom-perf [options]   (one process per rank, e.g. loomrun --nproc-per-node 4 "
      "loom-perf)\n"
      "  -o OP      allreduce | reducescatter | allgather | broadcast | reduce (default "
      "allreduce)\n"
      "  -d TYPE    f32 f64 f16 bf16 i8 u8 i32 u32 i64 u64 (or float32, bfloat16, int32, ...)\n"
      "  -r REDOP   sum | prod | min | max | avg (default sum)\n"
      "  -b SIZE    smallest size in bytes, K/M/G suffixes (default 8)\n"
      "  -e SIZE    largest size (default 64M)\n"
      "  -f FACTOR  multiply the size by FACTOR each step (default 2)\n"
      "  -i BYTES   add BYTES each step instead\n"
      "  -n ITERS   timed iterations per size (default 20)\n"
      "  -w ITERS   warm-up iterations per size (default 5)\n"
      "  -R ROOT    root of broadcast and reduce (default 0)\n"
      "  --inplace  run in place\n"
      "  --device D host (default) or cuda: buffers in the memory of the local rank's GPU\n"
      "             (LOCAL_RANK modulo the visible GPUs), calls ordered on a CUDA stream\n"
      "  -c, --check  verify results: count wrong elements (#wrong)\n"
      "  --csv      print CSV rows instead of the table\n"
      "  --json F   also write the rows to F as JSON\n"
      "size is the whole buffer: for allgather the output, for reducescatter the input.\n");
  std::exit(code);
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
      static const std::pair<const char*, Op> ops[] = {{"allreduce", Op::allreduce},
                                                       {"reducescatter", Op::reducescatter},
                                                       {"allgather", Op::allgather},
                                                       {"broadcast", Op::broadcast},
                                                       {"reduce", Op::reduce}};
      bool found = false;
      for (auto& [name, op] : ops)
        if (a.op_name == name) a.op = op, found = true;
      if (!found) {
        std::fprintf(stderr, "loom-perf: unknown op '%s'\n", a.op_name.c_str());
        usage(2);
      }
    } else if (f == "-d" || f == "--dtype") {
      std::string d = next();
      auto t = loom::parse_data_type(d);
      if (!t) {
        std::fprintf(stderr, "loom-perf: unknown data type '%s'\n", d.c_str());
        usage(2);
      }
      a.dtype = *t;
    } else if (f == "-r" || f == "--redop") {
      std::string r = next();
      auto op = loom::parse_reduce_op(r);
      if (!op) {
        std::fprintf(stderr, "loom-perf: unknown reduction '%s'\n", r.c_str());
        usage(2);
      }
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
    else if (f == "-R" || f == "--root")
      a.root = std::atoi(next().c_str());
    else if (f == "-c" || f == "--check")
      a.check = true;
    else if (f == "--inplace")
      a.in_place = true;
    else if (f == "--device") {
      const std::string d = next();
      if (d != "host" && d != "cuda") {
        std::fprintf(stderr, "loom-perf: --device is host or cuda, not '%s'\n", d.c_str());
        std::exit(2);
      }
      a.cuda = d == "cuda";
    } else if (f == "--csv")
      a.csv = true;
    else if (f == "--json")
      a.json = next();
    else {
      std::fprintf(stderr, "loom-perf: unknown option %s\n", f.c_str());
      usage(2);
    }
  }
  if (a.increment == 0 && a.factor <= 1.0) {
    std::fprintf(stderr, "loom-perf: -f must be above 1 (or use -i)\n");
    std::exit(2);
  }
  return a;
}

struct Row {
  std::size_t bytes, count;
  double time_us, algbw, busbw;
  long long wrong;  // -1 when not checked
};

}  // namespace

int main(int argc, char** argv) {
  Args a = parse(argc, argv);
  try {
    loom::Communicator comm = loom::init();
    const int n = comm.size(), rank = comm.rank();
    if ((a.op == Op::broadcast || a.op == Op::reduce) && (a.root < 0 || a.root >= n)) {
      std::fprintf(stderr, "loom-perf: root %d outside [0, %d)\n", a.root, n);
      return 2;
    }
    const std::size_t elem = loom::size_of(a.dtype);
    const bool split = a.op == Op::allgather || a.op == Op::reducescatter;
    const std::size_t unit = elem * (split ? static_cast<std::size_t>(n) : 1);
    std::vector<std::size_t> sizes;
    for (std::size_t s = a.min_bytes; s <= a.max_bytes;) {
      std::size_t aligned = s / unit * unit;
      if (aligned > 0 && (sizes.empty() || sizes.back() != aligned)) sizes.push_back(aligned);
      std::size_t next =
          a.increment ? s + a.increment
                      : static_cast<std::size_t>(std::ceil(static_cast<double>(s) * a.factor));
      if (next <= s) break;
      s = next;
    }
    const std::size_t max_bytes = sizes.empty() ? 0 : sizes.back();
    // Host buffers, or the staging copies of the device buffers (filled and checked on the host).
    std::vector<char> in(max_bytes + 64), out(max_bytes + 64);
    char* in_base = in.data();
    char* out_base = out.data();
    loom::CudaStream stream = nullptr;
    std::string device_text = "host memory";
    if (a.cuda) {
      if (auto why = perf::device_unavailable(); !why.empty()) {
        std::fprintf(stderr, "loom-perf: --device cuda: %s\n", why.c_str());
        return 2;
      }
      const char* local = std::getenv("LOCAL_RANK");
      const int device = perf::select_device(local ? std::atoi(local) : rank);
      in_base = static_cast<char*>(perf::device_alloc(max_bytes + 64));
      out_base = static_cast<char*>(perf::device_alloc(max_bytes + 64));
      stream = perf::stream_create();
      device_text = "device " + std::to_string(device) + " (" + perf::device_name(device) + ")";
    }
    // Input elements [0, elems) from the host pattern into the call's input.
    auto fill_input = [&](char* dst, std::size_t elems, int pattern_rank, std::size_t first) {
      if (!a.cuda) return fill(dst, elems, pattern_rank, a.dtype, a.redop, first);
      fill(in.data(), elems, pattern_rank, a.dtype, a.redop, first);
      perf::copy_to_device(dst, in.data(), elems * elem);
    };
    // The call's output as host memory.
    auto output = [&](const char* src, std::size_t elems) -> const char* {
      if (!a.cuda) return src;
      perf::stream_sync(stream);
      perf::copy_to_host(out.data(), src, elems * elem);
      return out.data();
    };

    const double bus_factor = a.op == Op::allreduce ? 2.0 * (n - 1) / n
                              : split               ? static_cast<double>(n - 1) / n
                                                    : 1.0;
    if (rank == 0 && !a.csv) {
      std::printf("# loom-perf: %s, %s, %s, %d ranks, %d iterations, %d warm-up, %s\n",
                  a.op_name.c_str(), std::string(loom::to_string(a.dtype)).c_str(),
                  std::string(loom::to_string(a.redop)).c_str(), n, a.iters, a.warmup,
                  a.in_place ? "in place" : "out of place");
      std::printf("# %s; buffers in %s\n", comm.describe().c_str(), device_text.c_str());
      std::printf("#%12s %12s %6s %6s %12s %12s %12s %8s\n", "size(B)", "count", "type", "redop",
                  "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
    }
    if (rank == 0 && a.csv)
      std::printf("size,count,type,redop,time_us,algbw_gbps,busbw_gbps,wrong\n");
    std::fflush(stdout);

    std::vector<Row> rows;
    for (std::size_t bytes : sizes) {
      const std::size_t total = bytes / elem;               // elements in the whole buffer
      const std::size_t count = split ? total / n : total;  // the count argument of the call
      char* inp = in_base;
      char* outp = out_base;
      if (a.in_place) {
        if (a.op == Op::allgather)
          inp = outp + static_cast<std::size_t>(rank) * count * elem;
        else if (a.op == Op::reducescatter)
          outp = inp + static_cast<std::size_t>(rank) * count * elem;
        else
          inp = outp;
      }
      auto run_once = [&] {
        switch (a.op) {
          case Op::allreduce:
            comm.all_reduce(inp, outp, count, a.dtype, a.redop, stream);
            break;
          case Op::reducescatter:
            comm.reduce_scatter(inp, outp, count, a.dtype, a.redop, stream);
            break;
          case Op::allgather:
            comm.all_gather(inp, outp, count, a.dtype, stream);
            break;
          case Op::broadcast:
            comm.broadcast(inp, outp, count, a.dtype, a.root, stream);
            break;
          case Op::reduce:
            comm.reduce(inp, outp, count, a.dtype, a.redop, a.root, stream);
            break;
        }
      };
      // Timing runs on whatever the buffers hold; prod stays finite because fill() starts each
      // size from small values, and the check below refills.
      fill_input(inp, a.op == Op::reducescatter ? total : count, rank, 0);
      for (int i = 0; i < a.warmup; ++i) run_once();
      if (a.cuda) perf::stream_sync(stream);
      comm.barrier();
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < a.iters; ++i) run_once();
      if (a.cuda) perf::stream_sync(stream);
      double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
          a.iters;
      double slowest = us;
      comm.all_reduce(&us, &slowest, 1, loom::DataType::f64, loom::ReduceOp::max);

      long long wrong = -1;
      if (a.check) {
        std::uint64_t w = 0;
        switch (a.op) {
          case Op::allreduce: {
            fill_input(inp, count, rank, 0);
            run_once();
            auto want = expected_reduction(0, count, n, a.dtype, a.redop);
            w = count_wrong(output(outp, count), want.data(), count, a.dtype);
            break;
          }
          case Op::reducescatter: {
            fill_input(inp, total, rank, 0);
            run_once();
            auto want = expected_reduction(static_cast<std::size_t>(rank) * count, count, n,
                                           a.dtype, a.redop);
            w = count_wrong(output(outp, count), want.data(), count, a.dtype);
            break;
          }
          case Op::allgather: {
            // Rank r contributes its pattern for the elements of block r.
            fill_input(inp, count, rank, static_cast<std::size_t>(rank) * count);
            run_once();
            const char* got = output(outp, total);
            std::vector<std::byte> want(count * elem);
            for (int r = 0; r < n; ++r) {
              fill(want.data(), count, r, a.dtype, a.redop, static_cast<std::size_t>(r) * count);
              w += count_wrong(got + static_cast<std::size_t>(r) * count * elem, want.data(), count,
                               a.dtype);
            }
            break;
          }
          case Op::broadcast: {
            fill_input(inp, count, rank, 0);
            run_once();
            std::vector<std::byte> want(count * elem);
            fill(want.data(), count, a.root, a.dtype, a.redop);
            w = count_wrong(output(outp, count), want.data(), count, a.dtype);
            break;
          }
          case Op::reduce: {
            fill_input(inp, count, rank, 0);
            run_once();
            if (rank == a.root) {
              auto want = expected_reduction(0, count, n, a.dtype, a.redop);
              w = count_wrong(output(outp, count), want.data(), count, a.dtype);
            }
            break;
          }
        }
        std::uint64_t all = 0;
        comm.all_reduce(&w, &all, 1, loom::DataType::u64, loom::ReduceOp::sum);
        wrong = static_cast<long long>(all);
      }
      double algbw = static_cast<double>(bytes) / (slowest * 1e-6) / 1e9;
      Row row{bytes, split ? total : count, slowest, algbw, algbw * bus_factor, wrong};
      rows.push_back(row);
      if (rank == 0) {
        const std::string t(loom::to_string(a.dtype)), r(loom::to_string(a.redop));
        if (a.csv)
          std::printf("%zu,%zu,%s,%s,%.3f,%.4f,%.4f,%lld\n", row.bytes, row.count, t.c_str(),
                      r.c_str(), row.time_us, row.algbw, row.busbw, row.wrong);
        else
          std::printf(" %12zu %12zu %6s %6s %12.2f %12.3f %12.3f %8s\n", row.bytes, row.count,
                      t.c_str(), r.c_str(), row.time_us, row.algbw, row.busbw,
                      wrong < 0 ? "N/A" : std::to_string(wrong).c_str());
        std::fflush(stdout);
      }
    }
    long long total_wrong = 0;
    double busbw_sum = 0;
    for (const Row& r : rows) {
      total_wrong += std::max(0LL, r.wrong);
      busbw_sum += r.busbw;
    }
    if (rank == 0) {
      if (!a.csv) {
        std::printf("# out of bounds values : %lld %s\n", total_wrong,
                    total_wrong == 0 ? "OK" : "FAILED");
        std::printf("# avg bus bandwidth    : %.3f GB/s\n",
                    rows.empty() ? 0.0 : busbw_sum / static_cast<double>(rows.size()));
      }
      if (!a.json.empty()) {
        std::ofstream j(a.json);
        j << "{\"op\":\"" << a.op_name << "\",\"type\":\"" << loom::to_string(a.dtype)
          << "\",\"redop\":\"" << loom::to_string(a.redop) << "\",\"ranks\":" << n << ",\"rows\":[";
        for (std::size_t i = 0; i < rows.size(); ++i) {
          const Row& r = rows[i];
          j << (i ? "," : "") << "{\"size\":" << r.bytes << ",\"count\":" << r.count
            << ",\"time_us\":" << r.time_us << ",\"algbw_gbps\":" << r.algbw
            << ",\"busbw_gbps\":" << r.busbw << ",\"wrong\":" << r.wrong << "}";
        }
        j << "]}\n";
      }
    }
    comm.destroy();
    if (a.cuda) {
      perf::stream_destroy(stream);
      perf::device_free(in_base);
      perf::device_free(out_base);
    }
    return total_wrong == 0 ? 0 : 3;
  } catch (const loom::Error& e) {
    std::fprintf(stderr, "loom-perf: %s\n", e.what());
    return 1;
  } catch (const std::runtime_error& e) {  // the device helpers
    std::fprintf(stderr, "loom-perf: %s\n", e.what());
    return 1;
  }
}
