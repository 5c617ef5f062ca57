// The all-reduce of a sparse (COO) tensor, as ProcessGroupGloo offers it: each rank's tensor is
// coalesced, every rank gathers every rank's indices and values (each rank its own count of
// nonzeros), and sums them locally; every rank ends with the same coalesced sum in its tensor.
// ReduceOp.SUM only, on CPU tensors.
#include <ATen/ATen.h>
#include <c10/util/accumulate.h>

#include <numeric>

#include "process_group.hpp"

namespace loom_torch {
namespace {

// What each rank says of its tensor before its data moves, so that every rank checks the others
// alike and all raise together where they disagree. kReady is 0 where a rank could not coalesce
// its tensor: that rank raises its own error, the others name it.
enum Field : std::size_t { kReady, kSparseDim, kDenseDim, kNnz, kDims, kType, kFields };

// The ranks' tensors disagree, and every rank knows it: a plain error, as gloo's, which leaves the
// group usable (GroupHealth counts Loom's errors only).
[[noreturn]] void disagree(const Where& w, const std::string& why) {
  TORCH_CHECK(false, w.str(), ": the ranks' sparse tensors disagree: ", why);
}

// Gathers `count` int64s from every rank (the same count on each).
std::vector<std::int64_t> gather_longs(loom::Communicator& comm, const std::int64_t* mine,
                                       std::size_t count) {
  std::vector<std::int64_t> all(count * static_cast<std::size_t>(comm.size()));
  if (count > 0) comm.all_gather(mine, all.data(), count, loom::DataType::i64);
  return all;
}

// Every rank's `counts[r]` elements of `t`'s kind, one after another; every count may be 0.
at::Tensor gather_v(loom::Communicator& comm, const at::Tensor& mine,
                    const std::vector<std::int64_t>& numels) {
  const std::int64_t total = std::accumulate(numels.begin(), numels.end(), std::int64_t{0});
  at::Tensor all = at::empty({total}, mine.options());
  if (total == 0) return all;
  std::vector<std::size_t> counts, displs;
  std::size_t next = 0;
  for (std::int64_t n : numels) {
    counts.push_back(units(mine, n));
    displs.push_back(next);
    next += counts.back();
  }
  comm.all_gather_v(mine.data_ptr(), all.data_ptr(), counts, displs, moved(mine).dtype);
  return all;
}

void sparse_sum(loom::Communicator& comm, const at::Tensor& t, const Where& w) {
  at::NoGradGuard no_grad;               // the sum is written into t in place, as gloo's is
  at::Tensor in, my_indices, my_values;  // this rank's, flat
  std::exception_ptr failed;             // raised after the header, which the other ranks wait for
  try {
    in = t.coalesce();
    my_indices = in.indices().contiguous().view({-1});
    my_values = in.values().contiguous().view({-1});
  } catch (...) {
    failed = std::current_exception();
  }
  std::int64_t mine[kFields] = {};
  if (!failed) {
    mine[kReady] = 1;
    mine[kSparseDim] = in.sparse_dim();
    mine[kDenseDim] = in.dense_dim();
    mine[kNnz] = in._nnz();
    mine[kDims] = in.dim();
    mine[kType] = static_cast<std::int64_t>(in.scalar_type());
  }
  const int n = comm.size();
  const std::vector<std::int64_t> said = gather_longs(comm, mine, kFields);
  if (failed) std::rethrow_exception(failed);
  const auto field = [&](int r, Field f) {
    return said[static_cast<std::size_t>(r) * kFields + f];
  };
  for (int r = 0; r < n; ++r)
    if (field(r, kReady) == 0)
      disagree(w,
               "rank " + std::to_string(r) + " could not coalesce its tensor (its error says why)");
  std::vector<std::int64_t> nnz;
  for (int r = 0; r < n; ++r) {
    for (Field f : {kSparseDim, kDenseDim, kDims, kType})
      if (field(r, f) != mine[f])
        disagree(w, "rank " + std::to_string(r) + "'s sparse tensor has " +
                        std::to_string(field(r, kSparseDim)) + " sparse and " +
                        std::to_string(field(r, kDenseDim)) + " dense dimensions of type " +
                        c10::toString(static_cast<at::ScalarType>(field(r, kType))) + ", rank " +
                        std::to_string(comm.rank()) + "'s " + std::to_string(in.sparse_dim()) +
                        " and " + std::to_string(in.dense_dim()) + " of type " +
                        c10::toString(in.scalar_type()));
    nnz.push_back(field(r, kNnz));
  }
  const std::vector<std::int64_t> sizes = gather_longs(comm, in.sizes().data(), in.sizes().size());
  const std::size_t dims = in.sizes().size();
  for (int r = 0; r < n; ++r)
    for (std::size_t d = 0; d < dims; ++d)
      if (sizes[static_cast<std::size_t>(r) * dims + d] != in.sizes()[d])
        disagree(w, "rank " + std::to_string(r) + "'s sparse tensor's sizes differ from rank " +
                        std::to_string(comm.rank()) + "'s " + c10::str(in.sizes()));

  const std::int64_t sparse_dim = in.sparse_dim();
  const c10::IntArrayRef dense_sizes = in.sizes().slice(static_cast<std::size_t>(sparse_dim));
  const std::int64_t per_value = c10::multiply_integers(dense_sizes);  // elements a nonzero holds
  std::vector<std::int64_t> index_numels, value_numels;
  for (std::int64_t k : nnz) {
    index_numels.push_back(k * sparse_dim);
    value_numels.push_back(k * per_value);
  }
  const at::Tensor indices = gather_v(comm, my_indices, index_numels);
  const at::Tensor all_values = gather_v(comm, my_values, value_numels);

  // Rank r's indices are a [sparse_dim, nnz_r] block: side by side, they are one index matrix.
  std::vector<at::Tensor> blocks;
  std::int64_t offset = 0;
  for (std::int64_t k : nnz) {
    blocks.push_back(indices.narrow(0, offset, k * sparse_dim).view({sparse_dim, k}));
    offset += k * sparse_dim;
  }
  std::vector<std::int64_t> value_shape{std::accumulate(nnz.begin(), nnz.end(), std::int64_t{0})};
  value_shape.insert(value_shape.end(), dense_sizes.begin(), dense_sizes.end());
  const at::Tensor sum = at::sparse_coo_tensor(at::cat(blocks, 1), all_values.view(value_shape),
                                               in.sizes(), in.options())
                             .coalesce();
  t.copy_(sum);
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::sparse_allreduce(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  const Where w = where("allreduce", waited_at_once(opts));
  const at::Tensor& t = only(tensors, w, "tensor");
  if (!t.is_cpu())
    refuse(w, "a sparse tensor on " + t.device().str() +
                  ": sparse tensors are reduced on CPU only (move it there first)");
  if (opts.reduceOp != c10d::ReduceOp::SUM)
    refuse(w, "sparse tensors are reduced with ReduceOp.SUM only");
  return enqueue(w, c10d::OpType::ALLREDUCE, "loom:sparse_all_reduce", t, tensors, tensors,
                 [t, w](loom::Communicator& comm, loom::CudaStream) { sparse_sum(comm, t, w); });
}

#if LOOM_TORCH_AT_LEAST(2, 1)
c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::allreduce_sparse(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  for (const at::Tensor& t : tensors)
    if (t.defined() && !t.is_sparse())
      refuse(where("allreduce_sparse", waited_at_once(opts)),
             "takes sparse (COO) tensors only, not a dense one");
  return allreduce(tensors, opts);
}
#endif

}  // namespace loom_torch
