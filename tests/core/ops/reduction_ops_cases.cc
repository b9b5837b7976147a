// Gradient-check cases for the reductions (core/ops/reduction_ops.cc):
// odd shapes with size-1 dims, negative axes, keepdims, all-axes, and
// second order for Sum, Mean, Max and Prod (away from zero); L2Loss.
#include "core/ops/op_util.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

using In = std::vector<Output>;
using Outs = std::vector<Output>;

double away_from_zero(int, std::mt19937_64& r) {
  double v = std::uniform_real_distribution<double>(0.5, 1.5)(r);
  return (r() & 1) ? v : -v;
}
// Every third value is exactly zero (Prod is multilinear, so central
// differences are exact there too).
double every_third_zero(int, std::mt19937_64& r) {
  static int k = 0;
  double v = away_from_zero(0, r);
  return (k++ % 3 == 0) ? 0.0 : v;
}

SPIRE_GRAD_CASE(sum_axes, {"Sum", "axes {0,2} of {3,1,2}", {{3, 1, 2}}, [](const In& x) -> Outs {
  return {ops::sum(x[0], {0, 2})}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(sum_sq_neg_keep, {"Sum", "x*x, axis -1, keepdims", {{3, 1, 2}}, [](const In& x) -> Outs {
  return {ops::sum(ops::mul(x[0], x[0]), {-1}, true)}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(sum_all_sq, {"Sum", "all axes of x*x", {{2, 3}}, [](const In& x) -> Outs {
  return {ops::sum(ops::mul(x[0], x[0]))}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(sum_bcast, {"Sum", "of a broadcast product", {{3, 1}, {4}}, [](const In& x) -> Outs {
  return {ops::sum(ops::mul(x[0], x[1]), {0})}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(mean_axes, {"Mean", "x*x over axis 1, keepdims", {{3, 4, 2}}, [](const In& x) -> Outs {
  return {ops::mean(ops::mul(x[0], x[0]), {1}, true)}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(mean_all, {"Mean", "all of x*x", {{3, 1, 2}}, [](const In& x) -> Outs {
  return {ops::mean(ops::mul(x[0], x[0]))}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(mean_neg, {"Mean", "axes {-1,0}", {{2, 5}}, [](const In& x) -> Outs {
  return {ops::mean(x[0], {-1, 0})}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(max_rows, {"Max", "x*x over axis 1", {{3, 4}}, [](const In& x) -> Outs {
  return {ops::max(ops::mul(x[0], x[0]), {1})}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(max_all_keep, {"Max", "all axes, keepdims", {{3, 1, 2}}, [](const In& x) -> Outs {
  return {ops::max(x[0], {}, true)}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(min_cols, {"Min", "axis 0", {{4, 3}}, [](const In& x) -> Outs {
  return {ops::min(x[0], {0})}; }});
SPIRE_GRAD_CASE(min_neg_keep, {"Min", "axis -1 keepdims of {3,1,2}", {{3, 1, 2}}, [](const In& x) -> Outs {
  return {ops::min(ops::mul(x[0], x[0]), {-1}, true)}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(prod_rows, {"Prod", "axis 1, away from zero", {{3, 4}}, [](const In& x) -> Outs {
  return {ops::prod(x[0], {1})}; }, away_from_zero, 2e-6, true});
SPIRE_GRAD_CASE(prod_all_keep, {"Prod", "all axes of {3,1,2}, keepdims", {{3, 1, 2}}, [](const In& x) -> Outs {
  return {ops::prod(x[0], {}, true)}; }, away_from_zero, 2e-6, true});
// Rows of {2,6} with zeros at k % 3 == 0: two zeros per row (all gradients 0),
// and {4,3}: one zero per row (the zero gets the product of the others).
SPIRE_GRAD_CASE(prod_zeros, {"Prod", "with exact zeros", {{2, 6}, {4, 3}}, [](const In& x) -> Outs {
  return {ops::prod(x[0], {1}), ops::prod(x[1], {-1})}; }, every_third_zero});
SPIRE_GRAD_CASE(l2_loss, {"L2Loss", "of {3,1,2}", {{3, 1, 2}}, [](const In& x) -> Outs {
  return {ops::l2_loss(x[0])}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(l2_loss_long, {"L2Loss", "of {70} (lanes and a tail)", {{70}}, [](const In& x) -> Outs {
  return {ops::l2_loss(x[0])}; }});

}  // namespace
}  // namespace spire::testing
