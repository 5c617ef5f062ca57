// loom-perf: collective bandwidth and latency over a size sweep, in the manner of nccl-tests.
// Launch one process per rank (loomrun). Rank 0 prints one row per size.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "../compare/per_op.hpp"
#include "args.hpp"
#include "check.hpp"
#include "device.hpp"
#include "loom/loom.hpp"
#include "verify/patterns.hpp"

using perf::Args;
using perf::Op;
using perf::Timing;

namespace {

struct Row {
  std::size_t bytes, count;
  double time_us, algbw, busbw;
  long long wrong;  // -1 when not checked
};

// The comparison's method (bench/compare/per_op.hpp): every rank times each call, no barriers;
// rank 0 gathers the arrays and returns the median of each call's slowest rank (0 elsewhere).
template <typename Call, typename Before>
double per_op_median_us(loom::Communicator& comm, int iters, Call call, Before before) {
  const std::vector<double> mine = bench::time_each_call_us(0, iters, call, before);
  std::vector<double> all(comm.rank() == 0 ? mine.size() * static_cast<std::size_t>(comm.size())
                                           : 1);
  comm.gather(mine.data(), all.data(), mine.size(), loom::DataType::f64, 0);
  return comm.rank() == 0 ? bench::median_of_slowest(all, comm.size()) : 0;
}

// A barrier, then the calls back to back; the slowest rank's mean.
template <typename Call, typename Sync>
double mean_us(loom::Communicator& comm, int iters, Call call, Sync sync) {
  using Clock = std::chrono::steady_clock;
  comm.barrier();
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) call();
  sync();
  double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / iters;
  double slowest = us;
  comm.all_reduce(&us, &slowest, 1, loom::DataType::f64, loom::ReduceOp::max);
  return slowest;
}

std::vector<std::size_t> sweep(const Args& a, std::size_t unit) {
  std::vector<std::size_t> sizes;
  for (std::size_t s = a.min_bytes; s <= a.max_bytes;) {
    std::size_t aligned = s / unit * unit;
    if (aligned > 0 && (sizes.empty() || sizes.back() != aligned)) sizes.push_back(aligned);
    std::size_t next = a.increment
                           ? s + a.increment
                           : static_cast<std::size_t>(std::ceil(static_cast<double>(s) * a.factor));
    if (next <= s) break;
    s = next;
  }
  return sizes;
}

void write_json(const Args& a, int n, const std::vector<Row>& rows) {
  std::ofstream j(a.json);
  j << "{\"op\":\"" << a.op_name << "\",\"type\":\"" << loom::to_string(a.dtype)
    << "\",\"redop\":\"" << loom::to_string(a.redop) << "\",\"ranks\":" << n << ",\"timing\":\""
    << (a.timing == Timing::per_op ? "per-op median" : "mean") << "\",\"rows\":[";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    j << (i ? "," : "") << "{\"size\":" << r.bytes << ",\"count\":" << r.count
      << ",\"time_us\":" << r.time_us << ",\"algbw_gbps\":" << r.algbw
      << ",\"busbw_gbps\":" << r.busbw << ",\"wrong\":" << r.wrong << "}";
  }
  j << "]}\n";
}

}  // namespace

int main(int argc, char** argv) {
  Args a = perf::parse(argc, argv);
  try {
    loom::Communicator comm = loom::init();
    const int n = comm.size(), rank = comm.rank();
    if (perf::rooted(a.op) && (a.root < 0 || a.root >= n)) {
      std::fprintf(stderr, "loom-perf: root %d outside [0, %d)\n", a.root, n);
      return 2;
    }
    const std::size_t elem = loom::size_of(a.dtype);
    const bool blocked = perf::blocked(a.op);
    const std::vector<std::size_t> sizes =
        sweep(a, elem * (blocked ? static_cast<std::size_t>(n) : 1));
    const std::size_t max_bytes = sizes.empty() ? 0 : sizes.back();
    // Host buffers, or the staging copies of the device buffers (filled and checked on the host).
    // --page-offset: room to move each buffer to that offset past a page start.
    constexpr std::uintptr_t kPage = 4096;
    const std::size_t room = a.page_offset < 0 ? 0 : 2 * kPage;
    std::vector<char> in(max_bytes + 64 + room), out(max_bytes + 64 + room);
    auto placed = [&](std::vector<char>& v) {
      if (a.page_offset < 0) return v.data();
      const auto page = (reinterpret_cast<std::uintptr_t>(v.data()) + kPage - 1) & ~(kPage - 1);
      return reinterpret_cast<char*>(page) + a.page_offset;
    };
    char* in_base = placed(in);
    char* out_base = placed(out);
    loom::CudaStream stream = nullptr;
    std::string device_text = "host memory";
    if (a.shared) {
      in_base = static_cast<char*>(comm.alloc(max_bytes + 64));
      out_base = static_cast<char*>(comm.alloc(max_bytes + 64));
      device_text = "host memory shared by the host's ranks (Communicator::alloc)";
    }
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
    perf::CheckIo io;
    io.fill = [&](char* dst, std::size_t elems, int pattern_rank, std::size_t first) {
      if (!a.cuda) return loom::verify::fill(dst, elems, pattern_rank, a.dtype, a.redop, first);
      loom::verify::fill(in.data(), elems, pattern_rank, a.dtype, a.redop, first);
      perf::copy_to_device(dst, in.data(), elems * elem);
    };
    io.output = [&](const char* src, std::size_t elems) -> const char* {
      if (!a.cuda) return src;
      perf::stream_sync(stream);
      perf::copy_to_host(out.data(), src, elems * elem);
      return out.data();
    };
    auto sync = [&] {
      if (a.cuda) perf::stream_sync(stream);
    };

    const double bus_factor = perf::bus_factor(a.op, n);
    const char* timing = a.timing == Timing::per_op ? "median over calls of the slowest rank"
                                                    : "slowest rank's mean";
    if (rank == 0 && !a.csv) {
      const std::string per_size =
          a.iter_bytes ? "up to " + std::to_string(a.iter_bytes) + " bytes of calls per size, "
                       : "";
      std::printf(
          "# loom-perf: %s, %s, %s, %d ranks, %s%s%d iterations, %d warm-up, %s; time: %s\n",
          a.op_name.c_str(), std::string(loom::to_string(a.dtype)).c_str(),
          std::string(loom::to_string(a.redop)).c_str(), n, per_size.c_str(),
          a.iter_bytes ? "at most " : "", a.iters, a.warmup,
          a.in_place ? "in place" : "out of place", timing);
      std::printf("# %s; buffers in %s\n", comm.describe().c_str(), device_text.c_str());
      std::printf("#%12s %12s %6s %6s %12s %12s %12s %8s\n", "size(B)", "count", "type", "redop",
                  "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
    }
    if (rank == 0 && a.csv)
      std::printf("size,count,type,redop,time_us,algbw_gbps,busbw_gbps,wrong\n");
    std::fflush(stdout);

    std::vector<Row> rows;
    for (std::size_t bytes : sizes) {
      const std::size_t total = bytes / elem;                 // elements in the whole buffer
      const std::size_t count = blocked ? total / n : total;  // the count argument of the call
      const std::size_t block_bytes = count * elem;
      char* inp = in_base;
      char* outp = out_base;
      if (a.in_place) {
        if (a.op == Op::allgather)
          inp = outp + static_cast<std::size_t>(rank) * block_bytes;
        else if (a.op == Op::reducescatter)
          outp = inp + static_cast<std::size_t>(rank) * block_bytes;
        else if (a.op == Op::gather)
          inp = rank == a.root ? outp + static_cast<std::size_t>(rank) * block_bytes : inp;
        else if (a.op == Op::scatter)
          outp = rank == a.root ? inp + static_cast<std::size_t>(rank) * block_bytes : outp;
        else
          inp = outp;
      }
      io.run_once = [&] {
        switch (a.op) {
          case Op::allreduce:
            return comm.all_reduce(inp, outp, count, a.dtype, a.redop, stream);
          case Op::reducescatter:
            return comm.reduce_scatter(inp, outp, count, a.dtype, a.redop, stream);
          case Op::allgather:
            return comm.all_gather(inp, outp, count, a.dtype, stream);
          case Op::broadcast:
            return comm.broadcast(inp, outp, count, a.dtype, a.root, stream);
          case Op::reduce:
            return comm.reduce(inp, outp, count, a.dtype, a.redop, a.root, stream);
          case Op::gather:
            return comm.gather(inp, outp, count, a.dtype, a.root, stream);
          case Op::scatter:
            return comm.scatter(inp, outp, count, a.dtype, a.root, stream);
          case Op::alltoall:
            return comm.all_to_all(inp, outp, count, a.dtype, stream);
        }
      };
      // Timing runs on whatever the buffers hold; prod stays finite because fill() starts each
      // size from small values, and the check below refills.
      const bool whole_input =
          a.op == Op::reducescatter || a.op == Op::scatter || a.op == Op::alltoall;
      io.fill(inp, whole_input ? total : count, rank, 0);
      // --fresh-inputs: the input this rank's call reads, rewritten untimed.
      const std::size_t input_bytes = whole_input ? bytes : count * elem;
      auto before = [&] {
        if (a.fresh_inputs) bench::rewrite_lines(inp, input_bytes);
      };
      const perf::Iterations runs = perf::iterations_for(a, bytes);
      for (int i = 0; i < runs.warmup; ++i) {
        before();
        io.run_once();
      }
      sync();
      // Per call, a CUDA call's time runs to its stream's completion.
      auto call = [&] {
        io.run_once();
        sync();
      };
      const double us = a.timing == Timing::per_op
                            ? per_op_median_us(comm, runs.timed, call, before)
                            : mean_us(comm, runs.timed, io.run_once, sync);

      long long wrong = -1;
      if (a.check) {
        // The checked call's input is rewritten first too: the check covers the rewrite.
        io.run_once = [&, call_once = io.run_once] {
          before();
          call_once();
        };
        std::uint64_t w = perf::wrong_elements(a, rank, n, inp, outp, count, io), all = 0;
        comm.all_reduce(&w, &all, 1, loom::DataType::u64, loom::ReduceOp::sum);
        wrong = static_cast<long long>(all);
      }
      const double algbw = us > 0 ? static_cast<double>(bytes) / (us * 1e-6) / 1e9 : 0;
      Row row{bytes, blocked ? total : count, us, algbw, algbw * bus_factor, wrong};
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
      if (!a.json.empty()) write_json(a, n, rows);
    }
    if (a.shared) {
      comm.free(out_base);
      comm.free(in_base);
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
