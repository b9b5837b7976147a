#include "core/dtype.h"

namespace spire {

size_t dtype_size(DType dt) {
  switch (dt) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::Bool: return 1;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    default: throw_error("dtype_size: invalid dtype ", int(dt));
  }
}

const char* dtype_name(DType dt) {
  switch (dt) {
    case DType::F32: return "f32";
    case DType::F64: return "f64";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::Bool: return "bool";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    default: return "invalid";
  }
}

DType dtype_from_name(const std::string& name) {
  for (DType dt : {DType::F32, DType::F64, DType::I32, DType::I64, DType::Bool, DType::F16,
                   DType::BF16})
    if (name == dtype_name(dt)) return dt;
  throw_error("unknown dtype name '", name, "'");
}

bool is_floating(DType dt) {
  return dt == DType::F32 || dt == DType::F64 || dt == DType::F16 || dt == DType::BF16;
}
bool is_integer(DType dt) { return dt == DType::I32 || dt == DType::I64; }

}  // namespace spire
