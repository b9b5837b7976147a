#include "core/attr.h"

#include <cstring>
#include <sstream>

namespace spire {

const char* AttrValue::type_name() const {
  static const char* names[] = {"none",  "int",   "float", "bool",  "string",
                                "ints",  "floats", "dtype", "shape", "tensor", "strings"};
  return names[v_.index()];
}

std::string AttrValue::to_string() const {
  std::ostringstream os;
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
          os << "none";
        } else if constexpr (std::is_same_v<T, bool>) {
          os << (v ? "true" : "false");
        } else if constexpr (std::is_same_v<T, std::string>) {
          os << '"' << v << '"';
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>> ||
                             std::is_same_v<T, std::vector<double>> ||
                             std::is_same_v<T, std::vector<std::string>>) {
          os << '[';
          for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
          os << ']';
        } else if constexpr (std::is_same_v<T, Tensor>) {
          os << v.to_string(6);
        } else {
          os << v;
        }
      },
      v_);
  return os.str();
}

bool AttrValue::operator==(const AttrValue& o) const {
  if (v_.index() != o.v_.index()) return false;
  if (auto* t = std::get_if<Tensor>(&v_)) {
    const Tensor& u = std::get<Tensor>(o.v_);
    if (t->dtype() != u.dtype() || t->shape() != u.shape()) return false;
    Tensor a = t->to(Device::cpu()), b = u.to(Device::cpu());
    return a.nbytes() == 0 || std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
  }
  return std::visit(
      [&](const auto& a) {
        using T = std::decay_t<decltype(a)>;
        if constexpr (std::is_same_v<T, Tensor>) {
          return false;  // handled above
        } else {
          return a == std::get<T>(o.v_);
        }
      },
      v_);
}

}  // namespace spire
