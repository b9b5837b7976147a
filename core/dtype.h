// Element types of tensors (DType), their sizes and names, and the mapping
// between C++ types and DType used by kernels. f16/bf16 are storage types:
// Cast converts to and from them, the collective ops carry them, and
// MatMul/BatchMatMul compute with them (f32 accumulation; mixed precision,
// layers/mixed_precision.h); the other math kernels do not take them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"

namespace spire {

enum class DType : uint8_t { F32 = 0, F64, I32, I64, Bool, F16, BF16, Invalid = 255 };

/// Bytes per element.
size_t dtype_size(DType dt);
/// Short lowercase name ("f32", "f64", "i32", "i64", "bool", "f16", "bf16").
const char* dtype_name(DType dt);
/// Inverse of dtype_name; throws spire::Error for an unknown name.
DType dtype_from_name(const std::string& name);
/// True for f16, bf16, f32, f64.
bool is_floating(DType dt);
/// True for i32, i64.
bool is_integer(DType dt);

/// Maps a C++ element type to its DType (kernels use this to dispatch).
template <typename T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::F32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::F64; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::I32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::I64; };
template <> struct DTypeOf<bool> { static constexpr DType value = DType::Bool; };
template <typename T> inline constexpr DType dtype_of = DTypeOf<T>::value;

inline std::ostream& operator<<(std::ostream& os, DType dt) { return os << dtype_name(dt); }

/// Calls f(T{}) with T the C++ type of `dt` among f32, f64, i32, i64, bool;
/// throws for other dtypes. `what` names the caller for the error message.
template <typename F>
decltype(auto) visit_dtype(DType dt, const char* what, F&& f) {
  switch (dt) {
    case DType::F32: return f(float{});
    case DType::F64: return f(double{});
    case DType::I32: return f(int32_t{});
    case DType::I64: return f(int64_t{});
    case DType::Bool: return f(bool{});
    default: throw_error(what, ": dtype ", dtype_name(dt), " is not supported");
  }
}

}  // namespace spire
