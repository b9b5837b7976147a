// Tensor: a reference-counted, contiguous row-major buffer with a dtype, a
// fully defined shape and a device. Copies of a Tensor share the buffer;
// clone() makes a deep copy. Kernels allocate outputs as Tensors through the
// device's Allocator.
#pragma once

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/shape.h"

namespace spire {

/// Owned device memory; freed through its allocator when the last Tensor
/// referring to it goes away.
class Buffer {
 public:
  Buffer(Allocator* alloc, size_t bytes);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* data() const { return data_; }
  size_t size() const { return size_; }
  Allocator* allocator() const { return alloc_; }

 private:
  Allocator* alloc_;
  void* data_;
  size_t size_;
};

class Tensor {
 public:
  /// An undefined tensor (defined() is false).
  Tensor() = default;
  /// Allocates an uninitialized tensor; `shape` must be fully defined.
  Tensor(DType dtype, const Shape& shape, Device device = Device::cpu());

  /// A CPU tensor holding a copy of `values` (size must match the shape).
  template <typename T>
  static Tensor from_vector(const Shape& shape, const std::vector<T>& values);
  /// A CPU scalar (rank 0).
  template <typename T>
  static Tensor scalar(T value) {
    return from_vector<T>(Shape{}, std::vector<T>{value});
  }
  /// A CPU tensor with every element equal to `value` (converted to dtype).
  static Tensor full(DType dtype, const Shape& shape, double value);
  static Tensor zeros(DType dtype, const Shape& shape) { return full(dtype, shape, 0.0); }

  bool defined() const { return buffer_ != nullptr || dtype_ != DType::Invalid; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return shape_.rank(); }
  int64_t dim(int i) const { return shape_.dim(i); }
  int64_t num_elements() const { return num_elements_; }
  size_t nbytes() const { return static_cast<size_t>(num_elements_) * dtype_size(dtype_); }
  Device device() const { return device_; }
  /// True when both share the same buffer (same storage).
  bool shares_buffer_with(const Tensor& o) const { return buffer_ && buffer_ == o.buffer_; }
  /// Number of Tensors sharing this buffer (copy-on-write decisions).
  long buffer_use_count() const { return buffer_.use_count(); }

  void* raw_data() const {
    return buffer_ ? static_cast<char*>(buffer_->data()) + offset_ : nullptr;
  }
  /// Typed pointer; throws when T does not match the dtype.
  template <typename T>
  T* data() const {
    check_type(dtype_of<T>, "data");
    return static_cast<T*>(raw_data());
  }
  /// Copies the elements to a vector (CPU or device tensor).
  template <typename T>
  std::vector<T> to_vector() const;
  /// The single element of a one-element tensor, converted to T.
  template <typename T>
  T item() const;
  /// Element i converted to double (any dtype, CPU tensors).
  double element_as_double(int64_t i) const;

  /// Same storage seen with another shape of equal element count.
  Tensor reshaped(const Shape& shape) const;
  /// Deep copy on the same device.
  Tensor clone() const;
  /// Copy to another device (or this tensor itself when already there).
  Tensor to(const Device& device) const;
  /// Marks this tensor's memory as used by `stream` (a backend's opaque
  /// stream handle, e.g. a communication stream), so that it is not reused
  /// before that stream's work queued by the time it is freed (PyTorch's
  /// Tensor.record_stream). No-op for CPU tensors.
  void record_stream(void* stream) const {
    if (buffer_ && buffer_->data()) buffer_->allocator()->record_stream(buffer_->data(), stream);
  }
  /// Fills a CPU tensor's bytes with a NaN-like pattern (for tests that
  /// poison outputs before a kernel runs).
  void poison();
  /// "f32[2, 3] {1, 2, 3, ...}".
  std::string to_string(int64_t max_elements = 16) const;
  /// "f32[2, 3]".
  std::string type_string() const;

 private:
  void check_type(DType want, const char* what) const;

  std::shared_ptr<Buffer> buffer_;
  size_t offset_ = 0;
  DType dtype_ = DType::Invalid;
  Shape shape_;
  int64_t num_elements_ = 0;
  Device device_;
};

template <typename T>
Tensor Tensor::from_vector(const Shape& shape, const std::vector<T>& values) {
  Tensor t(dtype_of<T>, shape);
  SPIRE_CHECK(static_cast<int64_t>(values.size()) == t.num_elements(),
              "Tensor::from_vector: ", values.size(), " values for shape ", shape.to_string());
  if constexpr (std::is_same_v<T, bool>) {
    bool* d = t.data<bool>();
    for (size_t i = 0; i < values.size(); ++i) d[i] = values[i];
  } else if (!values.empty()) {
    std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(T));
  }
  return t;
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  check_type(dtype_of<T>, "to_vector");
  Tensor host = to(Device::cpu());
  const T* p = host.data<T>();
  return std::vector<T>(p, p + num_elements_);
}

template <typename T>
T Tensor::item() const {
  SPIRE_CHECK(num_elements_ == 1, "Tensor::item: tensor ", type_string(),
              " has ", num_elements_, " elements, expected 1");
  Tensor host = to(Device::cpu());
  return static_cast<T>(host.element_as_double(0));
}

}  // namespace spire
