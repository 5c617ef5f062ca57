// loom-perf's output: a table like nccl-tests' (or CSV rows) on rank 0, its summary, and the
// rows as JSON (--json).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "args.hpp"
#include "loom/loom.hpp"

namespace perf {

struct Row {
  std::size_t bytes, count;
  double time_us, algbw, busbw;
  long long wrong;  // -1 when not checked
  int timed_calls;  // the calls the figure is made of (--json)
};

// The header: what runs, how it is timed, on what; and the table's column names.
void print_header(const Args& a, const loom::Communicator& comm, const std::string& buffers);
void print_row(const Args& a, const Row& row);
// The wrong elements and the mean bus bandwidth over the rows.
void print_summary(const Args& a, const std::vector<Row>& rows);
void write_json(const Args& a, int ranks, const std::vector<Row>& rows);

}  // namespace perf
