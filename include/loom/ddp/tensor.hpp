// Contiguous row-major float32 tensors, sharing their storage on copy (like torch.Tensor), and
// the matrix product the layers need.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace loom::ddp {

class Tensor {
 public:
  Tensor() = default;
  // Zero-filled, 64-byte aligned.
  explicit Tensor(std::vector<std::size_t> shape);
  Tensor(std::initializer_list<std::size_t> shape) : Tensor(std::vector<std::size_t>(shape)) {}
  // A tensor over `data`, which `owner` keeps alive (a view into a larger buffer).
  static Tensor view(std::shared_ptr<void> owner, float* data, std::vector<std::size_t> shape);

  const std::vector<std::size_t>& shape() const { return shape_; }
  std::size_t dim(std::size_t i) const { return shape_.at(i); }
  std::size_t rank() const { return shape_.size(); }
  std::size_t numel() const { return numel_; }
  bool empty() const { return numel_ == 0; }
  float* data() { return data_; }
  const float* data() const { return data_; }
  float& operator[](std::size_t i) { return data_[i]; }
  float operator[](std::size_t i) const { return data_[i]; }

  // Elements [offset, offset + product(shape)) of this tensor, sharing its storage.
  Tensor view_of(std::size_t offset, std::vector<std::size_t> shape) const;
  Tensor clone() const;  // a deep copy with storage of its own
  void fill(float value);
  void zero() { fill(0.0f); }
  // Copies the values of `other` (same number of elements) into this tensor's storage.
  void assign(const Tensor& other);
  std::string shape_string() const;  // "[64, 784]"

 private:
  std::shared_ptr<void> owner_;
  float* data_ = nullptr;
  std::vector<std::size_t> shape_;
  std::size_t numel_ = 0;
};

// c = alpha * op(a) * op(b) + beta * c for 2-D tensors, op = transpose when asked; through
// OpenBLAS (sgemm), one thread per process unless set_compute_threads says otherwise.
void matmul(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, Tensor& c,
            float alpha = 1.0f, float beta = 0.0f);
// Threads the BLAS may use in this process (1 by default: one rank per core).
void set_compute_threads(int threads);

}  // namespace loom::ddp
