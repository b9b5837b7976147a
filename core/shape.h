// Shape: the dimensions of a tensor, row-major. A dimension of -1 means
// "unknown until run time" (allowed on placeholders and in inferred shapes);
// the rank is always known. Any other negative dimension is invalid: the
// constructors and set_dim() throw spire::Error naming it (as TensorFlow's
// TensorShape does). Also the NumPy broadcasting rule used by shape
// inference and kernels.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>
#include <vector>

namespace spire {

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) { check_dims(); }
  explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) { check_dims(); }

  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t dim(int i) const { return dims_.at(static_cast<size_t>(i)); }
  int64_t operator[](int i) const { return dims_[static_cast<size_t>(i)]; }
  void set_dim(int i, int64_t d) {
    dims_.at(static_cast<size_t>(i)) = d;
    if (d < -1) invalid_dim(static_cast<size_t>(i));
  }
  const std::vector<int64_t>& dims() const { return dims_; }
  std::vector<int64_t>& mutable_dims() { return dims_; }

  /// True when no dimension is unknown (-1).
  bool is_fully_defined() const;
  /// Product of the dimensions (1 for a scalar); -1 when not fully defined.
  /// Throws spire::Error when the product overflows int64.
  int64_t num_elements() const;
  /// Bytes of a tensor of this (fully defined) shape with elements of
  /// `element_size` bytes; throws spire::Error on overflow or a partial shape.
  uint64_t num_bytes(size_t element_size) const;
  /// True when `concrete` (a fully defined shape) fits this possibly partial shape.
  bool is_compatible_with(const Shape& concrete) const;
  /// "[2, ?, 3]" (-1 prints as ?; a dimension below -1, which only
  /// mutable_dims() can make, prints as it is).
  std::string to_string() const;

  bool operator==(const Shape& o) const { return dims_ == o.dims_; }
  bool operator!=(const Shape& o) const { return dims_ != o.dims_; }

 private:
  void check_dims() const {
    for (size_t i = 0; i < dims_.size(); ++i)
      if (dims_[i] < -1) invalid_dim(i);
  }
  [[noreturn]] void invalid_dim(size_t i) const;

  std::vector<int64_t> dims_;
};

inline std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << s.to_string(); }

/// Result shape of broadcasting `a` with `b` (NumPy rules, unknown dims
/// propagate). Returns false when incompatible.
bool broadcast_shapes(const Shape& a, const Shape& b, Shape* out);

/// Normalizes a possibly negative axis for a tensor of rank `rank`; throws
/// spire::Error naming `what` when out of range.
int normalize_axis(int64_t axis, int rank, const std::string& what);

/// Row-major strides (in elements) of a fully defined shape.
std::vector<int64_t> row_major_strides(const Shape& s);

}  // namespace spire
