// Gradient-check cases (f64, central finite differences) for the neural-network ops of
// core/ops/nn_ops.cc. Shapes are small and odd so every element can be perturbed; most
// cases also check second-order gradients, since every nn gradient is built from
// differentiable ops (matmuls, convs and their backprop ops, pooling gradients).
#include "core/ops/op_util.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

using In = std::vector<Output>;
using Outs = std::vector<Output>;
using Ints = std::vector<int64_t>;

// A zero tensor of `like`'s dtype (only its shape is used; the dtype follows
// the case so the case also builds in f32 for the GPU parity test).
Output zeros_const(const Shape& s, const Output& like) {
  return ops::constant(Tensor::zeros(like.dtype(), s));
}

// ---- matmul ------------------------------------------------------------------------------

SPIRE_GRAD_CASE(matmul_nn, {"MatMul", "plain", {{3, 4}, {4, 5}}, [](const In& x) -> Outs {
  return {ops::matmul(x[0], x[1])}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(matmul_tn, {"MatMul", "transpose_a", {{4, 3}, {4, 2}}, [](const In& x) -> Outs {
  return {ops::matmul(x[0], x[1], true, false)}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(matmul_nt, {"MatMul", "transpose_b", {{3, 4}, {5, 4}}, [](const In& x) -> Outs {
  return {ops::matmul(x[0], x[1], false, true)}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(matmul_tt, {"MatMul", "both transposed", {{4, 3}, {2, 4}}, [](const In& x) -> Outs {
  return {ops::matmul(x[0], x[1], true, true)}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(matmul_square, {"MatMul", "x @ x", {{3, 3}}, [](const In& x) -> Outs {
  return {ops::matmul(x[0], x[0])}; }, nullptr, 2e-6, true});

SPIRE_GRAD_CASE(bmm, {"BatchMatMul", "equal batch", {{2, 3, 4}, {2, 4, 2}}, [](const In& x) -> Outs {
  return {ops::batch_matmul(x[0], x[1])}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(bmm_adj, {"BatchMatMul", "adj_a adj_b", {{2, 4, 3}, {2, 2, 4}}, [](const In& x) -> Outs {
  return {ops::batch_matmul(x[0], x[1], true, true)}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(bmm_adj_a, {"BatchMatMul", "adj_a", {{2, 4, 3}, {2, 4, 2}}, [](const In& x) -> Outs {
  return {ops::batch_matmul(x[0], x[1], true, false)}; }});
SPIRE_GRAD_CASE(bmm_adj_b, {"BatchMatMul", "adj_b", {{2, 3, 4}, {2, 2, 4}}, [](const In& x) -> Outs {
  return {ops::batch_matmul(x[0], x[1], false, true)}; }});
SPIRE_GRAD_CASE(bmm_bcast, {"BatchMatMul", "broadcast batch", {{2, 1, 3, 2}, {3, 2, 2}}, [](const In& x) -> Outs {
  return {ops::batch_matmul(x[0], x[1])}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(bmm_shared_b, {"BatchMatMul", "rank-2 b", {{3, 2, 4}, {4, 3}}, [](const In& x) -> Outs {
  return {ops::batch_matmul(x[0], x[1])}; }, nullptr, 2e-6, true});

// ---- softmax and cross-entropy ---------------------------------------------------------------

SPIRE_GRAD_CASE(softmax, {"Softmax", "last axis", {{3, 5}}, [](const In& x) -> Outs {
  return {ops::softmax(x[0])}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(softmax_axis0, {"Softmax", "axis 0 of rank 3", {{4, 3, 2}}, [](const In& x) -> Outs {
  return {ops::softmax(x[0], 0)}; }});
SPIRE_GRAD_CASE(log_softmax, {"LogSoftmax", "last axis", {{3, 5}}, [](const In& x) -> Outs {
  return {ops::log_softmax(x[0])}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(log_softmax_axis1, {"LogSoftmax", "middle axis", {{2, 4, 3}}, [](const In& x) -> Outs {
  return {ops::log_softmax(x[0], 1)}; }});
SPIRE_GRAD_CASE(sparse_xent, {"SparseSoftmaxCrossEntropyWithLogits", "i32 labels", {{4, 5}}, [](const In& x) -> Outs {
  Output labels = ops::constant(Tensor::from_vector<int32_t>({4}, {0, 3, 1, 4}));
  return {ops::sparse_softmax_cross_entropy_with_logits(x[0], labels)}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(sparse_xent_i64, {"SparseSoftmaxCrossEntropyWithLogits", "i64 labels", {{3, 3}}, [](const In& x) -> Outs {
  Output labels = ops::constant(Tensor::from_vector<int64_t>({3}, {2, 2, 0}));
  return {ops::sparse_softmax_cross_entropy_with_logits(x[0], labels)}; }});

// ---- conv2d and its backprop ops ------------------------------------------------------------------

SPIRE_GRAD_CASE(conv_same_s2, {"Conv2D", "SAME stride 2", {{2, 5, 5, 3}, {3, 3, 3, 2}}, [](const In& x) -> Outs {
  return {ops::conv2d(x[0], x[1], {2, 2}, "SAME")}; }});
SPIRE_GRAD_CASE(conv_same_s2_2nd, {"Conv2D", "SAME stride 2, second order", {{1, 5, 5, 2}, {3, 3, 2, 2}}, [](const In& x) -> Outs {
  return {ops::conv2d(x[0], x[1], {2, 2}, "SAME")}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(conv_dilated, {"Conv2D", "dilation 2 SAME", {{1, 6, 5, 2}, {2, 2, 2, 3}}, [](const In& x) -> Outs {
  return {ops::conv2d(x[0], x[1], {1, 1}, "SAME", {2, 2})}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(conv_valid, {"Conv2D", "VALID strides {2,1}", {{2, 5, 4, 2}, {2, 3, 2, 2}}, [](const In& x) -> Outs {
  return {ops::conv2d(x[0], x[1], {2, 1}, "VALID")}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(conv_1x1, {"Conv2D", "1x1", {{2, 3, 3, 3}, {1, 1, 3, 2}}, [](const In& x) -> Outs {
  return {ops::conv2d(x[0], x[1])}; }, nullptr, 2e-6, true});

SPIRE_GRAD_CASE(conv_bp_input, {"Conv2DBackpropInput", "SAME stride 2", {{3, 3, 2, 2}, {1, 3, 3, 2}}, [](const In& x) -> Outs {
  return {ops::conv2d_backprop_input(zeros_const({1, 5, 5, 2}, x[0]), x[0], x[1], {2, 2}, "SAME", {1, 1})}; },
  nullptr, 2e-6, true});
SPIRE_GRAD_CASE(conv_bp_input_dil, {"Conv2DBackpropInput", "VALID dilation 2", {{2, 2, 2, 1}, {2, 2, 3, 1}}, [](const In& x) -> Outs {
  return {ops::conv2d_backprop_input(zeros_const({2, 4, 5, 2}, x[0]), x[0], x[1], {1, 1}, "VALID", {2, 2})}; },
  nullptr, 2e-6, true});
SPIRE_GRAD_CASE(conv_bp_filter, {"Conv2DBackpropFilter", "SAME stride 2", {{1, 5, 5, 2}, {1, 3, 3, 2}}, [](const In& x) -> Outs {
  return {ops::conv2d_backprop_filter(x[0], zeros_const({3, 3, 2, 2}, x[0]), x[1], {2, 2}, "SAME", {1, 1})}; },
  nullptr, 2e-6, true});
SPIRE_GRAD_CASE(conv_bp_filter_dil, {"Conv2DBackpropFilter", "SAME dilation 2", {{2, 5, 4, 1}, {2, 5, 4, 2}}, [](const In& x) -> Outs {
  return {ops::conv2d_backprop_filter(x[0], zeros_const({2, 2, 1, 2}, x[0]), x[1], {1, 1}, "SAME", {2, 2})}; },
  nullptr, 2e-6, true});

// ---- pooling ------------------------------------------------------------------------------------
// Uniform random inputs: ties within a window (which would make max pooling
// non-differentiable) have probability zero, and the seeded inputs are fixed.

SPIRE_GRAD_CASE(max_pool_same, {"MaxPool", "SAME stride 2", {{2, 5, 5, 2}}, [](const In& x) -> Outs {
  return {ops::max_pool(x[0], {3, 3}, {2, 2}, "SAME")}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(max_pool_valid, {"MaxPool", "VALID overlapping", {{1, 5, 4, 3}}, [](const In& x) -> Outs {
  return {ops::max_pool(x[0], {2, 2}, {1, 2}, "VALID")}; }});
SPIRE_GRAD_CASE(max_pool_grad, {"MaxPoolGrad", "SAME stride 2", {{1, 5, 5, 2}, {1, 3, 3, 2}}, [](const In& x) -> Outs {
  Output y = ops::max_pool(x[0], {3, 3}, {2, 2}, "SAME");
  return {ops::max_pool_grad(x[0], y, x[1], {3, 3}, {2, 2}, "SAME")}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(max_pool_grad_grad, {"MaxPoolGradGrad", "VALID", {{1, 4, 5, 2}, {1, 4, 5, 2}}, [](const In& x) -> Outs {
  Output y = ops::max_pool(x[0], {2, 2}, {2, 2}, "VALID");
  return {ops::max_pool_grad_grad(x[0], y, x[1], {2, 2}, {2, 2}, "VALID")}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(avg_pool_same, {"AvgPool", "SAME stride 2", {{2, 5, 5, 2}}, [](const In& x) -> Outs {
  return {ops::avg_pool(x[0], {3, 3}, {2, 2}, "SAME")}; }, nullptr, 2e-6, true});
SPIRE_GRAD_CASE(avg_pool_valid, {"AvgPool", "VALID", {{1, 5, 4, 3}}, [](const In& x) -> Outs {
  return {ops::avg_pool(x[0], {2, 3}, {1, 1}, "VALID")}; }});
SPIRE_GRAD_CASE(avg_pool_grad, {"AvgPoolGrad", "SAME stride 2", {{1, 3, 3, 2}}, [](const In& x) -> Outs {
  return {ops::avg_pool_grad(zeros_const({1, 5, 5, 2}, x[0]), x[0], {3, 3}, {2, 2}, "SAME")}; },
  nullptr, 2e-6, true});

}  // namespace
}  // namespace spire::testing
