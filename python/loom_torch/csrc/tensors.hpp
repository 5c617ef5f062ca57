// How torch tensors and reduce ops become Loom buffers, data types and ops, and the checks that
// refuse what Loom cannot take, before anything is queued.
#pragma once

#include <ATen/ATen.h>
#include <loom/loom.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include "torch_compat.hpp"

#include <string>
#include <vector>

namespace loom_torch {

// Names the call in errors: "loom allreduce (rank 1 of 4)".
struct Where {
  const char* op;
  int rank;
  int size;
  // The caller waits for the call as soon as it is issued (PyTorch 2.x's asyncOp = false): the
  // executor leaves it to that thread, waking no other.
  bool waited_at_once = false;
  std::string str() const;
};

// Whether a call's options say its caller waits for it at once (PyTorch 2.x; never with 1.x).
template <class CallOptions>
bool waited_at_once(const CallOptions& opts) {
#if LOOM_TORCH_AT_LEAST(2, 15)
  return !opts.asyncOp;
#else
  (void)opts;
  return false;
#endif
}

// Raises loom::InvalidArgument naming the call.
[[noreturn]] void refuse(const Where& where, const std::string& why);

// A buffer as Loom sees it: its type and element count.
struct Buffer {
  loom::DataType dtype;
  std::size_t count;
};

// For calls that only move data: the tensor's own type where Loom has it, else its bytes.
Buffer moved(const at::Tensor& t);
// Loom's count for `numel` elements of t's type, in moved(t)'s units.
std::size_t units(const at::Tensor& t, std::int64_t numel);

// For reductions: the type Loom reduces (a complex tensor is its real and imaginary parts, for
// sums and averages), and the op (on bool, sum is max and product is min, as NCCL does).
struct Reduction {
  Buffer buffer;
  loom::ReduceOp op;
  std::size_t per_element;  // Loom elements per tensor element: 2 for complex, else 1
};
Reduction reduction(const at::Tensor& t, const c10d::ReduceOp& op, const Where& where);

// Dense (strided) CPU tensors, and CUDA tensors where this build has the device path, all on one
// device; `what` names the argument.
void check_tensor(const at::Tensor& t, const Where& where, const char* what);
void check_tensors(const std::vector<at::Tensor>& ts, const Where& where, const char* what);
// Exactly one tensor per call (one device per process).
const at::Tensor& single(const std::vector<at::Tensor>& ts, const Where& where, const char* what);
// The one tensor of a call, refusing any other count, but its layout and device unchecked (a
// sparse all-reduce's, which check_tensor would refuse).
const at::Tensor& only(const std::vector<at::Tensor>& ts, const Where& where, const char* what);
void check_same_type(const at::Tensor& a, const at::Tensor& b, const Where& where,
                     const char* what);
void check_root(int root, const Where& where);
// A list of `size` tensors of like's type and device (one per rank); `what` names it in errors.
void check_list(const std::vector<at::Tensor>& list, const at::Tensor& like, const Where& where,
                const char* what);
// A peer of a send or receive: another rank of the group.
void check_peer(int peer, const Where& where);
// Rows per rank of an all-to-all: the splits given, or dim 0 divided evenly.
std::vector<std::int64_t> splits_of(const std::vector<std::int64_t>& splits, const at::Tensor& t,
                                    const Where& where, const char* what);

// Element offsets of blocks of the given sizes, laid one after another.
std::vector<std::size_t> offsets_of(const std::vector<std::size_t>& counts);
std::int64_t total_of(const std::vector<at::Tensor>& ts);
std::vector<at::Tensor> joined(const std::vector<std::vector<at::Tensor>>& lists);

// A contiguous tensor with t's values: t itself when it is contiguous, else a copy.
at::Tensor dense(const at::Tensor& t);
// Writes `result` into `t` unless they are the same tensor.
void write_back(const at::Tensor& t, const at::Tensor& result);

// Whether the tensors are contiguous and lie one after another in memory, in order (the chunks
// of one buffer): then a call can write them in place.
bool consecutive(const std::vector<at::Tensor>& ts);
// The tensors as one contiguous 1-D tensor (their values in order), and the reverse.
at::Tensor flatten(const std::vector<at::Tensor>& ts);
void unflatten(const at::Tensor& flat, const std::vector<at::Tensor>& ts);

}  // namespace loom_torch
