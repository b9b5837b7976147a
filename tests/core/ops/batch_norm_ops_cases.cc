// Gradient-check cases (f64, central finite differences) of FusedBatchNorm
// (core/ops/batch_norm_ops.cc): channels last (rank 2 and 4), a middle channel
// axis, and a case that differentiates through the returned batch mean and
// variance too. They also run as CPU/GPU parity cases of FusedBatchNorm and
// FusedBatchNormGrad in f32 and f64. FusedBatchNormGrad has no gradient, so
// no second-order checks.
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

}  // namespace
}  // namespace spire::testing
