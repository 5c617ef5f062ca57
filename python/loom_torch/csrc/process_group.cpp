#include "process_group.hpp"

#include <c10/core/StreamGuard.h>

#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <optional>
#include <random>

#include "cuda_stream.hpp"
#include "gil.hpp"
#include "stores.hpp"
#include "work.hpp"

namespace loom_torch {

namespace {

using c10d::OpType;

std::string fmt_hex(std::uint32_t word) {
  char text[9];
  std::snprintf(text, sizeof(text), "%08x", word);
  return text;
}

// PyTorch's timeout; and without a job secret in the environment, a random one that the ranks
// agree on through PyTorch's store, so that data connections prove they come from a process
// that can read the store (as the rendezvous itself does).
loom::Options options_for(loom::Store& store, std::chrono::milliseconds timeout) {
  loom::Options options;
  if (timeout.count() > 0) options.timeout = timeout;
  if (std::getenv("LOOM_SECRET") == nullptr && std::getenv("LOOM_SECRET_FILE") == nullptr) {
    std::random_device random;
    std::string mine;
    for (int i = 0; i < 4; ++i) mine += fmt_hex(random());
    const loom::Bytes agreed =
        store.compare_set("loom_torch/secret", {}, loom::Bytes(mine.begin(), mine.end()));
    options.secret = std::string(agreed.begin(), agreed.end());
  }
  return options;
}

// Element offsets of blocks of the given sizes, laid one after another.
std::vector<std::size_t> offsets_of(const std::vector<std::size_t>& counts) {
  std::vector<std::size_t> offsets(counts.size(), 0);
  if (!counts.empty())
    std::exclusive_scan(counts.begin(), counts.end(), offsets.begin(), std::size_t{0});
  return offsets;
}

std::int64_t total_of(const std::vector<at::Tensor>& ts) {
  std::int64_t total = 0;
  for (const at::Tensor& t : ts) total += t.numel();
  return total;
}

std::vector<at::Tensor> joined(const std::vector<std::vector<at::Tensor>>& lists) {
  std::vector<at::Tensor> all;
  for (const auto& list : lists) all.insert(all.end(), list.begin(), list.end());
  return all;
}

// A list of `size` tensors of t's type and device; `what` names it in errors.
void check_list(const std::vector<at::Tensor>& list, const at::Tensor& like, const Where& where,
                const char* what) {
  if (static_cast<int>(list.size()) != where.size)
    refuse(where, std::string(what) + " needs " + std::to_string(where.size) +
                      " tensors (one per rank), got " + std::to_string(list.size()));
  for (const at::Tensor& t : list) {
    check_tensor(t, where, what);
    check_same_type(like, t, where, what);
  }
}

void check_peer(int peer, const Where& where) {
  if (peer < 0 || peer >= where.size || peer == where.rank)
    refuse(where, "peer " + std::to_string(peer) + " is outside [0, " + std::to_string(where.size) +
                      ") or this rank itself");
}

// Rows per rank of an all-to-all: the splits given, or dim 0 divided evenly.
std::vector<std::int64_t> splits_of(const std::vector<std::int64_t>& splits, const at::Tensor& t,
                                    const Where& where, const char* what) {
  const std::int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  if (splits.empty()) {
    if (rows % where.size != 0)
      refuse(where, std::string(what) + " has " + std::to_string(rows) +
                        " rows, which do not split evenly over " + std::to_string(where.size) +
                        " ranks");
    return std::vector<std::int64_t>(static_cast<std::size_t>(where.size), rows / where.size);
  }
  if (static_cast<int>(splits.size()) != where.size)
    refuse(where, std::string(what) + " split sizes need " + std::to_string(where.size) +
                      " entries, got " + std::to_string(splits.size()));
  std::int64_t sum = 0;
  for (std::int64_t s : splits) {
    if (s < 0) refuse(where, std::string(what) + " split sizes must not be negative");
    sum += s;
  }
  if (sum != rows)
    refuse(where, std::string(what) + " split sizes add up to " + std::to_string(sum) +
                      " rows, but the tensor has " + std::to_string(rows));
  return splits;
}

}  // namespace

ProcessGroupLoom::ProcessGroupLoom(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                   std::chrono::milliseconds timeout)
    : BackendBase(rank, size), timeout_(timeout) {
  std::shared_ptr<loom::Store> loom_store = loom_store_of(store);
  const loom::Options options = options_for(*loom_store, timeout);
  comm_ = std::make_shared<loom::Communicator>(std::move(loom_store), rank, size, options);
  executor_ = Executor::start();
  init();
}

ProcessGroupLoom::~ProcessGroupLoom() {
  // Queued operations finish first (as ProcessGroupGloo's do); a future's Python callback may
  // need the interpreter meanwhile.
  without_gil([&] {
    executor_->shutdown();
    comm_.reset();
  });
}

std::string ProcessGroupLoom::describe() const {
  return comm_->describe();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::enqueue(
    const Where& where, OpType type, const char* title, const at::Tensor& device_of,
    const std::vector<at::Tensor>& inputs, std::vector<at::Tensor> outputs, Body body) {
  if (type != OpType::SEND && type != OpType::RECV && type != OpType::RECVANYSOURCE) ++sequence_;
  std::optional<c10::Stream> stream = cuda::current_stream(device_of);
  std::vector<c10::Device> devices;
  if (stream) devices.push_back(device_of.device());
  auto work = c10::make_intrusive<LoomWork>(getRank(), type, title, inputs, std::move(outputs),
                                            std::move(devices), executor_, where.str());
  work->op()->body = [comm = comm_, stream, body = std::move(body)] {
    c10::OptionalStreamGuard guard;
    if (stream) guard.reset_stream(*stream);
    body(*comm, cuda::handle(stream));
  };
  executor_->submit(work->op());
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::broadcast(std::vector<at::Tensor>& tensors,
                                                           const c10d::BroadcastOptions& opts) {
  const Where w = where("broadcast");
  const at::Tensor& t = single(tensors, w, "tensor");
  check_root(static_cast<int>(opts.rootRank), w);
  if (opts.rootTensor != 0) refuse(w, "rootTensor must be 0 (one tensor per process)");
  const int root = static_cast<int>(opts.rootRank);
  return enqueue(w, OpType::BROADCAST, "loom:broadcast", t, tensors, tensors,
                 [t, root](loom::Communicator& comm, loom::CudaStream stream) {
                   at::Tensor buf = dense(t);
                   const Buffer b = moved(buf);
                   comm.broadcast(buf.data_ptr(), b.count, b.dtype, root, stream);
                   write_back(t, buf);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::allreduce(std::vector<at::Tensor>& tensors,
                                                           const c10d::AllreduceOptions& opts) {
  const Where w = where("allreduce");
  const at::Tensor& t = single(tensors, w, "tensor");
  const Reduction r = reduction(t, opts.reduceOp, w);
  return enqueue(w, OpType::ALLREDUCE, "loom:all_reduce", t, tensors, tensors,
                 [t, r](loom::Communicator& comm, loom::CudaStream stream) {
                   at::Tensor buf = dense(t);
                   comm.all_reduce(buf.data_ptr(), r.buffer.count, r.buffer.dtype, r.op, stream);
                   write_back(t, buf);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  const Where w = where("allreduce_coalesced");
  if (tensors.empty()) refuse(w, "expects at least one tensor");
  check_tensors(tensors, w, "tensors");
  for (const at::Tensor& t : tensors) check_same_type(tensors.front(), t, w, "every tensor");
  const c10d::ReduceOp op = opts.reduceOp;
  const Reduction r = reduction(tensors.front(), op, w);
  return enqueue(w, OpType::ALLREDUCE_COALESCED, "loom:all_reduce_coalesced", tensors.front(),
                 tensors, tensors, [tensors, r](loom::Communicator& comm, loom::CudaStream stream) {
                   at::Tensor flat = flatten(tensors);
                   comm.all_reduce(flat.data_ptr(), r.per_element * flat.numel(), r.buffer.dtype,
                                   r.op, stream);
                   unflatten(flat, tensors);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::reduce(std::vector<at::Tensor>& tensors,
                                                        const c10d::ReduceOptions& opts) {
  const Where w = where("reduce");
  const at::Tensor& t = single(tensors, w, "tensor");
  check_root(static_cast<int>(opts.rootRank), w);
  if (opts.rootTensor != 0) refuse(w, "rootTensor must be 0 (one tensor per process)");
  const Reduction r = reduction(t, opts.reduceOp, w);
  const int root = static_cast<int>(opts.rootRank);
  return enqueue(w, OpType::REDUCE, "loom:reduce", t, tensors, tensors,
                 [t, r, root](loom::Communicator& comm, loom::CudaStream stream) {
                   at::Tensor buf = dense(t);
                   comm.reduce(buf.data_ptr(), buf.data_ptr(), r.buffer.count, r.buffer.dtype, r.op,
                               root, stream);
                   if (comm.rank() == root) write_back(t, buf);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  const Where w = where("allgather");
  const at::Tensor& in = single(inputs, w, "input");
  if (outputs.size() != 1) refuse(w, "expects one list of output tensors");
  const std::vector<at::Tensor>& outs = outputs.front();
  check_list(outs, in, w, "the output list");
  if (outs[static_cast<std::size_t>(w.rank)].numel() != in.numel())
    refuse(w, "output " + std::to_string(w.rank) + " has " +
                  std::to_string(outs[static_cast<std::size_t>(w.rank)].numel()) +
                  " elements but this rank's input has " + std::to_string(in.numel()));
  bool even = true;
  for (const at::Tensor& o : outs) even = even && o.numel() == in.numel();
  return enqueue(w, OpType::ALLGATHER, "loom:all_gather", in, inputs, outs,
                 [in, outs, even](loom::Communicator& comm, loom::CudaStream stream) {
                   const at::Tensor src = dense(in);
                   const Buffer b = moved(src);
                   const bool direct = consecutive(outs);
                   at::Tensor flat =
                       direct ? outs.front() : at::empty({total_of(outs)}, in.options());
                   if (even) {
                     comm.all_gather(src.data_ptr(), flat.data_ptr(), b.count, b.dtype, stream);
                   } else {
                     std::vector<std::size_t> counts;
                     for (const at::Tensor& o : outs) counts.push_back(units(in, o.numel()));
                     comm.all_gather_v(src.data_ptr(), flat.data_ptr(), counts, offsets_of(counts),
                                       b.dtype, stream);
                   }
                   if (!direct) unflatten(flat.view({-1}), outs);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::_allgather_base(at::Tensor& output,
                                                                 at::Tensor& input,
                                                                 const c10d::AllgatherOptions&) {
  const Where w = where("all_gather_into_tensor");
  check_tensor(input, w, "input");
  check_tensor(output, w, "output");
  check_same_type(input, output, w, "output");
  if (output.numel() != input.numel() * w.size)
    refuse(w, "output has " + std::to_string(output.numel()) + " elements, not " +
                  std::to_string(w.size) + " x the input's " + std::to_string(input.numel()));
  return enqueue(w, OpType::_ALLGATHER_BASE, "loom:all_gather_into_tensor", input, {input},
                 {output}, [input, output](loom::Communicator& comm, loom::CudaStream stream) {
                   const at::Tensor src = dense(input);
                   at::Tensor dst = dense(output);
                   const Buffer b = moved(src);
                   comm.all_gather(src.data_ptr(), dst.data_ptr(), b.count, b.dtype, stream);
                   write_back(output, dst);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& output_lists, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  const Where w = where("allgather_coalesced");
  if (inputs.empty()) refuse(w, "expects at least one input tensor");
  check_tensors(inputs, w, "inputs");
  for (const at::Tensor& t : inputs) check_same_type(inputs.front(), t, w, "every input");
  if (static_cast<int>(output_lists.size()) != w.size)
    refuse(w, "needs " + std::to_string(w.size) + " output lists (one per rank), got " +
                  std::to_string(output_lists.size()));
  for (const auto& list : output_lists) {
    if (list.size() != inputs.size())
      refuse(w, "every output list needs " + std::to_string(inputs.size()) +
                    " tensors (one per input), got " + std::to_string(list.size()));
    for (std::size_t i = 0; i < list.size(); ++i) {
      check_tensor(list[i], w, "outputs");
      check_same_type(inputs.front(), list[i], w, "every output");
      if (list[i].numel() != inputs[i].numel())
        refuse(w, "output " + std::to_string(i) + " has " + std::to_string(list[i].numel()) +
                      " elements but input " + std::to_string(i) + " has " +
                      std::to_string(inputs[i].numel()));
    }
  }
  return enqueue(
      w, OpType::ALLGATHER_COALESCED, "loom:all_gather_coalesced", inputs.front(), inputs,
      joined(output_lists),
      [inputs, output_lists](loom::Communicator& comm, loom::CudaStream stream) {
        const at::Tensor flat_in = flatten(inputs);
        const std::int64_t n = flat_in.numel();
        at::Tensor flat_out =
            at::empty({n * static_cast<std::int64_t>(output_lists.size())}, flat_in.options());
        const Buffer b = moved(flat_in);
        comm.all_gather(flat_in.data_ptr(), flat_out.data_ptr(), b.count, b.dtype, stream);
        for (std::size_t r = 0; r < output_lists.size(); ++r)
          unflatten(flat_out.narrow(0, static_cast<std::int64_t>(r) * n, n), output_lists[r]);
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  const Where w = where("gather");
  const at::Tensor& in = single(inputs, w, "input");
  const int root = static_cast<int>(opts.rootRank);
  check_root(root, w);
  std::vector<at::Tensor> outs;
  if (w.rank == root) {
    if (outputs.size() != 1) refuse(w, "expects one list of output tensors on the root");
    outs = outputs.front();
    check_list(outs, in, w, "the output list");
    for (const at::Tensor& o : outs)
      if (o.numel() != in.numel())
        refuse(w, "every output needs the input's " + std::to_string(in.numel()) +
                      " elements, not " + std::to_string(o.numel()));
  } else if (!(outputs.empty() || (outputs.size() == 1 && outputs.front().empty()))) {
    refuse(w, "output tensors are given on a rank that is not the root");
  }
  return enqueue(w, OpType::GATHER, "loom:gather", in, inputs, outs,
                 [in, outs, root](loom::Communicator& comm, loom::CudaStream stream) {
                   const at::Tensor src = dense(in);
                   const Buffer b = moved(src);
                   if (comm.rank() != root) {
                     comm.gather(src.data_ptr(), nullptr, b.count, b.dtype, root, stream);
                     return;
                   }
                   const bool direct = consecutive(outs);
                   at::Tensor flat =
                       direct ? outs.front() : at::empty({total_of(outs)}, in.options());
                   comm.gather(src.data_ptr(), flat.data_ptr(), b.count, b.dtype, root, stream);
                   if (!direct) unflatten(flat, outs);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  const Where w = where("scatter");
  const at::Tensor& out = single(outputs, w, "output");
  const int root = static_cast<int>(opts.rootRank);
  check_root(root, w);
  std::vector<at::Tensor> ins;
  if (w.rank == root) {
    if (inputs.size() != 1) refuse(w, "expects one list of input tensors on the root");
    ins = inputs.front();
    check_list(ins, out, w, "the input list");
    for (const at::Tensor& i : ins)
      if (i.numel() != out.numel())
        refuse(w, "every input needs the output's " + std::to_string(out.numel()) +
                      " elements, not " + std::to_string(i.numel()));
  } else if (!(inputs.empty() || (inputs.size() == 1 && inputs.front().empty()))) {
    refuse(w, "input tensors are given on a rank that is not the root");
  }
  return enqueue(w, OpType::SCATTER, "loom:scatter", out, ins, outputs,
                 [out, ins, root](loom::Communicator& comm, loom::CudaStream stream) {
                   at::Tensor dst = dense(out);
                   const Buffer b = moved(dst);
                   const at::Tensor flat = comm.rank() == root ? flatten(ins) : at::Tensor();
                   comm.scatter(flat.defined() ? flat.data_ptr() : nullptr, dst.data_ptr(), b.count,
                                b.dtype, root, stream);
                   write_back(out, dst);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const Where w = where("reduce_scatter");
  const at::Tensor& out = single(outputs, w, "output");
  if (inputs.size() != 1) refuse(w, "expects one list of input tensors");
  const std::vector<at::Tensor>& ins = inputs.front();
  check_list(ins, out, w, "the input list");
  if (ins[static_cast<std::size_t>(w.rank)].numel() != out.numel())
    refuse(w, "input " + std::to_string(w.rank) + " has " +
                  std::to_string(ins[static_cast<std::size_t>(w.rank)].numel()) +
                  " elements but the output has " + std::to_string(out.numel()));
  const Reduction r = reduction(out, opts.reduceOp, w);
  bool even = true;
  for (const at::Tensor& i : ins) even = even && i.numel() == out.numel();
  return enqueue(w, OpType::REDUCE_SCATTER, "loom:reduce_scatter", out, ins, outputs,
                 [out, ins, r, even](loom::Communicator& comm, loom::CudaStream stream) {
                   const at::Tensor flat = flatten(ins);
                   at::Tensor dst = dense(out);
                   if (even) {
                     comm.reduce_scatter(flat.data_ptr(), dst.data_ptr(), r.buffer.count,
                                         r.buffer.dtype, r.op, stream);
                   } else {
                     std::vector<std::size_t> counts;
                     for (const at::Tensor& i : ins)
                       counts.push_back(r.per_element * static_cast<std::size_t>(i.numel()));
                     comm.reduce_scatter_v(flat.data_ptr(), dst.data_ptr(), counts,
                                           offsets_of(counts), r.buffer.dtype, r.op, stream);
                   }
                   write_back(out, dst);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  const Where w = where("reduce_scatter_tensor");
  check_tensor(input, w, "input");
  check_tensor(output, w, "output");
  check_same_type(input, output, w, "output");
  if (input.numel() != output.numel() * w.size)
    refuse(w, "input has " + std::to_string(input.numel()) + " elements, not " +
                  std::to_string(w.size) + " x the output's " + std::to_string(output.numel()));
  const Reduction r = reduction(output, opts.reduceOp, w);
  return enqueue(w, OpType::_REDUCE_SCATTER_BASE, "loom:reduce_scatter_tensor", output, {input},
                 {output}, [input, output, r](loom::Communicator& comm, loom::CudaStream stream) {
                   const at::Tensor src = dense(input);
                   at::Tensor dst = dense(output);
                   comm.reduce_scatter(src.data_ptr(), dst.data_ptr(), r.buffer.count,
                                       r.buffer.dtype, r.op, stream);
                   write_back(output, dst);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::alltoall_base(at::Tensor& output,
                                                               at::Tensor& input,
                                                               std::vector<int64_t>& output_splits,
                                                               std::vector<int64_t>& input_splits,
                                                               const c10d::AllToAllOptions&) {
  const Where w = where("all_to_all_single");
  check_tensor(input, w, "input");
  check_tensor(output, w, "output");
  check_same_type(input, output, w, "output");
  const std::vector<std::int64_t> in_rows = splits_of(input_splits, input, w, "input");
  const std::vector<std::int64_t> out_rows = splits_of(output_splits, output, w, "output");
  const std::int64_t in_row =
      input.dim() == 0 || input.size(0) == 0 ? input.numel() : input.numel() / input.size(0);
  const std::int64_t out_row =
      output.dim() == 0 || output.size(0) == 0 ? output.numel() : output.numel() / output.size(0);
  std::vector<std::size_t> send_counts, recv_counts;
  for (std::int64_t rows : in_rows) send_counts.push_back(units(input, rows * in_row));
  for (std::int64_t rows : out_rows) recv_counts.push_back(units(output, rows * out_row));
  const bool even = input_splits.empty() && output_splits.empty();
  if (even && output.numel() != input.numel())
    refuse(w, "output has " + std::to_string(output.numel()) + " elements but the input has " +
                  std::to_string(input.numel()) + " (give split sizes for uneven blocks)");
  return enqueue(
      w, OpType::ALLTOALL_BASE, "loom:all_to_all_single", input, {input}, {output},
      [input, output, send_counts, recv_counts, even](loom::Communicator& comm,
                                                      loom::CudaStream stream) {
        at::Tensor src = dense(input);
        at::Tensor dst = dense(output);
        if (src.data_ptr() == dst.data_ptr() && src.numel() > 0) src = src.clone();  // not in place
        const loom::DataType dtype = moved(src).dtype;
        if (even)
          comm.all_to_all(src.data_ptr(), dst.data_ptr(), send_counts.front(), dtype, stream);
        else
          comm.all_to_all_v(src.data_ptr(), send_counts, offsets_of(send_counts), dst.data_ptr(),
                            recv_counts, offsets_of(recv_counts), dtype, stream);
        write_back(output, dst);
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::alltoall(std::vector<at::Tensor>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::AllToAllOptions&) {
  const Where w = where("all_to_all");
  if (inputs.empty()) refuse(w, "expects one input tensor per rank");
  check_list(inputs, inputs.front(), w, "the input list");
  check_list(outputs, inputs.front(), w, "the output list");
  std::vector<std::size_t> send_counts, recv_counts;
  for (const at::Tensor& t : inputs) send_counts.push_back(units(t, t.numel()));
  for (const at::Tensor& t : outputs) recv_counts.push_back(units(t, t.numel()));
  return enqueue(w, OpType::ALLTOALL, "loom:all_to_all", inputs.front(), inputs, outputs,
                 [inputs, outputs, send_counts, recv_counts](loom::Communicator& comm,
                                                             loom::CudaStream stream) {
                   at::Tensor src = flatten(inputs);
                   at::Tensor dst = at::empty({total_of(outputs)}, src.options());
                   comm.all_to_all_v(src.data_ptr(), send_counts, offsets_of(send_counts),
                                     dst.data_ptr(), recv_counts, offsets_of(recv_counts),
                                     moved(src).dtype, stream);
                   unflatten(dst, outputs);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::barrier(const c10d::BarrierOptions&) {
  return enqueue(where("barrier"), OpType::BARRIER, "loom:barrier", at::Tensor(), {}, {},
                 [](loom::Communicator& comm, loom::CudaStream) { comm.barrier(); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::send(std::vector<at::Tensor>& tensors, int dst,
                                                      int) {
  const Where w = where("send");
  const at::Tensor& t = single(tensors, w, "tensor");
  check_peer(dst, w);
  if (!t.is_cuda()) return issue_point_to_point(w, OpType::SEND, "loom:send", t, true, dst);
  return enqueue(w, OpType::SEND, "loom:send", t, tensors, {},
                 [t, dst](loom::Communicator& comm, loom::CudaStream stream) {
                   const at::Tensor buf = dense(t);
                   const Buffer b = moved(buf);
                   comm.send(buf.data_ptr(), b.count, b.dtype, dst, stream);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::recv(std::vector<at::Tensor>& tensors, int src,
                                                      int) {
  const Where w = where("recv");
  const at::Tensor& t = single(tensors, w, "tensor");
  check_peer(src, w);
  if (!t.is_cuda()) return issue_point_to_point(w, OpType::RECV, "loom:recv", t, false, src);
  return enqueue(w, OpType::RECV, "loom:recv", t, {}, tensors,
                 [t, src](loom::Communicator& comm, loom::CudaStream stream) {
                   at::Tensor buf = dense(t);
                   const Buffer b = moved(buf);
                   comm.recv(buf.data_ptr(), b.count, b.dtype, src, stream);
                   write_back(t, buf);
                 });
}

// A send or receive on a host tensor: issued to Loom as an asynchronous call in its turn, and
// complete when Loom's call is (then a receive's copy back, if the tensor was not dense).
c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::issue_point_to_point(
    const Where& where, OpType type, const char* title, const at::Tensor& t, bool send, int peer) {
  std::vector<at::Tensor> tensors{t};
  auto work = c10::make_intrusive<LoomWork>(getRank(), type, title, tensors,
                                            send ? std::vector<at::Tensor>{} : tensors,
                                            std::vector<c10::Device>{}, executor_, where.str());
  auto buf = std::make_shared<at::Tensor>();
  work->op()->issue = [comm = comm_, t, buf, send, peer] {
    *buf = dense(t);
    const Buffer b = moved(*buf);
    return send ? comm->send_async(buf->data_ptr(), b.count, b.dtype, peer)
                : comm->recv_async(buf->data_ptr(), b.count, b.dtype, peer);
  };
  if (!send)
    work->op()->body = [t, buf] { write_back(t, *buf); };
  else
    work->op()->body = [buf] { *buf = at::Tensor(); };  // the send's buffer lives until it is done
  executor_->submit(work->op());
  return work;
}

void ProcessGroupLoom::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  using std::chrono::milliseconds;
  const milliseconds timeout = opts.timeout == c10d::kUnsetTimeout ? timeout_ : opts.timeout;
  const auto start = std::chrono::steady_clock::now();
  const int rank = getRank(), size = getSize();
  auto token = [] { return std::vector<at::Tensor>{at::zeros({1}, at::kLong)}; };
  // A Work's wait of 0 waits without a limit: at least a millisecond.
  auto left = [&] {
    const auto spent =
        std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - start);
    return std::max(milliseconds(1), timeout - spent);
  };
  auto fail = [&](const std::string& message) {
    comm_->abort();
    TORCH_CHECK(false, message);
  };
  if (rank != 0) {
    std::vector<at::Tensor> mine = token(), answer = token();
    try {
      auto sent = send(mine, 0, 0);
      auto answered = recv(answer, 0, 0);
      sent->wait(left());
      answered->wait(left());
    } catch (const std::exception& e) {
      fail("Rank " + std::to_string(rank) +
           " successfully reached monitoredBarrier, but received errors while waiting for "
           "send/recv from rank 0. Please check rank 0 logs for faulty rank. (" +
           e.what() + ")");
    }
    return;
  }
  const std::string in_time =
      " failed to pass monitoredBarrier in " + std::to_string(timeout.count()) + " ms";
  std::vector<std::vector<at::Tensor>> tokens(static_cast<std::size_t>(size));
  std::vector<c10::intrusive_ptr<c10d::Work>> heard(static_cast<std::size_t>(size));
  for (int r = 1; r < size; ++r) {
    tokens[r] = token();
    heard[r] = recv(tokens[r], r, 0);
  }
  std::vector<int> failed;
  for (int r = 1; r < size; ++r) {
    // Every rank gets the whole timeout when all are waited for, else what is left of it.
    milliseconds wait = wait_all_ranks ? std::max(milliseconds(1), timeout) : left();
    if (!wait_all_ranks && std::chrono::steady_clock::now() - start >= timeout &&
        !heard[r]->isCompleted())
      fail("[Rank 0]: Rank 0 timed out in monitoredBarrier after " +
           std::to_string(timeout.count()) + " ms");
    try {
      heard[r]->wait(wait);
    } catch (const std::exception& e) {
      if (!wait_all_ranks) fail("[Rank 0]: Rank " + std::to_string(r) + in_time + "\n " + e.what());
      failed.push_back(r);
    }
  }
  if (!failed.empty()) {
    std::string ranks;
    for (int r : failed) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    fail("[Rank 0]: Ranks " + ranks + in_time);
  }
  for (int r = 1; r < size; ++r) {
    std::vector<at::Tensor> answer = token();
    try {
      send(answer, r, 0)->wait(left());
    } catch (const std::exception& e) {
      fail("[Rank 0]: Rank " + std::to_string(r) + in_time + "\n " + e.what());
    }
  }
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::recvAnysource(std::vector<at::Tensor>&, int) {
  refuse(where("recv"),
         "receiving from any source is not supported: Loom matches messages by their peer "
         "(pass src)");
}

#if LOOM_TORCH_AT_LEAST(2, 0)
c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  const Where w = where("all_gather_into_tensor_coalesced");
  if (inputs.size() != outputs.size() || inputs.empty())
    refuse(w, "needs as many outputs as inputs, and at least one");
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    check_tensor(inputs[i], w, "inputs");
    check_tensor(outputs[i], w, "outputs");
    check_same_type(inputs[i], outputs[i], w, "every output");
    if (outputs[i].numel() != inputs[i].numel() * w.size)
      refuse(w, "output " + std::to_string(i) + " does not hold " + std::to_string(w.size) +
                    " x input " + std::to_string(i));
  }
  return enqueue(w, OpType::COALESCED, "loom:all_gather_into_tensor_coalesced", inputs.front(),
                 inputs, outputs,
                 [inputs, outputs](loom::Communicator& comm, loom::CudaStream stream) {
                   for (std::size_t i = 0; i < inputs.size(); ++i) {
                     const at::Tensor src = dense(inputs[i]);
                     at::Tensor dst = dense(outputs[i]);
                     const Buffer b = moved(src);
                     comm.all_gather(src.data_ptr(), dst.data_ptr(), b.count, b.dtype, stream);
                     write_back(outputs[i], dst);
                   }
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const Where w = where("reduce_scatter_tensor_coalesced");
  if (inputs.size() != outputs.size() || inputs.empty())
    refuse(w, "needs as many outputs as inputs, and at least one");
  std::vector<Reduction> reductions;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    check_tensor(inputs[i], w, "inputs");
    check_tensor(outputs[i], w, "outputs");
    check_same_type(inputs[i], outputs[i], w, "every output");
    if (inputs[i].numel() != outputs[i].numel() * w.size)
      refuse(w, "input " + std::to_string(i) + " does not hold " + std::to_string(w.size) +
                    " x output " + std::to_string(i));
    reductions.push_back(reduction(outputs[i], opts.reduceOp, w));
  }
  return enqueue(w, OpType::COALESCED, "loom:reduce_scatter_tensor_coalesced", inputs.front(),
                 inputs, outputs,
                 [inputs, outputs, reductions](loom::Communicator& comm, loom::CudaStream stream) {
                   for (std::size_t i = 0; i < inputs.size(); ++i) {
                     const at::Tensor src = dense(inputs[i]);
                     at::Tensor dst = dense(outputs[i]);
                     const Reduction& r = reductions[i];
                     comm.reduce_scatter(src.data_ptr(), dst.data_ptr(), r.buffer.count,
                                         r.buffer.dtype, r.op, stream);
                     write_back(outputs[i], dst);
                   }
                 });
}
#endif

}  // namespace loom_torch
