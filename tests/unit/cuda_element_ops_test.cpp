// The CUDA kernels' per-element operations, compiled for the host (no GPU needed), against the
// CPU reference: every type and reduction on special values (zeros of both signs, NaN,
// infinities, extremes, subnormals) and random ones, bit for bit (any NaN matches any NaN).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/half.hpp"
#include "kernels/cuda/element_ops.cuh"

namespace loom {
namespace {

using kernels::dispatch_op;
using kernels::cuda::dispatch_type;

constexpr DataType kTypes[] = {DataType::f32, DataType::f64, DataType::f16, DataType::bf16,
                               DataType::i8,  DataType::u8,  DataType::i32, DataType::u32,
                               DataType::i64, DataType::u64};
constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max,
                             ReduceOp::avg};

bool is_float(DataType t) {
  return t == DataType::f32 || t == DataType::f64 || t == DataType::f16 || t == DataType::bf16;
}

// Values of type t as raw bytes: specials first, then random bit patterns.
std::vector<std::uint64_t> values_of(DataType t, std::mt19937_64& rng) {
  std::vector<std::uint64_t> v;
  auto add_double = [&](double d) {
    std::uint64_t bits = 0;
    switch (t) {
      case DataType::f32: {
        float f = static_cast<float>(d);
        std::memcpy(&bits, &f, 4);
        break;
      }
      case DataType::f64:
        std::memcpy(&bits, &d, 8);
        break;
      case DataType::f16:
        bits = kernels::f32_to_f16(static_cast<float>(d));
        break;
      case DataType::bf16:
        bits = kernels::f32_to_bf16(static_cast<float>(d));
        break;
      default:
        break;
    }
    v.push_back(bits);
  };
  if (is_float(t)) {
    for (double d :
         {0.0, -0.0, 1.0, -1.0, 0.5, 3.0, -2.5, 65504.0, 1e-7, -1e-7, 6e-8, 1e30, -1e30, 1e-40,
          std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
          std::numeric_limits<double>::quiet_NaN()})
      add_double(d);
    for (int i = 0; i < 40; ++i) add_double(std::uniform_real_distribution<double>(-100, 100)(rng));
  } else {
    const std::uint64_t mask =
        size_of(t) == 8 ? ~std::uint64_t{0} : (std::uint64_t{1} << (8 * size_of(t))) - 1;
    for (std::uint64_t x : {std::uint64_t{0}, std::uint64_t{1}, ~std::uint64_t{0}, std::uint64_t{2},
                            mask >> 1, (mask >> 1) + 1, std::uint64_t{127}})
      v.push_back(x & mask);
    for (int i = 0; i < 40; ++i) v.push_back(rng() & mask);
  }
  return v;
}

bool same(const std::uint64_t a, const std::uint64_t b, DataType t) {
  if (a == b) return true;
  auto nan = [t](std::uint64_t x) {
    switch (t) {
      case DataType::f32: {
        float f;
        std::memcpy(&f, &x, 4);
        return std::isnan(f);
      }
      case DataType::f64: {
        double d;
        std::memcpy(&d, &x, 8);
        return std::isnan(d);
      }
      case DataType::f16:
        return std::isnan(kernels::f16_to_f32(static_cast<std::uint16_t>(x)));
      case DataType::bf16:
        return std::isnan(kernels::bf16_to_f32(static_cast<std::uint16_t>(x)));
      default:
        return false;
    }
  };
  return nan(a) && nan(b);
}

TEST(CudaElementOps, EveryTypeAndReductionMatchesTheCpuReference) {
  std::mt19937_64 rng(7);
  for (DataType t : kTypes) {
    const auto values = values_of(t, rng);
    const std::size_t w = size_of(t);
    for (ReduceOp op : kOps) {
      for (int divisor : {1, 3}) {
        if (divisor != 1 && op != ReduceOp::avg) continue;
        std::size_t wrong = 0;
        for (std::uint64_t x : values) {
          for (std::uint64_t y : values) {
            std::uint64_t want = 0, got = 0;
            kernels::reference::reduce_copy(&want, nullptr, &x, &y, 1, t, op, divisor);
            dispatch_type(t, [&]<typename T>() {
              T a, b;
              std::memcpy(static_cast<void*>(&a), &x, sizeof(T));
              std::memcpy(static_cast<void*>(&b), &y, sizeof(T));
              dispatch_op(op, [&]<ReduceOp OP>() {
                const T r = kernels::cuda::reduce_element<T, OP>(a, b, divisor);
                std::memcpy(&got, &r, sizeof(T));
              });
            });
            if (!same(want, got, t) && wrong++ < 5)
              ADD_FAILURE() << to_string(t) << " " << to_string(op) << " / " << divisor << ": "
                            << std::hex << "x=" << x << " y=" << y << " cpu=" << want
                            << " cuda=" << got << " (" << w << "-byte elements)";
          }
        }
        EXPECT_EQ(wrong, 0u) << to_string(t) << " " << to_string(op);
      }
    }
  }
}

TEST(CudaElementOps, DivideMatchesTheCpuReference) {
  std::mt19937_64 rng(11);
  for (DataType t : kTypes) {
    for (std::uint64_t x : values_of(t, rng)) {
      for (int divisor : {1, 2, 7}) {
        std::uint64_t want = 0, got = 0;
        kernels::reference::divide(&want, &x, 1, t, divisor);
        dispatch_type(t, [&]<typename T>() {
          T a;
          std::memcpy(static_cast<void*>(&a), &x, sizeof(T));
          const T r = kernels::cuda::divide_element(a, divisor);
          std::memcpy(&got, &r, sizeof(T));
        });
        EXPECT_TRUE(same(want, got, t)) << to_string(t) << " " << std::hex << x << " / " << divisor
                                        << ": cpu " << want << " cuda " << got;
      }
    }
  }
}

}  // namespace
}  // namespace loom
