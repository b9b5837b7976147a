// AttrValue: the typed attribute values attached to graph nodes (ints,
// floats, bools, strings, int/float/string lists, dtypes, shapes, tensors), and
// AttrMap, a node's name -> value table.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"
#include "core/tensor.h"

namespace spire {

class AttrValue {
 public:
  using Value = std::variant<std::monostate, int64_t, double, bool, std::string,
                             std::vector<int64_t>, std::vector<double>, DType, Shape, Tensor,
                             std::vector<std::string>>;

  AttrValue() = default;
  AttrValue(int v) : v_(int64_t{v}) {}
  AttrValue(long v) : v_(int64_t{v}) {}
  AttrValue(long long v) : v_(static_cast<int64_t>(v)) {}
  AttrValue(double v) : v_(v) {}
  AttrValue(float v) : v_(double{v}) {}
  AttrValue(bool v) : v_(v) {}
  AttrValue(const char* v) : v_(std::string(v)) {}
  AttrValue(std::string v) : v_(std::move(v)) {}
  AttrValue(std::vector<int64_t> v) : v_(std::move(v)) {}
  AttrValue(const std::vector<int>& v) : v_(std::vector<int64_t>(v.begin(), v.end())) {}
  AttrValue(std::initializer_list<int64_t> v) : v_(std::vector<int64_t>(v)) {}
  AttrValue(std::vector<double> v) : v_(std::move(v)) {}
  AttrValue(DType v) : v_(v) {}
  AttrValue(Shape v) : v_(std::move(v)) {}
  AttrValue(Tensor v) : v_(std::move(v)) {}
  AttrValue(std::vector<std::string> v) : v_(std::move(v)) {}

  const Value& value() const { return v_; }
  bool empty() const { return std::holds_alternative<std::monostate>(v_); }
  /// Name of the held type ("int", "float", "bool", "string", "ints", "floats", "dtype",
  /// "shape", "tensor", "strings").
  const char* type_name() const;

  /// The value as T; ints convert to double on request. Throws spire::Error
  /// (mentioning `what`) on a type mismatch.
  template <typename T>
  T get(const std::string& what) const {
    if constexpr (std::is_same_v<T, double>) {
      if (auto* i = std::get_if<int64_t>(&v_)) return static_cast<double>(*i);
    }
    if constexpr (std::is_same_v<T, int> || std::is_same_v<T, int64_t>) {
      if (auto* i = std::get_if<int64_t>(&v_)) return static_cast<T>(*i);
    } else {
      if (auto* p = std::get_if<T>(&v_)) return *p;
    }
    throw_error(what, ": attribute holds ", type_name(), ", requested another type");
  }

  /// Human-readable value (tensors abbreviated).
  std::string to_string() const;
  bool operator==(const AttrValue& o) const;

 private:
  Value v_;
};

using AttrMap = std::map<std::string, AttrValue>;

}  // namespace spire
