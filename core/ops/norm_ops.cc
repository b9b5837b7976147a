// Registrations of the fused normalization ops declared in norm_ops.h, with
// shape inference and gradients: LayerNorm (over the last axis; outputs y,
// mean, rstd) and its gradient op LayerNormGrad (outputs dx, dgamma, dbeta).
// CPU kernels: kernels/cpu/layer_norm_kernels.cc; CUDA kernels:
// kernels/cuda/layer_norm_kernels.cu.
//
// Design:
//   - No bias without a dummy variable: beta is a variadic input with 0 or 1
//     tensors, so LayerNorm(x, gamma) is nanoGPT's bias=False LayerNorm and
//     LayerNorm(x, gamma, beta) the usual one. (No scale is spelled with a
//     constant gamma of ones by the caller; the layer does so.)
//   - mean and rstd are outputs, as llm.c caches them: the backward reads
//     them instead of recomputing the row statistics. Gradients flowing into
//     them (a user who uses the statistics) are added to dx:
//     d mean / d x_i = 1 / C, d rstd / d x_i = -rstd^2 * norm_i / C.
//   - LayerNormGrad is differentiable (second order): its gradient is built
//     from elementwise and reduction ops (derived below), so a double
//     backward through a LayerNorm (gradient penalties, Hessian-vector
//     products) works; mean and rstd count as inputs of their own there and
//     their gradients flow back into LayerNorm's mean/rstd outputs.
#include "core/ops/norm_ops.h"

#include "core/ops/array_ops.h"
#include "core/ops/math_ops.h"
#include "core/ops/op_util.h"
#include "core/ops/reduction_ops.h"
#include "core/ops/state_ops.h"

namespace spire::ops {

namespace {

using Grads = std::vector<Output>;

// Fails unless input i is a vector compatible with [c] of x's dtype.
void expect_channel_vector(const InferContext& c, int i, const char* what, int64_t channels) {
  c.expect_same_dtype(0, i);
  const Shape& s = c.input_shape(i);
  if (s.rank() != 1 || (channels >= 0 && s[0] >= 0 && s[0] != channels))
    c.fail(what, " must have shape [", channels, "] (the last dim of x), got ", s.to_string());
}

// x's shape without its last dim (the shape of mean and rstd).
Shape stats_shape(const Shape& x) {
  return Shape(std::vector<int64_t>(x.dims().begin(), x.dims().end() - 1));
}

void layer_norm_shape(InferContext& c) {
  c.expect_dtype(0, {DType::F32, DType::F64});
  const Shape& x = c.input_shape(0);
  if (x.rank() < 1) c.fail("x must have rank >= 1 (LayerNorm normalizes the last axis)");
  if (c.num_inputs() > 3) c.fail("takes at most one beta, got ", c.num_inputs() - 2);
  const double eps = c.attr<double>("epsilon");
  if (!(eps >= 0)) c.fail("epsilon must be >= 0, got ", eps);
  int64_t channels = x[x.rank() - 1];
  expect_channel_vector(c, 1, "gamma", channels);
  if (channels < 0) channels = c.input_shape(1)[0];
  if (c.num_inputs() == 3) expect_channel_vector(c, 2, "beta", channels);
  Shape y = x;
  if (y[y.rank() - 1] < 0 && channels >= 0) y.set_dim(y.rank() - 1, channels);
  c.set_output(0, c.input_dtype(0), y);
  c.set_output(1, c.input_dtype(0), stats_shape(x));
  c.set_output(2, c.input_dtype(0), stats_shape(x));
}

// Fails unless `s` is compatible with `want` (unknown dims match anything).
void expect_compatible(const InferContext& c, const char* what, const Shape& s, const Shape& want) {
  bool ok = s.rank() == want.rank();
  for (int i = 0; ok && i < s.rank(); ++i) ok = s[i] < 0 || want[i] < 0 || s[i] == want[i];
  if (!ok) c.fail(what, " has shape ", s.to_string(), ", expected ", want.to_string());
}

void layer_norm_grad_shape(InferContext& c) {
  c.expect_dtype(0, {DType::F32, DType::F64});
  const Shape& x = c.input_shape(1);
  if (x.rank() < 1) c.fail("x must have rank >= 1 (LayerNorm normalizes the last axis)");
  c.expect_same_dtype(0, 1);
  expect_compatible(c, "dy", c.input_shape(0), x);
  int64_t channels = x[x.rank() - 1];
  expect_channel_vector(c, 2, "gamma", channels);
  if (channels < 0) channels = c.input_shape(2)[0];
  c.expect_same_dtype(0, 3);
  c.expect_same_dtype(0, 4);
  expect_compatible(c, "mean", c.input_shape(3), stats_shape(x));
  expect_compatible(c, "rstd", c.input_shape(4), stats_shape(x));
  c.set_output(0, c.input_dtype(0), x);
  c.set_output(1, c.input_dtype(0), Shape{channels});
  c.set_output(2, c.input_dtype(0), Shape{channels});
}

// The part of dx that flows in through LayerNorm's mean and rstd outputs.
Output stats_grad(GradContext& c) {
  Output x = c.input(0);
  const int64_t channels = x.shape()[x.shape().rank() - 1];
  if (channels < 0)
    throw_error(c.node()->describe(), ": the gradient through the mean or rstd output needs a "
                "statically known last dim, x has shape ", x.shape().to_string());
  const double inv_c = 1.0 / static_cast<double>(channels);
  Output dx;
  if (c.has_grad(1))  // d mean / d x_i = 1 / C
    dx = broadcast_like(expand_dims(mul(c.grad(1), scalar_like(inv_c, x)), -1), x);
  if (c.has_grad(2)) {  // d rstd / d x_i = -rstd^3 (x_i - mean) / C
    Output rstd = c.output(2);
    Output coef = mul(c.grad(2), mul(scalar_like(-inv_c, x), mul(rstd, square(rstd))));
    Output t = mul(sub(x, expand_dims(c.output(1), -1)), expand_dims(coef, -1));
    dx = dx.valid() ? add(dx, t) : t;
  }
  return dx;
}

// Gradient of LayerNormGrad(dy, x, gamma, mean, rstd) -> (dx, dgamma, dbeta),
// mean and rstd taken as free inputs. With xc = x - mean, n = xc * rstd,
// dn = gamma * dy, a = mean_C(dn), b = mean_C(dn * n) and incoming gradients
// Gx, Gg, Gb of the three outputs, L = <Gx, dx> + <Gg, dgamma> + <Gb, dbeta>
// per row is S + sum_i (Gg_i n_i dy_i + Gb_i dy_i) with
// S = rstd * sum_i Gx_i (dn_i - a - n_i b). With P = mean_C(Gx), Q = mean_C(Gx n):
//   dS/d dn_i = u_i = rstd * (Gx_i - P - n_i Q)
//   dL/d n_i  = Hn_i = Gg_i dy_i - rstd * (b Gx_i + dn_i Q)
// so d dy = gamma u + Gg n + Gb, d gamma = sum over rows of dy u,
// d x = rstd Hn, d mean = -rstd sum_i Hn_i,
// d rstd = sum_i (Hn_i xc_i + Gx_i (dn_i - a - n_i b)).
Grads layer_norm_grad_grad(GradContext& c) {
  Output dy = c.input(0), x = c.input(1), gamma = c.input(2);
  Output mean = c.input(3), rstd = c.input(4);
  Output r = expand_dims(rstd, -1);
  Output xc = sub(x, expand_dims(mean, -1));
  Output n = mul(xc, r);
  Output dn = mul(gamma, dy);
  Output gx = c.grad(0);
  Output p = ops::mean(gx, {-1}, true), q = ops::mean(mul(gx, n), {-1}, true);
  Output a = ops::mean(dn, {-1}, true), b = ops::mean(mul(dn, n), {-1}, true);
  Output u = mul(r, sub(sub(gx, p), mul(n, q)));
  Output d_dy = mul(gamma, u);
  Output hn = neg(mul(r, add(mul(b, gx), mul(dn, q))));
  if (c.has_grad(1)) {
    Output gg = c.grad(1);
    d_dy = add(d_dy, mul(gg, n));
    hn = add(hn, mul(gg, dy));
  }
  if (c.has_grad(2)) d_dy = add(d_dy, broadcast_like(c.grad(2), dy));
  Output d_gamma = sum_to_like(mul(dy, u), gamma);
  Output d_x = mul(r, hn);
  Output d_mean = neg(mul(rstd, sum(hn, {-1})));
  Output d_rstd = sum(add(mul(hn, xc), mul(gx, sub(sub(dn, a), mul(n, b)))), {-1});
  return {d_dy, d_x, d_gamma, d_mean, d_rstd};
}

}  // namespace

SPIRE_REGISTER_OP("LayerNorm")
    .input("x").input("gamma").variadic_input("beta", 0)
    .attr("epsilon", 1e-5)
    .shape_fn(layer_norm_shape)
    .grad([](GradContext& c) -> Grads {
      const bool has_beta = c.node()->num_inputs() == 3;
      Output dx, dgamma, dbeta;
      if (c.has_grad(0)) {
        LayerNormGradOutputs g =
            layer_norm_grad(c.grad(0), c.input(0), c.input(1), c.output(1), c.output(2));
        dx = g.dx;
        dgamma = g.dgamma;
        dbeta = g.dbeta;
      }
      if (c.has_grad(1) || c.has_grad(2)) {
        Output extra = stats_grad(c);
        dx = dx.valid() ? add(dx, extra) : extra;
      }
      if (has_beta) return {dx, dgamma, dbeta};
      return {dx, dgamma};
    })
    .doc("LayerNorm over the last axis of x [..., C] (torch.nn.functional.layer_norm with "
         "normalized_shape (C,)): outputs y = (x - mean) * rstd * gamma + beta, and the per-row "
         "mean and rstd = 1 / sqrt(biased variance + epsilon) (shaped like x without its last "
         "dim). gamma and beta have shape [C]; beta is optional (0 or 1 tensors: no bias "
         "without a dummy variable). Gradients into mean and rstd are supported.");

SPIRE_REGISTER_OP("LayerNormGrad")
    .input("dy").input("x").input("gamma").input("mean").input("rstd")
    .shape_fn(layer_norm_grad_shape)
    .grad(layer_norm_grad_grad)
    .doc("The gradient of LayerNorm in one fused pass per row (llm.c's formula): with "
         "norm = (x - mean) * rstd and dnorm = gamma * dy, dx = rstd * (dnorm - mean_C(dnorm) - "
         "norm * mean_C(dnorm * norm)), dgamma = sum over rows of norm * dy, dbeta = sum over "
         "rows of dy. Differentiable (second order), its gradient built from elementwise and "
         "reduction ops, mean and rstd taken as inputs of their own.");

LayerNormOutputs layer_norm(const Output& x, const Output& gamma, const Output& beta,
                            double epsilon, const std::string& name) {
  std::vector<Output> in = {x, gamma};
  if (beta.valid()) in.push_back(beta);
  Node* n = add_op("LayerNorm", in, {{"epsilon", epsilon}}, name);
  return {n->output(0), n->output(1), n->output(2)};
}

LayerNormGradOutputs layer_norm_grad(const Output& dy, const Output& x, const Output& gamma,
                                     const Output& mean, const Output& rstd,
                                     const std::string& name) {
  Node* n = add_op("LayerNormGrad", {dy, x, gamma, mean, rstd}, {}, name);
  return {n->output(0), n->output(1), n->output(2)};
}

}  // namespace spire::ops
