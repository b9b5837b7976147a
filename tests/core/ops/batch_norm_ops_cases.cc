// Gradient-check cases (f64, central finite differences) of FusedBatchNorm
// (core/ops/batch_norm_ops.cc): channels last (rank 2 and 4), a middle channel
// axis, and a case that differentiates through the returned batch mean and
// variance too; and CPU/GPU parity cases at sizes that cross the CUDA
// kernels' tiles (the gradient cases run as parity cases too).
// FusedBatchNormGrad has no gradient, so no second-order checks.
#include "core/ops/op_util.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

using In = std::vector<Output>;
using Outs = std::vector<Output>;

SPIRE_GRAD_CASE(fused_bn_nc, {"FusedBatchNorm", "[N, C]", {{5, 3}, {3}, {3}}, [](const In& x) -> Outs {
  return {ops::fused_batch_norm(x[0], x[1], x[2], 1e-3).y}; }});
SPIRE_GRAD_CASE(fused_bn_nhwc, {"FusedBatchNorm", "NHWC", {{2, 3, 3, 5}, {5}, {5}}, [](const In& x) -> Outs {
  return {ops::fused_batch_norm(x[0], x[1], x[2], 1e-5).y}; }});
SPIRE_GRAD_CASE(fused_bn_axis1, {"FusedBatchNorm", "axis 1 of rank 4", {{2, 3, 2, 3}, {3}, {3}}, [](const In& x) -> Outs {
  return {ops::fused_batch_norm(x[0], x[1], x[2], 1e-2, 1).y}; }});
SPIRE_GRAD_CASE(fused_bn_stats, {"FusedBatchNorm", "through mean and variance", {{3, 2, 4}, {4}, {4}}, [](const In& x) -> Outs {
  ops::FusedBatchNormOutputs r = ops::fused_batch_norm(x[0], x[1], x[2], 1e-3);
  return {r.y, r.mean, r.variance}; }});
SPIRE_GRAD_CASE(fused_bn_stats_axis0, {"FusedBatchNorm", "variance only, axis 0", {{3, 4}, {3}, {3}}, [](const In& x) -> Outs {
  return {ops::fused_batch_norm(x[0], x[1], x[2], 1e-3, 0).variance}; }});

// CPU/GPU parity at sizes that cross the CUDA kernels' tiles: 70 channels (3
// blocks of 32 lanes), 324 and 4,500 rows, a middle channel axis; the
// gradient op on its own (variance drawn positive).
SPIRE_PARITY_CASE(fbn_nhwc_70, {"FusedBatchNorm", "NHWC [4,9,9,70]", {{{4, 9, 9, 70}, DType::Invalid, -1, 3}, {{70}}, {{70}}},
  [](const In& x) -> Outs { ops::FusedBatchNormOutputs r = ops::fused_batch_norm(x[0], x[1], x[2]);
    return {r.y, r.mean, r.variance}; }});
SPIRE_PARITY_CASE(fbn_rows_4500, {"FusedBatchNorm", "[4500, 5]", {{{4500, 5}}, {{5}}, {{5}}},
  [](const In& x) -> Outs { ops::FusedBatchNormOutputs r = ops::fused_batch_norm(x[0], x[1], x[2], 1e-3);
    return {r.y, r.mean, r.variance}; }});
SPIRE_PARITY_CASE(fbn_axis1, {"FusedBatchNorm", "axis 1 of [3,40,5,7]", {{{3, 40, 5, 7}}, {{40}}, {{40}}},
  [](const In& x) -> Outs { ops::FusedBatchNormOutputs r = ops::fused_batch_norm(x[0], x[1], x[2], 1e-5, 1);
    return {r.y, r.mean, r.variance}; }});
SPIRE_PARITY_CASE(fbn_grad_nhwc, {"FusedBatchNormGrad", "NHWC [4,9,9,70]",
  {{{4, 9, 9, 70}}, {{4, 9, 9, 70}}, {{70}}, {{70}}, {{70}, DType::Invalid, 0.1, 2}},
  [](const In& x) -> Outs { return ops::fused_batch_norm_grad(x[0], x[1], x[2], x[3], x[4], 1e-5, -1); }});
SPIRE_PARITY_CASE(fbn_grad_axis1, {"FusedBatchNormGrad", "axis 1 of [3,40,5,7]",
  {{{3, 40, 5, 7}}, {{3, 40, 5, 7}}, {{40}}, {{40}}, {{40}, DType::Invalid, 0.1, 2}},
  [](const In& x) -> Outs { return ops::fused_batch_norm_grad(x[0], x[1], x[2], x[3], x[4], 1e-3, 1); }});

}  // namespace
}  // namespace spire::testing
