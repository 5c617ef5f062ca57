#include "loom/ddp/tensor.hpp"

#include <cblas.h>

// OpenBLAS's own call (its cblas.h declares it too); here so that any cblas.h will do.
extern "C" void openblas_set_num_threads(int num_threads);

#include <algorithm>
#include <cstring>
#include <new>

#include <fmt/format.h>

#include "loom/loom.hpp"

namespace loom::ddp {

namespace {
// OpenBLAS starts as many threads as cores; with a rank per core that oversubscribes the CPU.
const bool kOneBlasThread = [] {
  openblas_set_num_threads(1);
  return true;
}();
}  // namespace

Tensor::Tensor(std::vector<std::size_t> shape) : shape_(std::move(shape)) {
  numel_ = 1;
  for (std::size_t d : shape_) numel_ *= d;
  if (numel_ > 0) {
    auto* p = static_cast<float*>(::operator new(numel_ * sizeof(float), std::align_val_t(64)));
    std::memset(p, 0, numel_ * sizeof(float));
    owner_ = std::shared_ptr<void>(p, [](void* q) { ::operator delete(q, std::align_val_t(64)); });
    data_ = p;
  }
}

Tensor Tensor::view(std::shared_ptr<void> owner, float* data, std::vector<std::size_t> shape) {
  Tensor t;
  t.owner_ = std::move(owner);
  t.data_ = data;
  t.shape_ = std::move(shape);
  t.numel_ = 1;
  for (std::size_t d : t.shape_) t.numel_ *= d;
  return t;
}

Tensor Tensor::view_of(std::size_t offset, std::vector<std::size_t> shape) const {
  Tensor t = view(owner_, data_ + offset, std::move(shape));
  if (offset + t.numel_ > numel_)
    throw InvalidArgument(fmt::format("Tensor::view_of: elements [{}, {}) of a tensor of {}",
                                      offset, offset + t.numel_, numel_));
  return t;
}

Tensor Tensor::clone() const {
  Tensor t(shape_);
  if (numel_) std::memcpy(t.data_, data_, numel_ * sizeof(float));
  return t;
}

void Tensor::fill(float value) {
  std::fill(data_, data_ + numel_, value);
}

void Tensor::assign(const Tensor& other) {
  if (other.numel_ != numel_)
    throw InvalidArgument(
        fmt::format("Tensor::assign: {} elements into a tensor of {}", other.numel_, numel_));
  if (numel_ && other.data_ != data_) std::memmove(data_, other.data_, numel_ * sizeof(float));
}

std::string Tensor::shape_string() const {
  return fmt::format("[{}]", fmt::join(shape_, ", "));
}

void matmul(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, Tensor& c,
            float alpha, float beta) {
  (void)kOneBlasThread;
  if (a.rank() != 2 || b.rank() != 2 || c.rank() != 2)
    throw InvalidArgument(fmt::format("matmul: tensors must be 2-D, got {} {} {}", a.shape_string(),
                                      b.shape_string(), c.shape_string()));
  const std::size_t m = transpose_a ? a.dim(1) : a.dim(0);
  const std::size_t k = transpose_a ? a.dim(0) : a.dim(1);
  const std::size_t kb = transpose_b ? b.dim(1) : b.dim(0);
  const std::size_t n = transpose_b ? b.dim(0) : b.dim(1);
  if (k != kb || c.dim(0) != m || c.dim(1) != n)
    throw InvalidArgument(fmt::format("matmul: {}{} x {}{} does not fit {}", a.shape_string(),
                                      transpose_a ? "^T" : "", b.shape_string(),
                                      transpose_b ? "^T" : "", c.shape_string()));
  if (m == 0 || n == 0) return;
  if (k == 0) {  // an empty sum: BLAS rejects a zero leading dimension
    for (std::size_t i = 0; i < c.numel(); ++i) c[i] = beta == 0.0f ? 0.0f : beta * c[i];
    return;
  }
  cblas_sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans,
              transpose_b ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), alpha, a.data(), static_cast<int>(a.dim(1)), b.data(),
              static_cast<int>(b.dim(1)), beta, c.data(), static_cast<int>(c.dim(1)));
}

void set_compute_threads(int threads) {
  openblas_set_num_threads(std::max(1, threads));
}

}  // namespace loom::ddp
