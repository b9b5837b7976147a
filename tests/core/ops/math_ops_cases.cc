// Gradient-check cases for the elementwise math ops (core/ops/math_ops.cc).
#include "core/ops/op_util.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

using In = std::vector<Output>;
using Outs = std::vector<Output>;
double positive(int, std::mt19937_64& r) { return std::uniform_real_distribution<double>(0.5, 2.0)(r); }
double away_from_zero(int, std::mt19937_64& r) {
  double v = std::uniform_real_distribution<double>(0.3, 2.0)(r);
  return (r() & 1) ? v : -v;
}

SPIRE_GRAD_CASE(add_bcast, {"Add", "broadcast", {{2, 3}, {3}}, [](const In& x) -> Outs { return {ops::add(x[0], x[1])}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(add_bcast2, {"Add", "both broadcast", {{4, 1}, {1, 5}}, [](const In& x) -> Outs { return {ops::add(x[0], x[1])}; }});
SPIRE_GRAD_CASE(add_scalar, {"Add", "scalar", {{}, {2, 3, 1}}, [](const In& x) -> Outs { return {ops::add(x[0], x[1])}; }});
SPIRE_GRAD_CASE(sub_bcast, {"Sub", "broadcast", {{3, 1, 2}, {1, 4, 2}}, [](const In& x) -> Outs { return {ops::sub(x[0], x[1])}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(mul_bcast, {"Mul", "broadcast", {{2, 3}, {2, 1}}, [](const In& x) -> Outs { return {ops::mul(x[0], x[1])}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(mul_same, {"Mul", "same input twice", {{5}}, [](const In& x) -> Outs { return {ops::mul(x[0], x[0])}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(div_bcast, {"Div", "broadcast", {{3, 2}, {2}}, [](const In& x) -> Outs { return {ops::div(x[0], x[1])}; }, away_from_zero, 2e-6, true});
SPIRE_GRAD_CASE(pow_pos, {"Pow", "positive base", {{2, 3}, {3}}, [](const In& x) -> Outs { return {ops::pow(x[0], x[1])}; }, positive, 2e-6, true});
SPIRE_GRAD_CASE(maximum, {"Maximum", "broadcast", {{3, 4}, {4}}, [](const In& x) -> Outs { return {ops::maximum(x[0], x[1])}; }});
SPIRE_GRAD_CASE(minimum, {"Minimum", "broadcast", {{3, 4}, {3, 1}}, [](const In& x) -> Outs { return {ops::minimum(x[0], x[1])}; }});
SPIRE_GRAD_CASE(add_n, {"AddN", "three", {{2, 3}, {2, 3}, {2, 3}}, [](const In& x) -> Outs { return {ops::add_n({x[0], x[1], x[2]})}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(neg, {"Neg", "odd shape", {{3, 5}}, [](const In& x) -> Outs { return {ops::neg(x[0])}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(exp, {"Exp", "odd shape", {{7}}, [](const In& x) -> Outs { return {ops::exp(x[0])}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(log, {"Log", "positive", {{2, 3}}, [](const In& x) -> Outs { return {ops::log(x[0])}; }, positive, 2e-6, true});
SPIRE_GRAD_CASE(sqrt, {"Sqrt", "positive", {{5}}, [](const In& x) -> Outs { return {ops::sqrt(x[0])}; }, positive, 2e-6, true});
SPIRE_GRAD_CASE(rsqrt, {"Rsqrt", "positive", {{5}}, [](const In& x) -> Outs { return {ops::rsqrt(x[0])}; }, positive, 2e-6, true});
SPIRE_GRAD_CASE(abs, {"Abs", "away from 0", {{2, 3}}, [](const In& x) -> Outs { return {ops::abs(x[0])}; }, away_from_zero});
SPIRE_GRAD_CASE(square, {"Square", "odd", {{3, 1, 2}}, [](const In& x) -> Outs { return {ops::square(x[0])}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(erf, {"Erf", "odd", {{6}}, [](const In& x) -> Outs { return {ops::erf(x[0])}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(relu, {"Relu", "away from 0", {{4, 3}}, [](const In& x) -> Outs { return {ops::relu(x[0])}; }, away_from_zero});
SPIRE_GRAD_CASE(sigmoid, {"Sigmoid", "odd", {{2, 5}}, [](const In& x) -> Outs { return {ops::sigmoid(x[0])}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(tanh, {"Tanh", "odd", {{2, 5}}, [](const In& x) -> Outs { return {ops::tanh(x[0])}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(gelu, {"Gelu", "odd", {{3, 3}}, [](const In& x) -> Outs { return {ops::gelu(x[0])}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(gelu_grad, {"GeluGrad", "odd", {{2, 5}, {2, 5}}, [](const In& x) -> Outs {
  return {ops::gelu_grad(x[0], x[1])}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(gelu_tanh, {"Gelu", "tanh approximation", {{2, 7}}, [](const In& x) -> Outs {
  return {ops::gelu(x[0], ops::GeluApproximate::kTanh)}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(softplus, {"Softplus", "odd", {{3, 3}}, [](const In& x) -> Outs { return {ops::softplus(x[0])}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(leaky_relu, {"LeakyRelu", "alpha 0.1", {{4, 2}}, [](const In& x) -> Outs { return {ops::leaky_relu(x[0], 0.1)}; }, away_from_zero});
SPIRE_GRAD_CASE(select, {"Select", "broadcast cond", {{2, 3}, {2, 3}, {3}}, [](const In& x) -> Outs {
  return {ops::where(ops::greater(x[0], ops::zeros_like(x[0])), x[1], x[2])}; }});
// Cast through f32 is exact for multiples of 1/8 with a step of 1/4 (linear function).
SPIRE_GRAD_CASE(cast_ff, {"Cast", "f64->f32->f64", {{2, 2}}, [](const In& x) -> Outs {
  return {ops::cast(ops::cast(x[0], DType::F32), DType::F64)}; },
  [](int, std::mt19937_64& r) { return static_cast<double>(static_cast<int>(r() % 33) - 16) / 8; },
  1e-6, false, 0.25});
SPIRE_GRAD_CASE(identity, {"Identity", "vector", {{3}}, [](const In& x) -> Outs { return {ops::mul(ops::identity(x[0]), x[0])}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(sum_to_like, {"SumToLike", "rows", {{3, 4}, {4}}, [](const In& x) -> Outs {
  return {ops::mul(ops::sum_to_like(ops::mul(x[0], x[0]), x[1]), x[1])}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(broadcast_like, {"BroadcastLike", "to matrix", {{1, 4}, {3, 4}}, [](const In& x) -> Outs {
  return {ops::mul(ops::broadcast_like(x[0], x[1]), x[1])}; }, nullptr, 2e-6, true});

}  // namespace
}  // namespace spire::testing
