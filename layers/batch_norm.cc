// BatchNorm and BNReLU (layers/layers.h), tensorpack's semantics: variables
// beta, gamma, mean/EMA, variance/EMA; batch statistics when training (with
// EMA update ops in the main training tower), the EMAs at inference. Built
// from primitive ops, so autodiff differentiates through the batch statistics.
#include <algorithm>

#include "core/ops.h"
#include "layers/layer_util.h"
#include "layers/layers.h"

namespace spire {

using layer_detail::check_input;
using layer_detail::describe;

Output BatchNorm(const std::string& name, const Output& x, const BatchNormOptions& opts) {
  const char* kind = "BatchNorm";
  check_input(kind, name, x);
  Graph& g = *x.graph();
  DefaultGraphGuard graph_guard(g);
  LayerArgs a = resolve_layer_args(g, LayerKind::BatchNorm, opts.args);
  const Shape& s = x.shape();
  const int rank = s.rank();
  SPIRE_CHECK(rank >= 2, describe(kind, name, x), ": input must have rank >= 2");
  const int64_t axis_arg = a.axis_.value_or(-1);
  SPIRE_CHECK(axis_arg >= -rank && axis_arg < rank, describe(kind, name, x), ": axis ", axis_arg,
              " is out of range for rank ", rank);
  const int axis = static_cast<int>(axis_arg < 0 ? axis_arg + rank : axis_arg);
  const int64_t channels = s[axis];
  SPIRE_CHECK(channels >= 0, describe(kind, name, x), ": the channel dimension (axis ", axis,
              ") must be known");
  const double momentum = a.momentum_.value_or(0.9);
  const double epsilon = a.epsilon_.value_or(1e-5);
  SPIRE_CHECK(momentum >= 0.0 && momentum <= 1.0, describe(kind, name, x),
              ": momentum must be in [0, 1], got ", momentum);
  SPIRE_CHECK(epsilon >= 0.0, describe(kind, name, x), ": epsilon must be >= 0, got ", epsilon);
  std::string ema_update = a.ema_update_.value_or("collection");
  if (ema_update == "default") ema_update = "collection";
  SPIRE_CHECK(ema_update == "collection" || ema_update == "internal" || ema_update == "skip",
              describe(kind, name, x),
              ": ema_update must be \"collection\", \"internal\" or \"skip\", got \"", ema_update,
              "\"");
  const bool training = layer_detail::resolve_training(g, a.training_);
  // tensorpack: EMA updates only from batch statistics, and not from the non-main
  // training towers (in an inference tower that forces training, they are made).
  TowerContext* ctx = get_current_tower_context(&g);
  const bool do_ema_update =
      training && ema_update != "skip" &&
      (ctx == nullptr || ctx->is_main_training_tower() || !ctx->is_training());

  std::vector<int64_t> reduce_axes;
  for (int i = 0; i < rank; ++i)
    if (i != axis) reduce_axes.push_back(i);
  // Parameters [C] broadcast directly when the channel axis is last; else as [1, .., C, .., 1].
  std::vector<int64_t> bdims(static_cast<size_t>(rank), 1);
  bdims[static_cast<size_t>(axis)] = channels;
  auto bcast = [&](const Output& p) {
    return axis == rank - 1 ? p : ops::reshape(p, Shape(bdims));
  };

  VariableScopeGuard scope(name, Reuse::kInherit, nullptr, &g);
  const DType dt = x.dtype();
  std::optional<Variable> beta, gamma;
  if (a.center_.value_or(true))
    beta = get_variable("beta", Shape{channels}, dt, a.beta_initializer_.value_or(init::zeros()));
  if (a.scale_.value_or(true))
    gamma = get_variable("gamma", Shape{channels}, dt, a.gamma_initializer_.value_or(init::ones()));
  Variable moving_mean = get_variable("mean/EMA", Shape{channels}, dt, init::zeros(), false,
                                      {GraphKeys::MODEL_VARIABLES});
  Variable moving_var = get_variable("variance/EMA", Shape{channels}, dt, init::ones(), false,
                                     {GraphKeys::MODEL_VARIABLES});

  Output y;
  if (!training) {
    Output inv = ops::rsqrt(moving_var.value + epsilon);
    if (gamma) inv = inv * gamma->value;
    y = (x - bcast(moving_mean.value)) * bcast(inv);
    if (beta) y = y + bcast(beta->value);
    return ops::identity(y, "output");
  }

  Output mean = ops::mean(x, reduce_axes, true, "batch_mean");
  Output xc = x - mean;
  Output var = ops::mean(ops::square(xc), reduce_axes, true, "batch_variance");
  Output inv = ops::rsqrt(var + epsilon);
  if (gamma) inv = inv * bcast(gamma->value);
  y = xc * inv;
  if (beta) y = y + bcast(beta->value);
  if (!do_ema_update) return ops::identity(y, "output");

  // The EMA of the variance uses the unbiased batch variance (n / (n - 1)), as TF's fused
  // batch norm, which tensorpack uses; n is the number of elements per channel.
  Output batch_mean = ops::reshape(mean, Shape{channels});
  Output batch_var = ops::reshape(var, Shape{channels});
  int64_t n = 1;
  for (int64_t ax : reduce_axes)
    n = (n < 0 || s[static_cast<int>(ax)] < 0) ? -1 : n * s[static_cast<int>(ax)];
  if (n >= 0) {
    batch_var =
        batch_var * (static_cast<double>(n) / static_cast<double>(std::max<int64_t>(n - 1, 1)));
  } else {
    std::vector<int64_t> begin(static_cast<size_t>(rank), 0), size(static_cast<size_t>(rank), -1);
    size[static_cast<size_t>(axis)] = 1;
    Output count = ops::sum(ops::ones_like(ops::slice(x, begin, size)));
    Output denom = ops::maximum(count - 1.0, ops::scalar_like(1.0, count));
    batch_var = batch_var * (count / denom);
  }
  // ema -= (ema - stat) * (1 - momentum), as TF's assign_moving_average.
  Output mean_op = ops::assign_sub(
      moving_mean.value, (moving_mean.value - batch_mean) * (1.0 - momentum), "mean_ema_op");
  Output var_op = ops::assign_sub(moving_var.value,
                                  (moving_var.value - batch_var) * (1.0 - momentum), "var_ema_op");
  if (ema_update == "internal") {
    ControlDependencies deps(g, {mean_op.node, var_op.node});
    return ops::identity(y, "output");
  }
  g.add_to_collection(GraphKeys::UPDATE_OPS, mean_op);
  g.add_to_collection(GraphKeys::UPDATE_OPS, var_op);
  return ops::identity(y, "output");
}

Output BNReLU(const Output& x, const std::string& name) {
  Output y = BatchNorm("bn", x);
  return ops::relu(y, name);
}

}  // namespace spire
