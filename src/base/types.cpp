#include <algorithm>
#include <cctype>
#include <string>

#include "loom/loom.hpp"

namespace loom {

std::size_t size_of(DataType dtype) {
  switch (dtype) {
    case DataType::i8:
    case DataType::u8:
      return 1;
    case DataType::f16:
    case DataType::bf16:
      return 2;
    case DataType::f32:
    case DataType::i32:
    case DataType::u32:
      return 4;
    case DataType::f64:
    case DataType::i64:
    case DataType::u64:
      return 8;
  }
  return 0;  // not a valid DataType: callers validate with size_of(d) != 0
}

std::string_view to_string(DataType dtype) {
  switch (dtype) {
    case DataType::f32:
      return "f32";
    case DataType::f64:
      return "f64";
    case DataType::f16:
      return "f16";
    case DataType::bf16:
      return "bf16";
    case DataType::i8:
      return "i8";
    case DataType::u8:
      return "u8";
    case DataType::i32:
      return "i32";
    case DataType::u32:
      return "u32";
    case DataType::i64:
      return "i64";
    case DataType::u64:
      return "u64";
  }
  return "invalid-dtype";
}

std::string_view to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::prod:
      return "prod";
    case ReduceOp::min:
      return "min";
    case ReduceOp::max:
      return "max";
    case ReduceOp::avg:
      return "avg";
  }
  return "invalid-op";
}

std::optional<DataType> parse_data_type(std::string_view name) {
  std::string n(name);
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::tolower(c); });
  struct Alias {
    const char* name;
    DataType dtype;
  };
  static constexpr Alias kAliases[] = {
      {"f32", DataType::f32},   {"float32", DataType::f32},   {"float", DataType::f32},
      {"f64", DataType::f64},   {"float64", DataType::f64},   {"double", DataType::f64},
      {"f16", DataType::f16},   {"float16", DataType::f16},   {"half", DataType::f16},
      {"bf16", DataType::bf16}, {"bfloat16", DataType::bf16}, {"i8", DataType::i8},
      {"int8", DataType::i8},   {"u8", DataType::u8},         {"uint8", DataType::u8},
      {"i32", DataType::i32},   {"int32", DataType::i32},     {"int", DataType::i32},
      {"u32", DataType::u32},   {"uint32", DataType::u32},    {"i64", DataType::i64},
      {"int64", DataType::i64}, {"u64", DataType::u64},       {"uint64", DataType::u64},
  };
  for (const Alias& a : kAliases)
    if (n == a.name) return a.dtype;
  return std::nullopt;
}

std::optional<ReduceOp> parse_reduce_op(std::string_view name) {
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max, ReduceOp::avg})
    if (name == to_string(op)) return op;
  return std::nullopt;
}

}  // namespace loom
