#include "core/shape.h"

#include <algorithm>
#include <sstream>

#include "core/error.h"

namespace spire {

void Shape::invalid_dim(size_t i) const {
  throw_error("invalid shape ", to_string(), ": dimension ", i, " is ", dims_[i],
              " (a dimension is >= 0, or -1 for unknown)");
}

bool Shape::is_fully_defined() const {
  return std::all_of(dims_.begin(), dims_.end(), [](int64_t d) { return d >= 0; });
}

int64_t Shape::num_elements() const {
  int64_t n = 1;
  for (int64_t d : dims_)
    if (d < 0) return -1;
  for (int64_t d : dims_)
    if (__builtin_mul_overflow(n, d, &n))
      throw_error("shape ", to_string(), " has more elements than fit in a 64-bit integer");
  return n;
}

uint64_t Shape::num_bytes(size_t element_size) const {
  int64_t n = num_elements();
  SPIRE_CHECK(n >= 0, "shape ", to_string(), " is not fully defined: it has no byte size");
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(n), static_cast<uint64_t>(element_size), &bytes) ||
      bytes > static_cast<uint64_t>(INT64_MAX))
    throw_error("shape ", to_string(), " with ", element_size, "-byte elements needs more bytes ",
                "than fit in a 64-bit integer");
  return bytes;
}

bool Shape::is_compatible_with(const Shape& concrete) const {
  if (concrete.rank() != rank()) return false;
  for (int i = 0; i < rank(); ++i)
    if (dims_[i] >= 0 && dims_[i] != concrete.dims_[i]) return false;
  return true;
}

std::string Shape::to_string() const {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (i) os << ", ";
    if (dims_[i] == -1)
      os << '?';
    else
      os << dims_[i];
  }
  os << ']';
  return os.str();
}

bool broadcast_shapes(const Shape& a, const Shape& b, Shape* out) {
  int r = std::max(a.rank(), b.rank());
  std::vector<int64_t> dims(static_cast<size_t>(r));
  for (int i = 0; i < r; ++i) {
    int ia = a.rank() - r + i, ib = b.rank() - r + i;
    int64_t da = ia >= 0 ? a[ia] : 1;
    int64_t db = ib >= 0 ? b[ib] : 1;
    int64_t d;
    if (da == 1)
      d = db;
    else if (db == 1)
      d = da;
    else if (da < 0)
      d = db;  // unknown vs known (!= 1): must equal the known one at run time
    else if (db < 0)
      d = da;
    else if (da == db)
      d = da;
    else
      return false;
    dims[static_cast<size_t>(i)] = d;
  }
  *out = Shape(std::move(dims));
  return true;
}

int normalize_axis(int64_t axis, int rank, const std::string& what) {
  if (axis < -rank || axis >= rank)
    throw_error(what, ": axis ", axis, " is out of range for rank ", rank);
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

std::vector<int64_t> row_major_strides(const Shape& s) {
  std::vector<int64_t> st(static_cast<size_t>(s.rank()));
  int64_t acc = 1;
  for (int i = s.rank() - 1; i >= 0; --i) {
    st[static_cast<size_t>(i)] = acc;
    acc *= s[i];
  }
  return st;
}

}  // namespace spire
