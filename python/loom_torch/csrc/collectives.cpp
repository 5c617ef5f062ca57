// The collectives of the loom backend: each checks its tensors, then queues one Loom call.
#include <c10/core/ScalarType.h>

#include "process_group.hpp"

namespace loom_torch {

using c10d::OpType;

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::broadcast(std::vector<at::Tensor>& tensors,
                                                           const c10d::BroadcastOptions& opts) {
  const Where w = where("broadcast", waited_at_once(opts));
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
  if (!tensors.empty() && tensors.front().defined() && tensors.front().is_sparse())
    return sparse_allreduce(tensors, opts);
  const Where w = where("allreduce", waited_at_once(opts));
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
  const Where w = where("allreduce_coalesced", waited_at_once(opts));
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
  const Where w = where("reduce", waited_at_once(opts));
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
    const c10d::AllgatherOptions& opts) {
  const Where w = where("allgather", waited_at_once(opts));
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

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  const Where w = where("all_gather_into_tensor", waited_at_once(opts));
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
    const c10d::AllgatherOptions& opts) {
  const Where w = where("allgather_coalesced", waited_at_once(opts));
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
  const Where w = where("gather", waited_at_once(opts));
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
  const Where w = where("scatter", waited_at_once(opts));
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
  const Where w = where("reduce_scatter", waited_at_once(opts));
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
  const Where w = where("reduce_scatter_tensor", waited_at_once(opts));
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
                                                               const c10d::AllToAllOptions& opts) {
  const Where w = where("all_to_all_single", waited_at_once(opts));
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
                                                          const c10d::AllToAllOptions& opts) {
  const Where w = where("all_to_all", waited_at_once(opts));
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

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::barrier(const c10d::BarrierOptions& opts) {
  return enqueue(where("barrier", waited_at_once(opts)), OpType::BARRIER, "loom:barrier",
                 at::Tensor(), {}, {},
                 [](loom::Communicator& comm, loom::CudaStream) { comm.barrier(); });
}

#if LOOM_TORCH_AT_LEAST(2, 0)
c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const Where w = where("all_gather_into_tensor_coalesced", waited_at_once(opts));
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
  const Where w = where("reduce_scatter_tensor_coalesced", waited_at_once(opts));
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

#if LOOM_TORCH_BACKEND_API
c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::gather_single(at::Tensor& output,
                                                               at::Tensor& input,
                                                               const c10d::GatherOptions& opts) {
  const Where w = where("gather_single", waited_at_once(opts));
  const int root = static_cast<int>(opts.rootRank);
  check_root(root, w);
  check_tensor(input, w, "input");
  const bool at_root = w.rank == root;
  if (at_root) {
    check_tensor(output, w, "output");
    check_same_type(input, output, w, "output");
    if (output.numel() != input.numel() * w.size)
      refuse(w, "output has " + std::to_string(output.numel()) + " elements, not " +
                    std::to_string(w.size) + " x the input's " + std::to_string(input.numel()));
  }
  std::vector<at::Tensor> outs;
  if (at_root) outs.push_back(output);
  return enqueue(w, OpType::GATHER, "loom:gather_single", input, {input}, outs,
                 [input, output, root, at_root](loom::Communicator& comm, loom::CudaStream stream) {
                   const at::Tensor src = dense(input);
                   const Buffer b = moved(src);
                   at::Tensor dst = at_root ? dense(output) : at::Tensor();
                   comm.gather(src.data_ptr(), at_root ? dst.data_ptr() : nullptr, b.count, b.dtype,
                               root, stream);
                   if (at_root) write_back(output, dst);
                 });
}
#endif

}  // namespace loom_torch
