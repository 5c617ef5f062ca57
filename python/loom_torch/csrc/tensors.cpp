#include "tensors.hpp"

#include <numeric>
#include <optional>

#include "cuda_stream.hpp"

namespace loom_torch {

std::string Where::str() const {
  return "loom " + std::string(op) + " (rank " + std::to_string(rank) + " of " +
         std::to_string(size) + ")";
}

void refuse(const Where& where, const std::string& why) {
  throw loom::InvalidArgument(where.str() + ": " + why);
}

namespace {

std::optional<loom::DataType> loom_type(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return loom::DataType::f32;
    case at::kDouble:
      return loom::DataType::f64;
    case at::kHalf:
      return loom::DataType::f16;
    case at::kBFloat16:
      return loom::DataType::bf16;
    case at::kChar:
      return loom::DataType::i8;
    case at::kByte:
    case at::kBool:
      return loom::DataType::u8;
    case at::kInt:
      return loom::DataType::i32;
    case at::kLong:
      return loom::DataType::i64;
    default:
      return std::nullopt;
  }
}

std::size_t count_of(const at::Tensor& t) {
  return static_cast<std::size_t>(t.numel());
}

}  // namespace

Buffer moved(const at::Tensor& t) {
  if (auto dtype = loom_type(t.scalar_type())) return {*dtype, count_of(t)};
  return {loom::DataType::u8, count_of(t) * t.element_size()};
}

std::size_t units(const at::Tensor& t, std::int64_t numel) {
  const auto n = static_cast<std::size_t>(numel);
  return loom_type(t.scalar_type()) ? n : n * t.element_size();
}

Reduction reduction(const at::Tensor& t, const c10d::ReduceOp& op, const Where& where) {
  const at::ScalarType type = t.scalar_type();
  const bool boolean = type == at::kBool;
  std::optional<loom::ReduceOp> lop;
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      lop = boolean ? loom::ReduceOp::max : loom::ReduceOp::sum;
      break;
    case c10d::ReduceOp::PRODUCT:
      lop = boolean ? loom::ReduceOp::min : loom::ReduceOp::prod;
      break;
    case c10d::ReduceOp::MIN:
      lop = loom::ReduceOp::min;
      break;
    case c10d::ReduceOp::MAX:
      lop = loom::ReduceOp::max;
      break;
    case c10d::ReduceOp::AVG:
      if (!boolean) lop = loom::ReduceOp::avg;
      break;
    case c10d::ReduceOp::BAND:
      if (boolean) lop = loom::ReduceOp::min;
      break;
    case c10d::ReduceOp::BOR:
      if (boolean) lop = loom::ReduceOp::max;
      break;
    default:
      break;
  }
  static const char* const names[] = {"SUM",  "AVG", "PRODUCT", "MIN",       "MAX",
                                      "BAND", "BOR", "BXOR",    "PREMUL_SUM"};
  const auto index = static_cast<std::size_t>(op.op_);
  const std::string op_name = index < std::size(names) ? names[index] : "an unknown op";
  if (!lop)
    refuse(where, "ReduceOp." + op_name + " on " + std::string(c10::toString(type)) +
                      " is not supported (Loom reduces with SUM, PRODUCT, MIN, MAX and AVG; "
                      "BAND and BOR on bool)");
  if (type == at::kComplexFloat || type == at::kComplexDouble) {
    if (*lop != loom::ReduceOp::sum && *lop != loom::ReduceOp::avg)
      refuse(where, "complex tensors are reduced with SUM or AVG only, not " + op_name);
    return {
        {type == at::kComplexFloat ? loom::DataType::f32 : loom::DataType::f64, 2 * count_of(t)},
        *lop,
        2};
  }
  auto dtype = loom_type(type);
  if (!dtype)
    refuse(where, std::string(c10::toString(type)) +
                      " tensors cannot be reduced (Loom reduces float32, float64, float16, "
                      "bfloat16, int8, uint8, int32, int64, bool and complex)");
  return {{*dtype, count_of(t)}, *lop, 1};
}

void check_tensor(const at::Tensor& t, const Where& where, const char* what) {
  if (!t.defined()) refuse(where, std::string(what) + " is an undefined tensor");
  if (t.layout() != at::kStrided)
    refuse(where, std::string(what) + " is a " + c10::str(t.layout()) +
                      " tensor; only dense (strided) tensors are supported");
  if (t.is_cuda()) {
    if (!cuda::supported())
      refuse(where,
             std::string(what) + " is on " + t.device().str() + ": " + cuda::why_unsupported());
  } else if (!t.is_cpu()) {
    refuse(where, std::string(what) + " is on " + t.device().str() +
                      "; only CPU and CUDA tensors are supported");
  }
}

void check_tensors(const std::vector<at::Tensor>& ts, const Where& where, const char* what) {
  for (const at::Tensor& t : ts) {
    check_tensor(t, where, what);
    if (t.device() != ts.front().device())
      refuse(where, std::string(what) + " are on " + ts.front().device().str() + " and " +
                        t.device().str() + ": one call's tensors must be on one device");
  }
}

const at::Tensor& only(const std::vector<at::Tensor>& ts, const Where& where, const char* what) {
  if (ts.size() != 1)
    refuse(where, "expects one " + std::string(what) + " tensor (one device per process), got " +
                      std::to_string(ts.size()));
  return ts.front();
}

const at::Tensor& single(const std::vector<at::Tensor>& ts, const Where& where, const char* what) {
  check_tensor(only(ts, where, what), where, what);
  return ts.front();
}

void check_same_type(const at::Tensor& a, const at::Tensor& b, const Where& where,
                     const char* what) {
  if (a.scalar_type() != b.scalar_type())
    refuse(where, std::string(what) + " has type " + c10::toString(b.scalar_type()) +
                      " but the input is " + c10::toString(a.scalar_type()));
  if (a.device() != b.device())
    refuse(where, std::string(what) + " is on " + b.device().str() + " but the input is on " +
                      a.device().str());
}

void check_root(int root, const Where& where) {
  if (root < 0 || root >= where.size)
    refuse(where,
           "root " + std::to_string(root) + " is outside [0, " + std::to_string(where.size) + ")");
}

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

at::Tensor dense(const at::Tensor& t) {
  return t.is_contiguous() ? t : t.contiguous();
}

void write_back(const at::Tensor& t, const at::Tensor& result) {
  if (!t.is_same(result)) t.copy_(result);
}

bool consecutive(const std::vector<at::Tensor>& ts) {
  if (ts.empty()) return false;
  const auto* next = static_cast<const char*>(ts.front().data_ptr());
  for (const at::Tensor& t : ts) {
    if (!t.is_contiguous() || t.scalar_type() != ts.front().scalar_type() ||
        static_cast<const char*>(t.data_ptr()) != next)
      return false;
    next += t.numel() * t.element_size();
  }
  return true;
}

at::Tensor flatten(const std::vector<at::Tensor>& ts) {
  if (ts.size() == 1) return dense(ts.front()).view({-1});
  std::vector<at::Tensor> flat;
  flat.reserve(ts.size());
  for (const at::Tensor& t : ts) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

void unflatten(const at::Tensor& flat, const std::vector<at::Tensor>& ts) {
  std::int64_t offset = 0;
  for (const at::Tensor& t : ts) {
    const at::Tensor part = flat.narrow(0, offset, t.numel()).view(t.sizes());
    if (!(part.data_ptr() == t.data_ptr() && t.is_contiguous())) t.copy_(part);
    offset += t.numel();
  }
}

}  // namespace loom_torch
