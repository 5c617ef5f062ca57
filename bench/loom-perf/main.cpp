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
  int timed_calls;  // the calls the figure is made of (--json)
};

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
      << ",\"busbw_gbps\":" << r.busbw << ",\"wrong\":" << r.wrong
      << ",\"timed_calls\":" << r.timed_calls << "}";
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
      std::string per_size =
          a.iter_bytes ? "up to " + std::to_string(a.iter_bytes) + " bytes of calls per size, "
                       : "";
      if (a.rounds > 1) per_size += "in " + std::to_string(a.rounds) + " turns over the sizes, ";
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

    // One size's call: its buffers and counts.
    struct SizePlan {
      std::size_t bytes, total, count;  // total: elements in the whole buffer; count: the call's
      char* inp;
      char* outp;
      std::size_t input_bytes;  // what this rank's call reads of inp (--fresh-inputs rewrites)
    };
    auto plan_of = [&](std::size_t bytes) {
      const std::size_t total = bytes / elem;
      const std::size_t count = blocked ? total / n : total;
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
      const bool whole_input =
          a.op == Op::reducescatter || a.op == Op::scatter || a.op == Op::alltoall;
      return SizePlan{bytes, total, count, inp, outp, whole_input ? bytes : count * elem};
    };
    auto call_of = [&](const SizePlan& p) {
      return [&a, &comm, stream, p] {
        switch (a.op) {
          case Op::allreduce:
            return comm.all_reduce(p.inp, p.outp, p.count, a.dtype, a.redop, stream);
          case Op::reducescatter:
            return comm.reduce_scatter(p.inp, p.outp, p.count, a.dtype, a.redop, stream);
          case Op::allgather:
            return comm.all_gather(p.inp, p.outp, p.count, a.dtype, stream);
          case Op::broadcast:
            return comm.broadcast(p.inp, p.outp, p.count, a.dtype, a.root, stream);
          case Op::reduce:
            return comm.reduce(p.inp, p.outp, p.count, a.dtype, a.redop, a.root, stream);
          case Op::gather:
            return comm.gather(p.inp, p.outp, p.count, a.dtype, a.root, stream);
          case Op::scatter:
            return comm.scatter(p.inp, p.outp, p.count, a.dtype, a.root, stream);
          case Op::alltoall:
            return comm.all_to_all(p.inp, p.outp, p.count, a.dtype, stream);
        }
      };
    };

    // Each size's timed calls on this rank (per-op timing), or its slowest rank's mean (--mean).
    std::vector<std::vector<double>> call_us(sizes.size());
    std::vector<double> mean_of(sizes.size(), 0.0);
    std::vector<Row> rows;
    // A size's figure from its calls, its check (--check) and its row.
    auto finish = [&](std::size_t k) {
      const SizePlan p = plan_of(sizes[k]);
      double us = mean_of[k];
      int timed_calls = perf::iterations_for(a, p.bytes).timed;
      if (a.timing == Timing::per_op) {
        timed_calls = static_cast<int>(call_us[k].size());
        const std::vector<double>& mine = call_us[k];
        std::vector<double> all(rank == 0 ? mine.size() * static_cast<std::size_t>(n) : 1);
        comm.gather(mine.data(), all.data(), mine.size(), loom::DataType::f64, 0);
        us = rank == 0 ? bench::median_of_slowest(all, n) : 0;
      }
      long long wrong = -1;
      if (a.check) {
        // The checked call's input is rewritten first too: the check covers the rewrite.
        io.run_once = [&a, p, call_once = call_of(p)] {
          if (a.fresh_inputs) bench::rewrite_lines(p.inp, p.input_bytes);
          call_once();
        };
        std::uint64_t w = perf::wrong_elements(a, rank, n, p.inp, p.outp, p.count, io), all = 0;
        comm.all_reduce(&w, &all, 1, loom::DataType::u64, loom::ReduceOp::sum);
        wrong = static_cast<long long>(all);
      }
      const double algbw = us > 0 ? static_cast<double>(p.bytes) / (us * 1e-6) / 1e9 : 0;
      Row row{p.bytes,    blocked ? p.total : p.count, us, algbw, algbw * bus_factor, wrong,
              timed_calls};
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
    };

    for (int round = 0; round < a.rounds; ++round) {
      for (std::size_t k = 0; k < sizes.size(); ++k) {
        const SizePlan p = plan_of(sizes[k]);
        const perf::Iterations turn =
            perf::iterations_in_round(a, perf::iterations_for(a, p.bytes), round);
        if (turn.timed > 0) {
          io.run_once = call_of(p);
          // Timing runs on whatever the buffers hold; prod stays finite because fill() starts
          // each turn from small values, and the check refills.
          io.fill(p.inp, p.input_bytes / elem, rank, 0);
          // --fresh-inputs: the input this rank's call reads, rewritten untimed.
          auto before = [&] {
            if (a.fresh_inputs) bench::rewrite_lines(p.inp, p.input_bytes);
          };
          for (int i = 0; i < turn.warmup; ++i) {
            before();
            io.run_once();
          }
          sync();
          // Per call, a CUDA call's time runs to its stream's completion.
          auto call = [&] {
            io.run_once();
            sync();
          };
          if (a.timing == Timing::per_op) {
            const std::vector<double> us = bench::time_each_call_us(0, turn.timed, call, before);
            call_us[k].insert(call_us[k].end(), us.begin(), us.end());
          } else {
            mean_of[k] = mean_us(comm, turn.timed, io.run_once, sync);
          }
        }
        if (a.rounds == 1) finish(k);
      }
    }
    if (a.rounds > 1)
      for (std::size_t k = 0; k < sizes.size(); ++k) finish(k);
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
