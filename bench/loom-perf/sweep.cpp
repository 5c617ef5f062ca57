#include "sweep.hpp"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>

#include "../compare/per_op.hpp"

namespace perf {
namespace {

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

}  // namespace

std::vector<std::size_t> sweep_sizes(const Args& a, std::size_t unit) {
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

Sweep::Sweep(const Args& a, loom::Communicator& comm, Buffers& buffers,
             std::vector<std::size_t> sizes)
    : a_(a),
      comm_(comm),
      buffers_(buffers),
      sizes_(std::move(sizes)),
      elem_(loom::size_of(a.dtype)),
      blocked_(blocked(a.op)),
      io_(buffers.check_io()),
      call_us_(sizes_.size()),
      mean_of_(sizes_.size(), 0.0) {}

Sweep::Plan Sweep::plan_of(std::size_t bytes) const {
  const int rank = comm_.rank();
  const std::size_t total = bytes / elem_;
  const std::size_t count = blocked_ ? total / static_cast<std::size_t>(comm_.size()) : total;
  const std::size_t mine = static_cast<std::size_t>(rank) * count * elem_;
  char* in = buffers_.in();
  char* out = buffers_.out();
  if (a_.in_place) {
    if (a_.op == Op::allgather)
      in = out + mine;
    else if (a_.op == Op::reducescatter)
      out = in + mine;
    else if (a_.op == Op::gather)
      in = rank == a_.root ? out + mine : in;
    else if (a_.op == Op::scatter)
      out = rank == a_.root ? in + mine : out;
    else
      in = out;
  }
  const bool whole_input =
      a_.op == Op::reducescatter || a_.op == Op::scatter || a_.op == Op::alltoall;
  return Plan{bytes, total, count, in, out, whole_input ? bytes : count * elem_};
}

std::function<void()> Sweep::call_of(const Plan& p) const {
  return [&a = a_, &comm = comm_, stream = buffers_.stream(), p] {
    switch (a.op) {
      case Op::allreduce:
        return comm.all_reduce(p.in, p.out, p.count, a.dtype, a.redop, stream);
      case Op::reducescatter:
        return comm.reduce_scatter(p.in, p.out, p.count, a.dtype, a.redop, stream);
      case Op::allgather:
        return comm.all_gather(p.in, p.out, p.count, a.dtype, stream);
      case Op::broadcast:
        return comm.broadcast(p.in, p.out, p.count, a.dtype, a.root, stream);
      case Op::reduce:
        return comm.reduce(p.in, p.out, p.count, a.dtype, a.redop, a.root, stream);
      case Op::gather:
        return comm.gather(p.in, p.out, p.count, a.dtype, a.root, stream);
      case Op::scatter:
        return comm.scatter(p.in, p.out, p.count, a.dtype, a.root, stream);
      case Op::alltoall:
        return comm.all_to_all(p.in, p.out, p.count, a.dtype, stream);
    }
  };
}

void Sweep::rewrite_input(const Plan& p) const {
  if (a_.fresh_inputs) bench::rewrite_lines(p.in, p.input_bytes);
}

void Sweep::time_turn(std::size_t k, int round) {
  const Plan p = plan_of(sizes_[k]);
  const Iterations turn = iterations_in_round(a_, iterations_for(a_, p.bytes), round);
  if (turn.timed <= 0) return;
  io_.run_once = call_of(p);
  // Timing runs on whatever the buffers hold; prod stays finite because fill() starts each turn
  // from small values, and the check refills.
  io_.fill(p.in, p.input_bytes / elem_, comm_.rank(), 0);
  auto before = [&] { rewrite_input(p); };
  for (int i = 0; i < turn.warmup; ++i) {
    before();
    io_.run_once();
  }
  buffers_.sync();
  // Per call, a CUDA call's time runs to its stream's completion.
  auto call = [&] {
    io_.run_once();
    buffers_.sync();
  };
  if (a_.timing == Timing::per_op) {
    const std::vector<double> us = bench::time_each_call_us(0, turn.timed, call, before);
    call_us_[k].insert(call_us_[k].end(), us.begin(), us.end());
  } else {
    mean_of_[k] = mean_us(comm_, turn.timed, io_.run_once, [&] { buffers_.sync(); });
  }
}

Row Sweep::finish(std::size_t k) {
  const Plan p = plan_of(sizes_[k]);
  const int n = comm_.size(), rank = comm_.rank();
  double us = mean_of_[k];
  int timed_calls = iterations_for(a_, p.bytes).timed;
  if (a_.timing == Timing::per_op) {
    timed_calls = static_cast<int>(call_us_[k].size());
    const std::vector<double>& mine = call_us_[k];
    std::vector<double> all(rank == 0 ? mine.size() * static_cast<std::size_t>(n) : 1);
    comm_.gather(mine.data(), all.data(), mine.size(), loom::DataType::f64, 0);
    us = rank == 0 ? bench::median_of_slowest(all, n) : 0;
  }
  long long wrong = -1;
  if (a_.check) {
    // The checked call's input is rewritten first too: the check covers the rewrite.
    io_.run_once = [this, p, call_once = call_of(p)] {
      rewrite_input(p);
      call_once();
    };
    std::uint64_t w = wrong_elements(a_, rank, n, p.in, p.out, p.count, io_), all = 0;
    comm_.all_reduce(&w, &all, 1, loom::DataType::u64, loom::ReduceOp::sum);
    wrong = static_cast<long long>(all);
  }
  const double algbw = us > 0 ? static_cast<double>(p.bytes) / (us * 1e-6) / 1e9 : 0;
  const Row row{p.bytes,    blocked_ ? p.total : p.count, us,
                algbw,      algbw * bus_factor(a_.op, n), wrong,
                timed_calls};
  if (rank == 0) print_row(a_, row);
  return row;
}

}  // namespace perf
