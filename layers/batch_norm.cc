// BatchNorm and BNReLU (layers/layers.h), tensorpack's semantics: variables
// beta, gamma, mean/EMA, variance/EMA; batch statistics when training (with
// EMA update ops in the main training tower), the EMAs at inference. In
// training one FusedBatchNorm op (core/ops/batch_norm_ops.h) computes y and
// the batch statistics, and its gradient is one FusedBatchNormGrad; with
// synchronized statistics or fused(false) the layer is built from primitive
// ops instead (differentiable to any order).
#include <algorithm>

#include "core/enum_names.h"
#include "core/logger.h"
#include "core/ops.h"
#include "layers/layer_util.h"
#include "layers/layers.h"

namespace spire {

using layer_detail::check_input;
using layer_detail::describe;

namespace {
const EnumSpelling<EmaUpdate> kEmaUpdates[] = {
    {"collection", EmaUpdate::kCollection},
    {"internal", EmaUpdate::kInternal},
    {"skip", EmaUpdate::kSkip},
    {"default", EmaUpdate::kCollection},  // tensorpack's
};
const EnumSpelling<SyncStatistics> kSyncStatistics[] = {
    {"none", SyncStatistics::kNone},
    {"towers", SyncStatistics::kTowers},
    {"nccl", SyncStatistics::kTowers},     // tensorpack's
    {"horovod", SyncStatistics::kTowers},  // tensorpack's
    {"", SyncStatistics::kNone},
};
}  // namespace

EmaUpdate parse_ema_update(const std::string& name) {
  return parse_enum(kEmaUpdates, name, "BatchNorm", "ema_update");
}
const char* ema_update_name(EmaUpdate mode) { return enum_name(kEmaUpdates, mode); }

SyncStatistics parse_sync_statistics(const std::string& name) {
  return parse_enum(kSyncStatistics, name, "BatchNorm", "sync_statistics");
}
const char* sync_statistics_name(SyncStatistics mode) { return enum_name(kSyncStatistics, mode); }

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
  EmaUpdate ema_update = a.ema_update_.value_or(EmaUpdate::kCollection);
  const bool training = layer_detail::resolve_training(g, a.training_);
  const bool sync = a.sync_statistics_.value_or(SyncStatistics::kNone) == SyncStatistics::kTowers;
  // tensorpack: EMA updates only from batch statistics, and not from the non-main
  // training towers (in an inference tower that forces training, they are made).
  TowerContext* ctx = get_current_tower_context(&g);
  // Synchronized statistics need the trainer's cross-tower average; with one
  // tower there is nothing to synchronize (tensorpack warns the same way).
  const bool synced = training && sync && ctx != nullptr && ctx->is_training() &&
                      ctx->cross_tower_mean() != nullptr;
  if (training && sync && !synced && (ctx == nullptr || ctx->is_training()))
    logger::warn_once(describe(kind, name, x) +
                     ": sync_statistics with a single training tower: nothing to synchronize, "
                     "the tower's own batch statistics are used");
  if (synced && ema_update == EmaUpdate::kCollection) ema_update = EmaUpdate::kInternal;
  const bool do_ema_update =
      training && ema_update != EmaUpdate::kSkip &&
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

  Output mean, xc, var;
  const bool fused = a.fused_.value_or(true) && !synced;
  if (fused) {
    // One FusedBatchNorm node (core/ops/batch_norm_ops.h): y and the batch
    // statistics as [C] vectors; absent gamma/beta are constants.
    Output g = gamma ? gamma->value : ops::constant(Tensor::full(dt, Shape{channels}, 1.0));
    Output b = beta ? beta->value : ops::constant(Tensor::zeros(dt, Shape{channels}));
    ops::FusedBatchNormOutputs r = ops::fused_batch_norm(x, g, b, epsilon, axis, "FusedBatchNorm");
    y = r.y;
    mean = r.mean;
    var = r.variance;
  } else if (synced) {
    // One cross-tower average of [E[x], E[x^2]] per layer; the key is the
    // layer's variable scope without the tower prefix, the same in every tower.
    Output local_mean = ops::mean(x, reduce_axes, true, "batch_mean");
    Output local_sq = ops::mean(ops::square(x), reduce_axes, true, "batch_mean_square");
    Output both = ops::concat({ops::reshape(local_mean, Shape{channels}),
                               ops::reshape(local_sq, Shape{channels})}, 0, "moments");
    Output avg = ctx->cross_tower_mean()(both, strip_tower_prefix(scope.scope().name) + "/moments");
    SPIRE_CHECK(avg.valid() && avg.shape() == both.shape() && avg.dtype() == both.dtype(),
                describe(kind, name, x), ": the tower context's cross_tower_mean returned ",
                avg.valid() ? str_cat(dtype_name(avg.dtype()), avg.shape().to_string())
                            : std::string("an invalid output"),
                " for ", dtype_name(both.dtype()), both.shape().to_string());
    std::vector<int64_t> kdims = bdims;
    mean = ops::reshape(ops::slice(avg, {0}, {channels}), Shape(kdims), "synced_mean");
    Output mean_sq = ops::reshape(ops::slice(avg, {channels}, {channels}), Shape(kdims));
    xc = x - mean;
    // E[x^2] - E[x]^2 can come out slightly negative by rounding.
    var = ops::maximum(mean_sq - ops::square(mean), ops::scalar_like(0.0, mean_sq), "synced_variance");
  } else {
    mean = ops::mean(x, reduce_axes, true, "batch_mean");
    xc = x - mean;
    var = ops::mean(ops::square(xc), reduce_axes, true, "batch_variance");
  }
  if (!fused) {
    Output inv = ops::rsqrt(var + epsilon);
    if (gamma) inv = inv * bcast(gamma->value);
    y = xc * inv;
    if (beta) y = y + bcast(beta->value);
  }
  if (!do_ema_update) return ops::identity(y, "output");

  // The EMA of the variance uses the unbiased batch variance (n / (n - 1)), as TF's fused
  // batch norm, which tensorpack uses; n is the number of elements per channel.
  Output batch_mean = ops::reshape(mean, Shape{channels});
  Output batch_var = ops::reshape(var, Shape{channels});
  int64_t n = 1;
  for (int64_t ax : reduce_axes)
    n = (n < 0 || s[static_cast<int>(ax)] < 0) ? -1 : n * s[static_cast<int>(ax)];
  // Synchronized: the statistics cover every tower's batch of the same size.
  const double towers = synced ? static_cast<double>(ctx->total()) : 1.0;
  if (n >= 0 && synced) n *= ctx->total();
  if (n >= 0) {
    batch_var =
        batch_var * (static_cast<double>(n) / static_cast<double>(std::max<int64_t>(n - 1, 1)));
  } else {
    std::vector<int64_t> begin(static_cast<size_t>(rank), 0), size(static_cast<size_t>(rank), -1);
    size[static_cast<size_t>(axis)] = 1;
    Output count = ops::sum(ops::ones_like(ops::slice(x, begin, size)));
    if (synced) count = count * towers;
    Output denom = ops::maximum(count - 1.0, ops::scalar_like(1.0, count));
    batch_var = batch_var * (count / denom);
  }
  // ema -= (ema - stat) * (1 - momentum), as TF's assign_moving_average.
  Output mean_op = ops::assign_sub(
      moving_mean.value, (moving_mean.value - batch_mean) * (1.0 - momentum), "mean_ema_op");
  Output var_op = ops::assign_sub(moving_var.value,
                                  (moving_var.value - batch_var) * (1.0 - momentum), "var_ema_op");
  if (ema_update == EmaUpdate::kInternal) {
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
