// Gradient-check cases (f64, central finite differences) for the fused
// normalization ops of core/ops/norm_ops.cc: LayerNorm with and without beta
// at several shapes (rank 1, 2, 3; odd C), gradients that flow in through the
// mean and rstd outputs, and LayerNormGrad itself (its gradient, and through
// it the second order of LayerNorm). They also run as CPU/GPU parity cases
// (tests/kernels/cuda/parity_test.cc).
#include <random>

#include "core/ops/norm_ops.h"
#include "core/ops/op_util.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

using In = std::vector<Output>;
using Outs = std::vector<Output>;

// gamma and beta away from zero: a zero gamma would make dx vanish.
double gamma_like(int, std::mt19937_64& r) {
  return std::uniform_real_distribution<double>(0.5, 1.5)(r);
}

SPIRE_GRAD_CASE(layer_norm_2d, {"LayerNorm", "[4, 5] with beta", {{4, 5}, {5}, {5}},
  [](const In& x) -> Outs { return {ops::layer_norm(x[0], x[1], x[2]).y}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(layer_norm_3d_odd, {"LayerNorm", "[2, 3, 7] with beta", {{2, 3, 7}, {7}, {7}},
  [](const In& x) -> Outs { return {ops::layer_norm(x[0], x[1], x[2]).y}; }});
SPIRE_GRAD_CASE(layer_norm_3d_no_beta, {"LayerNorm", "[3, 2, 5] without beta", {{3, 2, 5}, {5}},
  [](const In& x) -> Outs { return {ops::layer_norm(x[0], x[1]).y}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(layer_norm_rank1, {"LayerNorm", "rank 1 [6], epsilon 0.1", {{6}, {6}},
  [](const In& x) -> Outs { return {ops::layer_norm(x[0], x[1], Output(), 0.1).y}; }});
SPIRE_GRAD_CASE(layer_norm_c1, {"LayerNorm", "C = 1 (y = beta)", {{3, 1}, {1}, {1}},
  [](const In& x) -> Outs { return {ops::layer_norm(x[0], x[1], x[2]).y}; }});
// The statistics outputs used downstream: their gradients add into dx.
SPIRE_GRAD_CASE(layer_norm_stats, {"LayerNorm", "y, mean and rstd all used", {{3, 5}, {5}, {5}},
  [](const In& x) -> Outs {
    ops::LayerNormOutputs o = ops::layer_norm(x[0], x[1], x[2], 0.01);
    return {o.y, o.mean, o.rstd}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(layer_norm_stats_only, {"LayerNorm", "only mean and rstd used", {{2, 2, 3}, {3}},
  [](const In& x) -> Outs {
    ops::LayerNormOutputs o = ops::layer_norm(x[0], x[1], Output(), 0.01);
    return {o.mean, o.rstd}; }});

// LayerNormGrad on its own, mean and rstd as free inputs (rstd positive).
double grad_inputs(int i, std::mt19937_64& r) {
  if (i == 4) return std::uniform_real_distribution<double>(0.5, 1.5)(r);
  if (i == 2) return gamma_like(i, r);
  return std::uniform_real_distribution<double>(-2, 2)(r);
}
SPIRE_GRAD_CASE(layer_norm_grad, {"LayerNormGrad", "[3, 5], free mean and rstd",
  {{3, 5}, {3, 5}, {5}, {3}, {3}},
  [](const In& x) -> Outs {
    ops::LayerNormGradOutputs g = ops::layer_norm_grad(x[0], x[1], x[2], x[3], x[4]);
    return {g.dx, g.dgamma, g.dbeta}; }, grad_inputs, 2e-6, true});
SPIRE_GRAD_CASE(layer_norm_grad_3d, {"LayerNormGrad", "[2, 2, 3], dx only",
  {{2, 2, 3}, {2, 2, 3}, {3}, {2, 2}, {2, 2}},
  [](const In& x) -> Outs {
    return {ops::layer_norm_grad(x[0], x[1], x[2], x[3], x[4]).dx}; }, grad_inputs});
SPIRE_GRAD_CASE(layer_norm_grad_dgamma, {"LayerNormGrad", "[4, 3], dgamma only",
  {{4, 3}, {4, 3}, {3}, {4}, {4}},
  [](const In& x) -> Outs {
    return {ops::layer_norm_grad(x[0], x[1], x[2], x[3], x[4]).dgamma}; }, grad_inputs});

}  // namespace
}  // namespace spire::testing
