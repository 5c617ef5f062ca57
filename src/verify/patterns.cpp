#include "verify/patterns.hpp"

#include <cstring>

#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/half.hpp"

namespace loom::verify {
namespace {

bool is_unsigned(DataType t) {
  return t == DataType::u8 || t == DataType::u32 || t == DataType::u64;
}

// Products use 1 and 2 only, so 2^nranks stays exact and finite for the ranks tests run.
double value(int rank, std::size_t i, DataType dtype, ReduceOp op) {
  if (op == ReduceOp::prod)
    return 1.0 + static_cast<double>((static_cast<std::size_t>(rank) + i) % 2);
  double v = static_cast<double>((static_cast<std::size_t>(rank) * 7 + i * 13) % 9);
  return is_unsigned(dtype) ? v : v - 4.0;
}

template <typename T>
void put_as(std::byte* p, double v) {
  T x = static_cast<T>(v);
  std::memcpy(p, &x, sizeof(T));
}

void put(std::byte* p, DataType t, double v) {
  switch (t) {
    case DataType::f32:
      return put_as<float>(p, v);
    case DataType::f64:
      return put_as<double>(p, v);
    case DataType::f16:
      return put_as<std::uint16_t>(p, kernels::f32_to_f16(static_cast<float>(v)));
    case DataType::bf16:
      return put_as<std::uint16_t>(p, kernels::f32_to_bf16(static_cast<float>(v)));
    case DataType::i8:
      return put_as<std::int8_t>(p, v);
    case DataType::u8:
      return put_as<std::uint8_t>(p, v);
    case DataType::i32:
      return put_as<std::int32_t>(p, v);
    case DataType::u32:
      return put_as<std::uint32_t>(p, v);
    case DataType::i64:
      return put_as<std::int64_t>(p, v);
    case DataType::u64:
      return put_as<std::uint64_t>(p, v);
  }
}

}  // namespace

void fill(void* p, std::size_t count, int rank, DataType dtype, ReduceOp op, std::size_t first) {
  const std::size_t elem = size_of(dtype);
  auto* b = static_cast<std::byte*>(p);
  for (std::size_t i = 0; i < count; ++i)
    put(b + i * elem, dtype, value(rank, first + i, dtype, op));
}

std::vector<std::byte> expected_reduction(std::size_t first, std::size_t count, int nranks,
                                          DataType dtype, ReduceOp op) {
  const std::size_t elem = size_of(dtype);
  std::vector<std::byte> acc(count * elem), next(count * elem);
  fill(acc.data(), count, 0, dtype, op, first);
  for (int r = 1; r < nranks; ++r) {
    fill(next.data(), count, r, dtype, op, first);
    kernels::reference::reduce(acc.data(), acc.data(), next.data(), count, dtype, op);
  }
  if (op == ReduceOp::avg) kernels::reference::divide(acc.data(), acc.data(), count, dtype, nranks);
  return acc;
}

std::uint64_t count_wrong(const void* got, const void* want, std::size_t count, DataType dtype) {
  const std::size_t elem = size_of(dtype);
  std::uint64_t wrong = 0;
  for (std::size_t i = 0; i < count; ++i)
    if (std::memcmp(static_cast<const std::byte*>(got) + i * elem,
                    static_cast<const std::byte*>(want) + i * elem, elem) != 0)
      ++wrong;
  return wrong;
}

}  // namespace loom::verify
