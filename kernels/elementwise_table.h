// The table of elementwise ops: op name, shared functor (functors.h) and
// dtypes. The CPU and CUDA kernel files both register from this one table
// through a visitor, so the two devices cover the same ops and dtypes.
#pragma once

#include <initializer_list>

#include "core/dtype.h"
#include "kernels/functors.h"

namespace spire::kernels {

/// Calls v.binary(name, functor, dtypes) and v.unary(name, functor, dtypes)
/// for every table entry. (Integer Div, which must reject zero divisors,
/// and attribute-carrying ops such as LeakyRelu and Gelu are registered per
/// device, from kernels/elementwise_attrs.h.)
template <typename Visitor>
void visit_elementwise_table(Visitor&& v) {
  using namespace functors;
  constexpr DType F32 = DType::F32, F64 = DType::F64, I32 = DType::I32, I64 = DType::I64,
                  B = DType::Bool;
  v.binary("Add", Add{}, {F32, F64, I32, I64});
  v.binary("Sub", Sub{}, {F32, F64, I32, I64});
  v.binary("Mul", Mul{}, {F32, F64, I32, I64});
  v.binary("Div", Div{}, {F32, F64});
  v.binary("Pow", Pow{}, {F32, F64});
  v.binary("GeluGrad", GeluGrad{}, {F32, F64});
  v.binary("Maximum", Maximum{}, {F32, F64, I32, I64});
  v.binary("Minimum", Minimum{}, {F32, F64, I32, I64});
  v.binary("Equal", Equal{}, {F32, F64, I32, I64, B});
  v.binary("NotEqual", NotEqual{}, {F32, F64, I32, I64, B});
  v.binary("Less", Less{}, {F32, F64, I32, I64});
  v.binary("LessEqual", LessEqual{}, {F32, F64, I32, I64});
  v.binary("Greater", Greater{}, {F32, F64, I32, I64});
  v.binary("GreaterEqual", GreaterEqual{}, {F32, F64, I32, I64});
  v.binary("LogicalAnd", LogicalAnd{}, {B});
  v.binary("LogicalOr", LogicalOr{}, {B});
  v.unary("LogicalNot", LogicalNot{}, {B});
  v.unary("Neg", Neg{}, {F32, F64, I32, I64});
  v.unary("Abs", Abs{}, {F32, F64, I32, I64});
  v.unary("Square", Square{}, {F32, F64, I32, I64});
  v.unary("Sign", Sign{}, {F32, F64, I32, I64});
  v.unary("Relu", Relu{}, {F32, F64, I32, I64});
  v.unary("Exp", Exp{}, {F32, F64});
  v.unary("Log", Log{}, {F32, F64});
  v.unary("Sqrt", Sqrt{}, {F32, F64});
  v.unary("Rsqrt", Rsqrt{}, {F32, F64});
  v.unary("Erf", Erf{}, {F32, F64});
  v.unary("Sigmoid", Sigmoid{}, {F32, F64});
  v.unary("Tanh", Tanh{}, {F32, F64});
  v.unary("Softplus", Softplus{}, {F32, F64});
}

}  // namespace spire::kernels
