// Registrations of FusedBatchNorm and FusedBatchNormGrad (core/ops/batch_norm_ops.h)
// with shape inference and FusedBatchNorm's gradient. Fusing matters for
// memory as much as for time: the unfused layer keeps x - mean, its square
// and the scaled product alive for the backward pass (three tensors the
// size of x per layer); the fused op keeps only x and two [C] vectors, and
// its backward reads dy and x twice instead of a dozen elementwise and
// reduction nodes.
#include "core/ops/batch_norm_ops.h"

#include "core/ops/array_ops.h"
#include "core/ops/math_ops.h"
#include "core/ops/op_util.h"
#include "core/ops/state_ops.h"

namespace spire::ops {

namespace {

using Grads = std::vector<Output>;

// Checks x (float, rank >= 2, known channel count), the [C] parameters from
// `first_param` on, and returns the normalized channel axis.
int check_batch_norm_inputs(InferContext& c, int x_index, int first_param, int num_params) {
  c.expect_dtype(x_index, {DType::F32, DType::F64});
  const Shape& x = c.input_shape(x_index);
  if (x.rank() < 2) c.fail("x must have rank >= 2, got shape ", x.to_string());
  const int64_t axis_arg = c.attr<int64_t>("axis");
  const int rank = x.rank();
  if (axis_arg < -rank || axis_arg >= rank)
    c.fail("axis ", axis_arg, " is out of range for rank ", rank);
  const int axis = static_cast<int>(axis_arg < 0 ? axis_arg + rank : axis_arg);
  const int64_t channels = x[axis];
  if (c.attr<double>("epsilon") < 0) c.fail("epsilon must be >= 0, got ", c.attr<double>("epsilon"));
  for (int i = first_param; i < first_param + num_params; ++i) {
    c.expect_same_dtype(i, x_index);
    const Shape& p = c.input_shape(i);
    if (p.rank() != 1 || (p[0] >= 0 && channels >= 0 && p[0] != channels))
      c.fail(c.input_label(i), " must have shape [", channels, "] (the channels of x along axis ",
             axis, "), got ", p.to_string());
  }
  return axis;
}

// [C] -> broadcastable against x (rank r, channel axis `axis`).
Output channel_bcast(const Output& p, int rank, int axis, int64_t channels) {
  if (axis == rank - 1) return p;
  std::vector<int64_t> dims(static_cast<size_t>(rank), 1);
  dims[static_cast<size_t>(axis)] = channels;
  return reshape(p, Shape(dims));
}

}  // namespace

SPIRE_REGISTER_OP("FusedBatchNorm")
    .input("x").input("gamma").input("beta")
    .attr("epsilon", 1e-5)
    .attr("axis", -1)
    .shape_fn([](InferContext& c) {
      const int axis = check_batch_norm_inputs(c, 0, 1, 2);
      const int64_t channels = c.input_shape(0)[axis];
      c.set_output(0, c.input_dtype(0), c.input_shape(0));
      c.set_output(1, c.input_dtype(0), Shape{channels});
      c.set_output(2, c.input_dtype(0), Shape{channels});
    })
    .grad([](GradContext& c) -> Grads {
      Output x = c.input(0), gamma = c.input(1);
      const double eps = c.attr<double>("epsilon");
      const int64_t axis_arg = c.attr<int64_t>("axis");
      Output mean = c.output(1), var = c.output(2);
      std::vector<Output> g = fused_batch_norm_grad(c.grad(0), x, gamma, mean, var, eps, axis_arg);
      Output dx = g[0];
      if (c.has_grad(1) || c.has_grad(2)) {
        // mean = S(x) / n and var = S((x - mean)^2) / n: dx += dmean / n + dvar * 2 (x - mean) / n.
        const Shape& s = x.shape();
        const int rank = s.rank();
        const int axis = static_cast<int>(axis_arg < 0 ? axis_arg + rank : axis_arg);
        int64_t n = 1;
        for (int i = 0; i < rank; ++i)
          if (i != axis) {
            if (s[i] < 0)
              throw_error(c.node()->describe(), ": the gradient through the batch mean or variance "
                          "needs the shape of x known, got ", s.to_string());
            n *= s[i];
          }
        const int64_t ch = s[axis];
        const double inv_n = 1.0 / static_cast<double>(n);
        if (c.has_grad(1))
          dx = add(dx, broadcast_like(channel_bcast(mul(c.grad(1), scalar_like(inv_n, mean)), rank,
                                                    axis, ch), x));
        if (c.has_grad(2))
          dx = add(dx, mul(channel_bcast(mul(c.grad(2), scalar_like(2 * inv_n, var)), rank, axis, ch),
                           sub(x, channel_bcast(mean, rank, axis, ch))));
      }
      return {dx, g[1], g[2]};
    })
    .doc("Batch normalization over every axis but `axis` with the batch mean and biased "
         "variance (training mode); outputs y, mean [C], variance [C]. The gradient is one "
         "FusedBatchNormGrad, which has no gradient itself (second order: the unfused layer).");

SPIRE_REGISTER_OP("FusedBatchNormGrad")
    .input("dy").input("x").input("gamma").input("mean").input("variance")
    .attr("epsilon", 1e-5)
    .attr("axis", -1)
    .shape_fn([](InferContext& c) {
      const int axis = check_batch_norm_inputs(c, 1, 2, 3);
      c.expect_same_dtype(0, 1);
      const Shape& dy = c.input_shape(0);
      const Shape& x = c.input_shape(1);
      if (dy.rank() != x.rank()) c.fail("dy ", dy.to_string(), " and x ", x.to_string(), " differ");
      for (int i = 0; i < x.rank(); ++i)
        if (dy[i] >= 0 && x[i] >= 0 && dy[i] != x[i])
          c.fail("dy ", dy.to_string(), " and x ", x.to_string(), " differ");
      const int64_t channels = x[axis];
      c.set_output(0, c.input_dtype(1), x);
      c.set_output(1, c.input_dtype(1), Shape{channels});
      c.set_output(2, c.input_dtype(1), Shape{channels});
    })
    .doc("dx, dgamma, dbeta of FusedBatchNorm's y from dy, x, gamma and the batch mean and "
         "variance, in one pass of per-channel sums and one elementwise pass. No gradient.");

FusedBatchNormOutputs fused_batch_norm(const Output& x, const Output& gamma, const Output& beta,
                                       double epsilon, int64_t axis, const std::string& name) {
  Node* n = add_op("FusedBatchNorm", {x, gamma, beta}, {{"epsilon", epsilon}, {"axis", axis}}, name);
  return {n->output(0), n->output(1), n->output(2)};
}

std::vector<Output> fused_batch_norm_grad(const Output& dy, const Output& x, const Output& gamma,
                                          const Output& mean, const Output& variance,
                                          double epsilon, int64_t axis, const std::string& name) {
  Node* n = add_op("FusedBatchNormGrad", {dy, x, gamma, mean, variance},
                   {{"epsilon", epsilon}, {"axis", axis}}, name);
  return {n->output(0), n->output(1), n->output(2)};
}

}  // namespace spire::ops
