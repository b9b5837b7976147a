// CPU/GPU parity cases for the elementwise family and the random ops
// (kernels/cuda/elementwise.cu, kernels/cuda/random_kernels.cu) where the
// gradient cases (math_ops_cases.cc, random_ops_cases.cc), which also run as
// parity cases in f32 and f64, do not reach: integer and bool dtypes,
// comparisons, logical ops, Sign, integer Div, Cast pairs, Select, AddN
// with 1, 3 and 9 inputs (9 takes two launches), odd sizes (1, 7 and
// 1000003 elements: the vector body plus a scalar tail), scalar and strided
// broadcasting ([5,1,7] with [3,1]), and the random ops, whose graphs built
// the same way (explicit op seeds) must draw the same numbers on both
// devices: uniforms and dropout masks exactly, normals up to libm rounding.
// ParityCases.RunOnTheCpuTwiceWithTheSameResult (parity_test.cc) checks on
// every build that each case builds and runs, reproducibly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "core/ops/op_util.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

using In = std::vector<Output>;
using Outs = std::vector<Output>;
using BinaryFn = Output (*)(const Output&, const Output&, const std::string&);
using UnaryFn = Output (*)(const Output&, const std::string&);

constexpr DType F32 = DType::F32, F64 = DType::F64, I32 = DType::I32, I64 = DType::I64,
                B = DType::Bool, kFloat = DType::Invalid;  // kFloat: the case's f32/f64

// Cases whose inputs all have explicit dtypes run once.
std::vector<DType> runs_for(DType dt) {
  if (dt == kFloat) return {F32, F64};
  return {F32};
}
std::string label(DType dt) { return dt == kFloat ? "float" : dtype_name(dt); }

// Integer inputs in [-9, 9] (small enough that Mul and Square cannot overflow);
// bool inputs in [0, 1].
ParityInput input(const Shape& s, DType dt) {
  if (dt == B) return {s, dt, 0, 1};
  if (dt == I32 || dt == I64) return {s, dt, -9, 9};
  return {s, dt, -2, 2};
}

ParityCase binary(const char* op, BinaryFn f, DType dt, const Shape& a, const Shape& b) {
  return {op, label(dt) + " " + a.to_string() + " with " + b.to_string(),
          {input(a, dt), input(b, dt)},
          [f](const In& x) -> Outs { return {f(x[0], x[1], "")}; }, runs_for(dt)};
}

ParityCase unary(const char* op, UnaryFn f, DType dt, const Shape& a) {
  return {op, label(dt) + " " + a.to_string(), {input(a, dt)},
          [f](const In& x) -> Outs { return {f(x[0], "")}; }, runs_for(dt)};
}

// Float comparisons of random values are almost never equal, so Equal and
// NotEqual also compare x with maximum(x, y) (equal where x >= y).
ParityCase float_equality(const char* op, BinaryFn f, const Shape& a, const Shape& b) {
  return {op, "float with ties " + a.to_string() + " with " + b.to_string(),
          {input(a, kFloat), input(b, kFloat)},
          [f](const In& x) -> Outs { return {f(x[0], ops::maximum(x[0], x[1]), "")}; }};
}

ParityCase cast(DType from, DType to, const Shape& s = {5, 7}) {
  ParityInput in = input(s, from);
  if (from == kFloat) in.lo = -50, in.hi = 50;  // truncation to integers, nonzero to bool
  return {"Cast", label(from) + " to " + label(to), {in},
          [to](const In& x) -> Outs {
            DType target = to == kFloat ? (x[0].dtype() == F32 ? F64 : F32) : to;
            return {ops::cast(x[0], target)};
          },
          runs_for(from)};
}

ParityCase select(DType dt, const Shape& c, const Shape& a, const Shape& b) {
  return {"Select", label(dt) + " " + c.to_string() + ", " + a.to_string() + ", " + b.to_string(),
          {input(c, B), input(a, dt), input(b, dt)},
          [](const In& x) -> Outs { return {ops::where(x[0], x[1], x[2])}; }, runs_for(dt)};
}

ParityCase add_n(DType dt, int count, const Shape& s) {
  return {"AddN", label(dt) + " " + std::to_string(count) + " inputs " + s.to_string(),
          std::vector<ParityInput>(static_cast<size_t>(count), input(s, dt)),
          [](const In& x) -> Outs { return {ops::add_n(x)}; }, runs_for(dt)};
}

const Shape kA{5, 1, 7}, kB{3, 1}, kBig{1000003}, kSeven{7}, kOne{1}, kScalar{};

// The cases of this file are parity_cases()[kFirstCase, kEndCase) (one
// translation unit initializes in order); the test at the end runs them on
// the CPU.

// ---- binary table ops in the integer dtypes, with strided broadcasting -------
SPIRE_PARITY_CASE(add_i32, {binary("Add", ops::add, I32, kA, kB)});
SPIRE_PARITY_CASE(add_i64, {binary("Add", ops::add, I64, kA, kB)});
SPIRE_PARITY_CASE(sub_i32, {binary("Sub", ops::sub, I32, kB, kA)});
SPIRE_PARITY_CASE(sub_i64, {binary("Sub", ops::sub, I64, kA, kB)});
SPIRE_PARITY_CASE(mul_i32, {binary("Mul", ops::mul, I32, kA, kB)});
SPIRE_PARITY_CASE(mul_i64, {binary("Mul", ops::mul, I64, kA, kScalar)});
SPIRE_PARITY_CASE(maximum_i32, {binary("Maximum", ops::maximum, I32, kA, kB)});
SPIRE_PARITY_CASE(maximum_i64, {binary("Maximum", ops::maximum, I64, kSeven, kSeven)});
SPIRE_PARITY_CASE(minimum_i32, {binary("Minimum", ops::minimum, I32, kA, kB)});
SPIRE_PARITY_CASE(minimum_i64, {binary("Minimum", ops::minimum, I64, kA, kB)});

// ---- float table ops at odd sizes and broadcasts ------------------------------------
SPIRE_PARITY_CASE(add_float_bcast, {binary("Add", ops::add, kFloat, kA, kB)});
SPIRE_PARITY_CASE(add_float_big, {binary("Add", ops::add, kFloat, kBig, kBig)});
SPIRE_PARITY_CASE(add_float_one, {binary("Add", ops::add, kFloat, kOne, kOne)});
SPIRE_PARITY_CASE(add_float_scalar_rank3, {binary("Add", ops::add, kFloat, kScalar, Shape{3, 1, 7})});
SPIRE_PARITY_CASE(sub_float_seven, {binary("Sub", ops::sub, kFloat, kSeven, kSeven)});
SPIRE_PARITY_CASE(mul_float_scalar_big, {binary("Mul", ops::mul, kFloat, kBig, kScalar)});
SPIRE_PARITY_CASE(maximum_float_big_scalar, {binary("Maximum", ops::maximum, kFloat, kScalar, kBig)});
SPIRE_PARITY_CASE(minimum_float_bcast, {binary("Minimum", ops::minimum, kFloat, kA, kB)});
SPIRE_PARITY_CASE(exp_float_big, {unary("Exp", ops::exp, kFloat, kBig)});
SPIRE_PARITY_CASE(tanh_float_seven, {unary("Tanh", ops::tanh, kFloat, kSeven)});
SPIRE_PARITY_CASE(sigmoid_float_one, {unary("Sigmoid", ops::sigmoid, kFloat, kOne)});
SPIRE_PARITY_CASE(gelu_float_big, {unary("Gelu", ops::gelu, kFloat, kBig)});
SPIRE_PARITY_CASE(gelu_grad_float_big, {binary("GeluGrad", ops::gelu_grad, kFloat, kBig, kBig)});
SPIRE_PARITY_CASE(gelu_tanh_float_big, {"Gelu", "tanh approximation " + kBig.to_string(), {input(kBig, kFloat)},
  [](const In& x) -> Outs { return {ops::gelu(x[0], ops::GeluApproximate::kTanh)}; }});
SPIRE_PARITY_CASE(leaky_relu_big, {"LeakyRelu", "float alpha 0.3 " + kBig.to_string(), {input(kBig, kFloat)},
  [](const In& x) -> Outs { return {ops::leaky_relu(x[0], 0.3)}; }});

// ---- unary table ops in the integer dtypes; Sign (no gradient case) --------------
SPIRE_PARITY_CASE(neg_i32, {unary("Neg", ops::neg, I32, kSeven)});
SPIRE_PARITY_CASE(neg_i64, {unary("Neg", ops::neg, I64, kBig)});
SPIRE_PARITY_CASE(abs_i32, {unary("Abs", ops::abs, I32, kBig)});
SPIRE_PARITY_CASE(abs_i64, {unary("Abs", ops::abs, I64, kSeven)});
SPIRE_PARITY_CASE(square_i32, {unary("Square", ops::square, I32, kA)});
SPIRE_PARITY_CASE(square_i64, {unary("Square", ops::square, I64, kOne)});
SPIRE_PARITY_CASE(sign_i32, {unary("Sign", ops::sign, I32, kSeven)});
SPIRE_PARITY_CASE(sign_i64, {unary("Sign", ops::sign, I64, kA)});
SPIRE_PARITY_CASE(sign_float, {unary("Sign", ops::sign, kFloat, kBig)});
SPIRE_PARITY_CASE(relu_i32, {unary("Relu", ops::relu, I32, kBig)});
SPIRE_PARITY_CASE(relu_i64, {unary("Relu", ops::relu, I64, kSeven)});

// ---- integer Div (divisors away from 0: the CPU kernel rejects 0; negative
// divisors check truncation toward zero) -----------------------------------------
ParityCase integer_div(DType dt, const Shape& a, const Shape& b) {
  return {"Div", label(dt) + " " + a.to_string() + " by " + b.to_string(),
          {{a, dt, -50, 50}, {b, dt, 1, 9}},
          [](const In& x) -> Outs { return {ops::div(x[0], x[1]), ops::div(x[0], ops::neg(x[1]))}; },
          runs_for(dt)};
}
SPIRE_PARITY_CASE(div_i32, {integer_div(I32, kA, kB)});
SPIRE_PARITY_CASE(div_i64, {integer_div(I64, kBig, kBig)});
SPIRE_PARITY_CASE(div_i32_scalar, {integer_div(I32, kSeven, kScalar)});

// ---- comparisons (bool outputs: vectors of 4 or 2 bools per 16-byte load) --------
SPIRE_PARITY_CASE(equal_float, {float_equality("Equal", ops::equal, kA, kB)});
SPIRE_PARITY_CASE(equal_i32, {binary("Equal", ops::equal, I32, kA, kB)});
SPIRE_PARITY_CASE(equal_i64, {binary("Equal", ops::equal, I64, kBig, kBig)});
SPIRE_PARITY_CASE(equal_bool, {binary("Equal", ops::equal, B, kA, kB)});
SPIRE_PARITY_CASE(not_equal_float, {float_equality("NotEqual", ops::not_equal, kBig, kBig)});
SPIRE_PARITY_CASE(not_equal_i32, {binary("NotEqual", ops::not_equal, I32, kSeven, kScalar)});
SPIRE_PARITY_CASE(not_equal_i64, {binary("NotEqual", ops::not_equal, I64, kA, kB)});
SPIRE_PARITY_CASE(not_equal_bool, {binary("NotEqual", ops::not_equal, B, kBig, kBig)});
SPIRE_PARITY_CASE(less_float, {binary("Less", ops::less, kFloat, kBig, kScalar)});
SPIRE_PARITY_CASE(less_i32, {binary("Less", ops::less, I32, kA, kB)});
SPIRE_PARITY_CASE(less_i64, {binary("Less", ops::less, I64, kSeven, kSeven)});
SPIRE_PARITY_CASE(less_equal_float, {binary("LessEqual", ops::less_equal, kFloat, kA, kB)});
SPIRE_PARITY_CASE(less_equal_i32, {binary("LessEqual", ops::less_equal, I32, kBig, kBig)});
SPIRE_PARITY_CASE(less_equal_i64, {binary("LessEqual", ops::less_equal, I64, kA, kB)});
SPIRE_PARITY_CASE(greater_float, {binary("Greater", ops::greater, kFloat, kSeven, kSeven)});
SPIRE_PARITY_CASE(greater_i32, {binary("Greater", ops::greater, I32, kA, kB)});
SPIRE_PARITY_CASE(greater_i64, {binary("Greater", ops::greater, I64, kOne, kOne)});
SPIRE_PARITY_CASE(greater_equal_float, {binary("GreaterEqual", ops::greater_equal, kFloat, kA, kB)});
SPIRE_PARITY_CASE(greater_equal_i32, {binary("GreaterEqual", ops::greater_equal, I32, kScalar, kA)});
SPIRE_PARITY_CASE(greater_equal_i64, {binary("GreaterEqual", ops::greater_equal, I64, kBig, kBig)});

// ---- logical ops (bool: 16 per vector) ---------------------------------------------
SPIRE_PARITY_CASE(logical_and_bcast, {binary("LogicalAnd", ops::logical_and, B, kA, kB)});
SPIRE_PARITY_CASE(logical_and_big, {binary("LogicalAnd", ops::logical_and, B, kBig, kBig)});
SPIRE_PARITY_CASE(logical_or_bcast, {binary("LogicalOr", ops::logical_or, B, kA, kB)});
SPIRE_PARITY_CASE(logical_or_scalar, {binary("LogicalOr", ops::logical_or, B, kSeven, kScalar)});
SPIRE_PARITY_CASE(logical_not_big, {unary("LogicalNot", ops::logical_not, B, kBig)});
SPIRE_PARITY_CASE(logical_not_one, {unary("LogicalNot", ops::logical_not, B, kOne)});
// Bools from comparisons too (not depending on how bool inputs are drawn).
SPIRE_PARITY_CASE(logical_from_compare, {"LogicalAnd", "from comparisons", {input(kA, kFloat), input(kB, kFloat)},
  [](const In& x) -> Outs {
    Output p = ops::greater(x[0], ops::zeros_like(x[0]));
    Output q = ops::less(x[1], ops::zeros_like(x[1]));
    return {ops::logical_and(p, q), ops::logical_or(p, q), ops::logical_not(p)};
  }});

// ---- Cast: every pair of f32, f64, i32, i64, bool ------------------------------------
SPIRE_PARITY_CASE(cast_float_float, {cast(kFloat, kFloat)});
// f16 / bf16 storage: out and back (the 16-bit kernels both ways), and between the two.
SPIRE_PARITY_CASE(cast_half_storage,
                  {"Cast", "float to f16, bf16 and back", {{kBig, kFloat, -70000, 70000}},
                   [](const In& x) -> Outs {
                     const DType t = x[0].dtype();
                     Output h = ops::cast(x[0], DType::F16), b = ops::cast(x[0], DType::BF16);
                     return {ops::cast(h, t), ops::cast(b, t), ops::cast(ops::cast(h, DType::BF16), t),
                             ops::cast(ops::cast(b, DType::F16), DType::I32)};
                   },
                   runs_for(kFloat)});
SPIRE_PARITY_CASE(cast_float_i32, {cast(kFloat, I32)});
SPIRE_PARITY_CASE(cast_float_i64, {cast(kFloat, I64, kBig)});
SPIRE_PARITY_CASE(cast_float_bool, {cast(kFloat, B)});
SPIRE_PARITY_CASE(cast_i32_f32, {cast(I32, F32)});
SPIRE_PARITY_CASE(cast_i32_f64, {cast(I32, F64, kSeven)});
SPIRE_PARITY_CASE(cast_i32_i64, {cast(I32, I64)});
SPIRE_PARITY_CASE(cast_i32_bool, {cast(I32, B)});
SPIRE_PARITY_CASE(cast_i64_f32, {cast(I64, F32)});
SPIRE_PARITY_CASE(cast_i64_f64, {cast(I64, F64)});
SPIRE_PARITY_CASE(cast_i64_i32, {cast(I64, I32, kBig)});
SPIRE_PARITY_CASE(cast_i64_bool, {cast(I64, B, kOne)});
SPIRE_PARITY_CASE(cast_bool_f32, {cast(B, F32, kBig)});
SPIRE_PARITY_CASE(cast_bool_f64, {cast(B, F64)});
SPIRE_PARITY_CASE(cast_bool_i32, {cast(B, I32)});
SPIRE_PARITY_CASE(cast_bool_i64, {cast(B, I64, kSeven)});

// ---- Select with broadcasting -------------------------------------------------------
SPIRE_PARITY_CASE(select_float_bcast, {select(kFloat, kA, kB, Shape{7})});
SPIRE_PARITY_CASE(select_i32_bcast, {select(I32, kA, kB, Shape{7})});
SPIRE_PARITY_CASE(select_i64_bcast, {select(I64, kB, kA, kScalar)});
SPIRE_PARITY_CASE(select_float_scalar_cond_big, {select(kFloat, kScalar, kBig, kBig)});
SPIRE_PARITY_CASE(select_i32_big, {select(I32, kBig, kBig, kScalar)});

// ---- AddN: 1, 3 and 9 inputs (9: a second launch accumulates) --------------------------
SPIRE_PARITY_CASE(add_n_1_float, {add_n(kFloat, 1, kSeven)});
SPIRE_PARITY_CASE(add_n_3_float, {add_n(kFloat, 3, Shape{5, 7})});
SPIRE_PARITY_CASE(add_n_9_float_big, {add_n(kFloat, 9, kBig)});
SPIRE_PARITY_CASE(add_n_1_i32, {add_n(I32, 1, kOne)});
SPIRE_PARITY_CASE(add_n_3_i32, {add_n(I32, 3, kBig)});
SPIRE_PARITY_CASE(add_n_9_i64, {add_n(I64, 9, Shape{3, 7})});
SPIRE_PARITY_CASE(add_n_9_i32, {add_n(I32, 9, kSeven)});

// ---- BroadcastTo / BroadcastLike in the non-float dtypes ------------------------------
SPIRE_PARITY_CASE(broadcast_to_i32, {"BroadcastTo", "i32 [3,1] to [5,3,7]", {input(kB, I32)},
  [](const In& x) -> Outs { return {ops::broadcast_to(x[0], Shape{5, 3, 7})}; }, runs_for(I32)});
SPIRE_PARITY_CASE(broadcast_to_bool, {"BroadcastTo", "bool [5,1,7] to [5,3,7]", {input(kA, B)},
  [](const In& x) -> Outs { return {ops::broadcast_to(x[0], Shape{5, 3, 7})}; }, runs_for(B)});
SPIRE_PARITY_CASE(broadcast_to_i64_scalar_big, {"BroadcastTo", "i64 scalar to [1000003]", {input(kScalar, I64)},
  [](const In& x) -> Outs { return {ops::broadcast_to(x[0], kBig)}; }, runs_for(I64)});
SPIRE_PARITY_CASE(broadcast_to_float_bcast, {"BroadcastTo", "float [5,1,7] to [2,5,3,7]", {input(kA, kFloat)},
  [](const In& x) -> Outs { return {ops::broadcast_to(x[0], Shape{2, 5, 3, 7})}; }});
SPIRE_PARITY_CASE(broadcast_like_i32, {"BroadcastLike", "i32 [3,1] like [5,3,7]", {input(kB, I32), input(Shape{5, 3, 7}, I32)},
  [](const In& x) -> Outs { return {ops::broadcast_like(x[0], x[1])}; }, runs_for(I32)});
SPIRE_PARITY_CASE(broadcast_like_i64, {"BroadcastLike", "i64 [7] like [4,7]", {input(kSeven, I64), input(Shape{4, 7}, I64)},
  [](const In& x) -> Outs { return {ops::broadcast_like(x[0], x[1])}; }, runs_for(I64)});

// ---- random ops: same op seed, same numbers on both devices ----------------------------
// Uniforms are exact in f32 and f64; normals go through double log/sin/cos
// (libm vs CUDA's, within an ulp or two), well inside the default bounds.
ParityCase random_case(const char* op, DType dt, const Shape& s,
                       Output (*f)(const Shape&, DType, double, double, int64_t,
                                   const std::string&, Graph*),
                       double a, double b, int64_t seed) {
  ParityCase c{op, label(dt) + " " + s.to_string() + " seed " + std::to_string(seed), {},
               [=](const In&) -> Outs { return {f(s, dt, a, b, seed, "", nullptr)}; }, {dt}};
  c.tol_f32 = 0;  // overridden below for normals
  c.tol_f64 = 0;
  return c;
}
ParityCase normal_case(const char* op, DType dt, const Shape& s,
                       Output (*f)(const Shape&, DType, double, double, int64_t,
                                   const std::string&, Graph*),
                       int64_t seed) {
  ParityCase c = random_case(op, dt, s, f, 0.5, 2.0, seed);
  c.tol_f32 = 1e-5;
  c.tol_f64 = 1e-12;
  return c;
}

SPIRE_PARITY_CASE(random_uniform_f32_big, {random_case("RandomUniform", F32, kBig, ops::random_uniform, -3, 5, 17)});
SPIRE_PARITY_CASE(random_uniform_f64_seven, {random_case("RandomUniform", F64, kSeven, ops::random_uniform, 0, 1, 5)});
SPIRE_PARITY_CASE(random_uniform_f32_one, {random_case("RandomUniform", F32, kOne, ops::random_uniform, 0, 1, 3)});
SPIRE_PARITY_CASE(random_uniform_f64_big, {random_case("RandomUniform", F64, kBig, ops::random_uniform, -1, 1, 11)});
SPIRE_PARITY_CASE(random_normal_f32_big, {normal_case("RandomNormal", F32, kBig, ops::random_normal, 23)});
SPIRE_PARITY_CASE(random_normal_f64_seven, {normal_case("RandomNormal", F64, Shape{7, 13}, ops::random_normal, 29)});
SPIRE_PARITY_CASE(truncated_normal_f32_big, {normal_case("TruncatedNormal", F32, kBig, ops::truncated_normal, 31)});
SPIRE_PARITY_CASE(truncated_normal_f64, {normal_case("TruncatedNormal", F64, Shape{3, 1, 7}, ops::truncated_normal, 37)});

ParityCase dropout_case(const Shape& s, double rate, int64_t seed) {
  ParityCase c{"Dropout", "float " + s.to_string() + " rate " + std::to_string(rate),
               {input(s, kFloat)},
               [=](const In& x) -> Outs {
                 Output y = ops::dropout(x[0], rate, seed);
                 return {y, Output(y.node, 1)};
               }};
  c.tol_f32 = 0;  // the masks are exact and y = x * mask is one rounding
  c.tol_f64 = 0;
  return c;
}
SPIRE_PARITY_CASE(dropout_big, {dropout_case(kBig, 0.3, 41)});
SPIRE_PARITY_CASE(dropout_small, {dropout_case(Shape{5, 7}, 0.5, 43)});
SPIRE_PARITY_CASE(dropout_one, {dropout_case(kOne, 0.1, 47)});

}  // namespace
}  // namespace spire::testing
