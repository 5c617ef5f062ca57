#include "report.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>

namespace perf {

void print_header(const Args& a, const loom::Communicator& comm, const std::string& buffers) {
  if (a.csv) {
    std::printf("size,count,type,redop,time_us,algbw_gbps,busbw_gbps,wrong\n");
    return;
  }
  const char* timing =
      a.timing == Timing::per_op ? "median over calls of the slowest rank" : "slowest rank's mean";
  std::string per_size =
      a.iter_bytes ? "up to " + std::to_string(a.iter_bytes) + " bytes of calls per size, " : "";
  if (a.rounds > 1) per_size += "in " + std::to_string(a.rounds) + " turns over the sizes, ";
  std::printf("# loom-perf: %s, %s, %s, %d ranks, %s%s%d iterations, %d warm-up, %s; time: %s\n",
              a.op_name.c_str(), std::string(loom::to_string(a.dtype)).c_str(),
              std::string(loom::to_string(a.redop)).c_str(), comm.size(), per_size.c_str(),
              a.iter_bytes ? "at most " : "", a.iters, a.warmup,
              a.in_place ? "in place" : "out of place", timing);
  std::printf("# %s; buffers in %s\n", comm.describe().c_str(), buffers.c_str());
  std::printf("#%12s %12s %6s %6s %12s %12s %12s %8s\n", "size(B)", "count", "type", "redop",
              "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
}

void print_row(const Args& a, const Row& row) {
  const std::string t(loom::to_string(a.dtype)), r(loom::to_string(a.redop));
  if (a.csv)
    std::printf("%zu,%zu,%s,%s,%.3f,%.4f,%.4f,%lld\n", row.bytes, row.count, t.c_str(), r.c_str(),
                row.time_us, row.algbw, row.busbw, row.wrong);
  else
    std::printf(" %12zu %12zu %6s %6s %12.2f %12.3f %12.3f %8s\n", row.bytes, row.count, t.c_str(),
                r.c_str(), row.time_us, row.algbw, row.busbw,
                row.wrong < 0 ? "N/A" : std::to_string(row.wrong).c_str());
  std::fflush(stdout);
}

void print_summary(const Args& a, const std::vector<Row>& rows) {
  if (a.csv) return;
  long long wrong = 0;
  double busbw_sum = 0;
  for (const Row& r : rows) {
    wrong += std::max(0LL, r.wrong);
    busbw_sum += r.busbw;
  }
  std::printf("# out of bounds values : %lld %s\n", wrong, wrong == 0 ? "OK" : "FAILED");
  std::printf("# avg bus bandwidth    : %.3f GB/s\n",
              rows.empty() ? 0.0 : busbw_sum / static_cast<double>(rows.size()));
}

void write_json(const Args& a, int ranks, const std::vector<Row>& rows) {
  std::ofstream j(a.json);
  j << "{\"op\":\"" << a.op_name << "\",\"type\":\"" << loom::to_string(a.dtype)
    << "\",\"redop\":\"" << loom::to_string(a.redop) << "\",\"ranks\":" << ranks << ",\"timing\":\""
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

}  // namespace perf
