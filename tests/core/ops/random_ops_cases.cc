// Gradient-check cases for the random ops (core/ops/random_ops.cc). Only
// Dropout is differentiable. The finite-difference check runs the graph many
// times and each run draws a new mask, so the case uses rate 0 (a mask of
// ones); the gradient for rate > 0 is checked against the mask fetched in
// the same run by DropoutGradient.MatchesMaskOfTheSameRun
// (random_ops_test.cc).
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

using In = std::vector<Output>;
using Outs = std::vector<Output>;

SPIRE_GRAD_CASE(dropout_rate0, {"Dropout", "rate 0 (mask of ones)", {{2, 3}},
  [](const In& x) -> Outs { return {ops::dropout(x[0], 0.0)}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(dropout_rate0_both_outputs, {"Dropout", "rate 0, y and mask fetched", {{4}},
  [](const In& x) -> Outs {
    Output y = ops::dropout(ops::mul(x[0], x[0]), 0.0);
    return {y, Output(y.node, 1)};
  }, nullptr});

}  // namespace
}  // namespace spire::testing
