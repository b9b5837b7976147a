// tensorpack's layers in C++: FullyConnected, Conv2D, Conv2DTranspose,
// BatchNorm, BNReLU, LayerNorm, MaxPooling, AvgPooling, GlobalAvgPooling, Dropout,
// Flatten, with tensorpack's variable names and defaults; activations;
// argscope (shared layer defaults, per graph); regularize_cost.
//
// Every layer takes its name first, opens VariableScopeGuard(name) (so its
// variables are "<name>/W", "<name>/b", ... and its nodes live under the
// "<name>/" name scope) and names its result "<name>/output" (an Identity).
// Options are structs of optional fields with chainable setters; a layer
// resolves each option as: explicit option > innermost ArgScope that sets it
// for this layer kind > tensorpack's default. Layers read the current
// TowerContext (layers/tower.h) for is_training. Errors are spire::Error
// naming the layer, its input shape and dtype.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/graph.h"
#include "layers/initializers.h"
#include "layers/tower.h"
#include "layers/variables.h"

namespace spire {

/// An activation function applied by a layer before its "output" identity.
/// Default-constructed = identity. Converts from ops functions taking
/// (x, name) such as ops::relu or BNReLU, and from any callable taking
/// (const Output&).
class Activation {
 public:
  Activation() = default;
  /// From an ops-style function `Output f(const Output& x, const std::string& name)`.
  Activation(Output (*fn)(const Output&, const std::string&));  // NOLINT(runtime/explicit)
  /// From a callable `Output f(const Output& x)`.
  template <typename F,
            typename = std::enable_if_t<std::is_invocable_r_v<Output, F, const Output&> &&
                                        !std::is_same_v<std::decay_t<F>, Activation>>>
  Activation(F fn) : fn_(std::move(fn)) {}  // NOLINT(runtime/explicit)

  Output operator()(const Output& x) const { return fn_ ? fn_(x) : x; }
  bool is_identity() const { return !fn_; }

 private:
  std::function<Output(const Output&)> fn_;
};

/// Activation objects (for argscopes and layer options).
namespace activations {
Activation identity();
Activation relu();
Activation leaky_relu(double alpha = 0.2);
Activation sigmoid();
Activation tanh();
Activation gelu();
Activation softplus();
/// BatchNorm("bn", x) then relu (tensorpack's BNReLU as an activation).
Activation bnrelu();
}  // namespace activations

/// A pair of ints {h, w} for kernel sizes, strides and dilations; an int means {v, v}.
struct Size2 {
  int64_t h = 1, w = 1;
  Size2() = default;
  Size2(int64_t v) : h(v), w(v) {}  // NOLINT(runtime/explicit)
  Size2(int64_t h_, int64_t w_) : h(h_), w(w_) {}
  std::vector<int64_t> vec() const { return {h, w}; }
  bool operator==(const Size2& o) const { return h == o.h && w == o.w; }
};

/// The layer kinds an ArgScope can target.
enum class LayerKind {
  FullyConnected,
  Conv2D,
  Conv2DTranspose,
  BatchNorm,
  MaxPooling,
  AvgPooling,
  Dropout,
  LayerNorm,
};
/// "Conv2D", ...
const char* layer_kind_name(LayerKind kind);

/// Where BatchNorm's EMA update ops go (tensorpack's BatchNorm(ema_update=...)).
enum class EmaUpdate {
  /// To UPDATE_OPS (tensorpack's "default").
  kCollection,
  /// The layer's output depends on them.
  kInternal,
  /// None are made.
  kSkip,
};
/// "collection" ("default" too), "internal", "skip"; throws spire::Error
/// listing them for any other name.
EmaUpdate parse_ema_update(const std::string& name);
/// "collection", "internal", "skip".
const char* ema_update_name(EmaUpdate mode);

/// Whose batch statistics BatchNorm normalizes with (tensorpack's
/// BatchNorm(sync_statistics=...)).
enum class SyncStatistics {
  /// Each tower's own (tensorpack's None).
  kNone,
  /// Averaged over every training tower of the step (tensorpack's "nccl"
  /// and "horovod": the same here, whatever the trainer).
  kTowers,
};
/// "none" ("" too), "towers" ("nccl" and "horovod" too); throws
/// spire::Error listing them for any other name.
SyncStatistics parse_sync_statistics(const std::string& name);
/// "none", "towers".
const char* sync_statistics_name(SyncStatistics mode);

// X-macro of every layer argument: (type, name). Each layer accepts a subset.
#define SPIRE_LAYER_ARGS(X)          \
  X(Activation, activation)          \
  X(Initializer, kernel_initializer) \
  X(Initializer, bias_initializer)   \
  X(bool, use_bias)                  \
  X(bool, use_scale)                 \
  X(Size2, strides)                  \
  X(std::string, padding)            \
  X(Size2, dilation_rate)            \
  X(int64_t, split)                  \
  X(int64_t, axis)                   \
  X(double, momentum)                \
  X(double, epsilon)                 \
  X(bool, center)                    \
  X(bool, scale)                     \
  X(Initializer, beta_initializer)   \
  X(Initializer, gamma_initializer)  \
  X(bool, training)                  \
  X(EmaUpdate, ema_update)           \
  X(SyncStatistics, sync_statistics) \
  X(bool, fused)                     \
  X(double, rate)                    \
  X(int64_t, seed)

/// A bag of optional layer arguments (any layer's). Used by ArgScope to set
/// defaults for several layer kinds at once, and inside each typed options
/// struct. Unset fields mean "not given".
struct LayerArgs {
#define SPIRE_LAYER_ARG_FIELD(T, f) \
  std::optional<T> f##_;            \
  LayerArgs& f(T v) {               \
    f##_ = std::move(v);            \
    return *this;                   \
  }
  SPIRE_LAYER_ARGS(SPIRE_LAYER_ARG_FIELD)
#undef SPIRE_LAYER_ARG_FIELD
  /// Names of the set fields ("activation", ...).
  std::vector<std::string> set_fields() const;
};

// Typed options: only the arguments a layer accepts have setters.
#define SPIRE_OPTION_SETTER(Self, T, f) \
  Self& f(T v) {                        \
    args.f(std::move(v));               \
    return *this;                       \
  }

/// FullyConnected options. Defaults: activation identity, use_bias true,
/// kernel_initializer variance_scaling(2.0, "fan_in", "truncated_normal"),
/// bias_initializer zeros.
struct FullyConnectedOptions {
  static constexpr LayerKind kind = LayerKind::FullyConnected;
  LayerArgs args;
  SPIRE_OPTION_SETTER(FullyConnectedOptions, Activation, activation)
  SPIRE_OPTION_SETTER(FullyConnectedOptions, Initializer, kernel_initializer)
  SPIRE_OPTION_SETTER(FullyConnectedOptions, Initializer, bias_initializer)
  SPIRE_OPTION_SETTER(FullyConnectedOptions, bool, use_bias)
};

/// Conv2D options. Defaults: strides 1, padding "SAME", dilation_rate 1,
/// activation identity, use_bias true, kernel_initializer
/// variance_scaling(2.0), bias_initializer zeros, split 1 (only 1 supported).
struct Conv2DOptions {
  static constexpr LayerKind kind = LayerKind::Conv2D;
  LayerArgs args;
  SPIRE_OPTION_SETTER(Conv2DOptions, Activation, activation)
  SPIRE_OPTION_SETTER(Conv2DOptions, Initializer, kernel_initializer)
  SPIRE_OPTION_SETTER(Conv2DOptions, Initializer, bias_initializer)
  SPIRE_OPTION_SETTER(Conv2DOptions, bool, use_bias)
  SPIRE_OPTION_SETTER(Conv2DOptions, Size2, strides)
  SPIRE_OPTION_SETTER(Conv2DOptions, std::string, padding)
  SPIRE_OPTION_SETTER(Conv2DOptions, Size2, dilation_rate)
  SPIRE_OPTION_SETTER(Conv2DOptions, int64_t, split)
};

/// Conv2DTranspose options. Defaults as Conv2D (no dilation, no split).
struct Conv2DTransposeOptions {
  static constexpr LayerKind kind = LayerKind::Conv2DTranspose;
  LayerArgs args;
  SPIRE_OPTION_SETTER(Conv2DTransposeOptions, Activation, activation)
  SPIRE_OPTION_SETTER(Conv2DTransposeOptions, Initializer, kernel_initializer)
  SPIRE_OPTION_SETTER(Conv2DTransposeOptions, Initializer, bias_initializer)
  SPIRE_OPTION_SETTER(Conv2DTransposeOptions, bool, use_bias)
  SPIRE_OPTION_SETTER(Conv2DTransposeOptions, Size2, strides)
  SPIRE_OPTION_SETTER(Conv2DTransposeOptions, std::string, padding)
};

/// BatchNorm options. Defaults: axis -1 (channels last), momentum 0.9,
/// epsilon 1e-5, center true, scale true, beta zeros, gamma ones, training
/// from the tower context (true outside any tower), ema_update kCollection
/// (kCollection: update ops go to UPDATE_OPS; kInternal: the output depends
/// on them; kSkip: none are made). sync_statistics (tensorpack's
/// BatchNorm(sync_statistics=...)): kNone (default) uses each tower's own
/// batch statistics; kTowers (tensorpack's "nccl" and "horovod")
/// averages the batch mean and mean of squares over every training tower of
/// the step through the tower context's cross_tower_mean (every device of a
/// multi-device trainer, every rank of an MPI trainer), so all towers
/// normalize with the statistics of the whole batch (var = E[x^2] - E[x]^2;
/// each tower's batch must have the same size); the EMAs are then updated
/// inside the layer (kInternal) from the synchronized statistics, by the
/// main training tower only. With one tower it warns and uses the local
/// statistics. Every training tower must run every synchronized layer.
/// fused (TF's batch_normalization(fused=...)), default true: training
/// without synchronized statistics uses the FusedBatchNorm op, whose
/// gradient has no gradient of its own; fused(false) builds the layer from
/// primitive ops (second-order gradients, e.g. a gradient penalty).
struct BatchNormOptions {
  static constexpr LayerKind kind = LayerKind::BatchNorm;
  LayerArgs args;
  SPIRE_OPTION_SETTER(BatchNormOptions, int64_t, axis)
  SPIRE_OPTION_SETTER(BatchNormOptions, double, momentum)
  SPIRE_OPTION_SETTER(BatchNormOptions, double, epsilon)
  SPIRE_OPTION_SETTER(BatchNormOptions, bool, center)
  SPIRE_OPTION_SETTER(BatchNormOptions, bool, scale)
  SPIRE_OPTION_SETTER(BatchNormOptions, Initializer, beta_initializer)
  SPIRE_OPTION_SETTER(BatchNormOptions, Initializer, gamma_initializer)
  SPIRE_OPTION_SETTER(BatchNormOptions, bool, training)
  SPIRE_OPTION_SETTER(BatchNormOptions, EmaUpdate, ema_update)
  SPIRE_OPTION_SETTER(BatchNormOptions, SyncStatistics, sync_statistics)
  SPIRE_OPTION_SETTER(BatchNormOptions, bool, fused)
};

/// MaxPooling/AvgPooling options. Defaults: strides = pool_size, padding "VALID".
struct PoolingOptions {
  LayerArgs args;
  SPIRE_OPTION_SETTER(PoolingOptions, Size2, strides)
  SPIRE_OPTION_SETTER(PoolingOptions, std::string, padding)
};

/// Dropout options. Defaults: rate 0.5, training from the tower context
/// (true outside any tower), seed 0 (graph-seeded stream).
struct DropoutOptions {
  static constexpr LayerKind kind = LayerKind::Dropout;
  LayerArgs args;
  SPIRE_OPTION_SETTER(DropoutOptions, double, rate)
  SPIRE_OPTION_SETTER(DropoutOptions, bool, training)
  SPIRE_OPTION_SETTER(DropoutOptions, int64_t, seed)
};
/// LayerNorm options (tensorpack's LayerNorm signature). Defaults: epsilon
/// 1e-5, use_bias true (variable beta, zeros), use_scale true (variable
/// gamma, gamma_initializer ones: tensorpack's gamma_init).
struct LayerNormOptions {
  static constexpr LayerKind kind = LayerKind::LayerNorm;
  LayerArgs args;
  SPIRE_OPTION_SETTER(LayerNormOptions, double, epsilon)
  SPIRE_OPTION_SETTER(LayerNormOptions, bool, use_bias)
  SPIRE_OPTION_SETTER(LayerNormOptions, bool, use_scale)
  SPIRE_OPTION_SETTER(LayerNormOptions, Initializer, gamma_initializer)
};
#undef SPIRE_OPTION_SETTER

/// tensorpack's argscope: while alive, layers of the listed kinds built in
/// `g` (default graph when null) take the set fields of `args` as defaults.
/// Nested scopes merge field by field (inner wins); explicit layer options
/// win over every scope. Throws spire::Error when a set field is not an
/// argument of one of the kinds (as tensorpack checks). State lives on a
/// per-graph stack (Graph::extension); guards must be destroyed in reverse order.
class ArgScope {
 public:
  ArgScope(const std::vector<LayerKind>& kinds, const LayerArgs& args, Graph* g = nullptr);
  /// One kind from its typed options: ArgScope(Conv2DOptions().activation(ops::relu)).
  template <typename O, typename = decltype(O::kind)>
  explicit ArgScope(const O& opts, Graph* g = nullptr) : ArgScope({O::kind}, opts.args, g) {}
  /// Pooling options apply to both MaxPooling and AvgPooling.
  explicit ArgScope(const PoolingOptions& opts, Graph* g = nullptr)
      : ArgScope({LayerKind::MaxPooling, LayerKind::AvgPooling}, opts.args, g) {}
  ~ArgScope();
  ArgScope(const ArgScope&) = delete;
  ArgScope& operator=(const ArgScope&) = delete;

 private:
  Graph& g_;
  size_t depth_;
};

/// The arguments in effect for a layer of `kind` in `g`: explicit fields of
/// `explicit_args`, else those of the innermost ArgScope setting them for `kind`.
LayerArgs resolve_layer_args(Graph& g, LayerKind kind, const LayerArgs& explicit_args);

// ---- layers ----------------------------------------------------------------

/// Dense layer on x flattened to [N, in]: W [in, units], b [units];
/// output activation(x @ W + b) named "<name>/output". The product follows
/// the graph's precision policy (layers/mixed_precision.h: bf16 / f16 casts
/// of x and W under a mixed policy, the result back in x's dtype).
Output FullyConnected(const std::string& name, const Output& x, int64_t units,
                      const FullyConnectedOptions& opts = {});

/// 2-D convolution of NHWC x: W [kh, kw, in, filters], b [filters].
Output Conv2D(const std::string& name, const Output& x, int64_t filters, Size2 kernel_size,
              const Conv2DOptions& opts = {});

/// Transposed convolution of NHWC x (conv2d_backprop_input): W [kh, kw,
/// filters, in], b [filters]. Output spatial size (TF's deconv_output_length)
/// in*stride (SAME) or in*stride + max(k - stride, 0) (VALID; = (in-1)*stride+k
/// when k >= stride). Height, width and channels of x must be known.
Output Conv2DTranspose(const std::string& name, const Output& x, int64_t filters, Size2 kernel_size,
                       const Conv2DTransposeOptions& opts = {});

/// Batch normalization over all axes but `axis`. Variables beta, gamma
/// (trainable) and mean/EMA, variance/EMA (non-trainable, MODEL_VARIABLES;
/// initialized 0 and 1). Training: normalizes with the batch mean and the
/// biased batch variance; the EMA update ops (ema = ema * momentum + stat *
/// (1 - momentum), where the variance statistic is the unbiased one, as TF's
/// fused batch norm) are made when training and in the main training tower,
/// outside any tower, or in an inference tower that forces training (as
/// tensorpack); they are named "<name>/mean_ema_op" and "<name>/var_ema_op".
/// Inference: normalizes with the EMAs.
Output BatchNorm(const std::string& name, const Output& x, const BatchNormOptions& opts = {});

/// Layer normalization over the last axis of x [..., C] with the fused
/// LayerNorm op (core/ops/norm_ops.h): variables gamma [C] (use_scale) and
/// beta [C] (use_bias), output "<name>/output". This is PyTorch's
/// nn.LayerNorm(C) (and nanoGPT's, with use_bias false); for a 2-D x [N, C]
/// it is also tensorpack's LayerNorm, whose 4-D case (statistics over H, W
/// and C together) is not provided. Without use_scale the op gets a constant
/// gamma of ones (no variable).
Output LayerNorm(const std::string& name, const Output& x, const LayerNormOptions& opts = {});

/// BatchNorm("bn", x) then relu named `name` (tensorpack's BNReLU; used as an
/// activation it makes "<layer>/bn/...").
Output BNReLU(const Output& x, const std::string& name = "");

/// Max pooling of NHWC x (strides default pool_size, padding "VALID").
Output MaxPooling(const std::string& name, const Output& x, Size2 pool_size,
                  const PoolingOptions& opts = {});
/// Average pooling of NHWC x (strides default pool_size, padding "VALID").
Output AvgPooling(const std::string& name, const Output& x, Size2 pool_size,
                  const PoolingOptions& opts = {});
/// Mean over H and W of NHWC x: [N, C].
Output GlobalAvgPooling(const std::string& name, const Output& x);

/// Inverted dropout with drop probability `rate` when training, identity
/// otherwise. Training: explicit option > argscope > the tower context's
/// is_training > true (outside any tower context).
Output Dropout(const std::string& name, const Output& x, const DropoutOptions& opts = {});

/// Reshapes x to [N, prod(other dims)], named "<name>/output".
Output Flatten(const std::string& name, const Output& x);
/// Reshape to [N, prod(other dims)] without a scope (tensorpack's batch_flatten).
Output batch_flatten(const Output& x, const std::string& name = "");

// ---- regularization ------------------------------------------------------------

/// A function of a variable giving its (scalar) regularization cost.
using Regularizer = std::function<Output(const Output& var)>;
/// scale * l2_loss(w) = scale * sum(w^2) / 2 (tf.contrib.layers.l2_regularizer).
Regularizer l2_regularizer(double scale);
/// scale * sum(|w|).
Regularizer l1_regularizer(double scale);

/// tensorpack's regularize_cost: sums func(v) over the TRAINABLE variables
/// whose name matches `regex` (std::regex_search): those of the current
/// tower when it has its own variables under its own variable scope
/// (replicated towers), else all (shared variables). Inside an inference tower,
/// or when nothing matches, returns an f32 zero named "empty_<name>" (and
/// adds nothing). Otherwise the sum (f32 when the costs' dtypes differ, else
/// their dtype) is named `name` (in the current name scope), added to
/// REGULARIZATION_LOSSES and returned: add either it or
/// regularize_cost_from_collection() to the loss, not both.
Output regularize_cost(const std::string& regex, const Regularizer& func,
                       const std::string& name = "regularize_cost");
/// regularize_cost(regex, l2_regularizer(l2_factor)).
Output regularize_cost(const std::string& regex, double l2_factor,
                       const std::string& name = "regularize_cost");
/// Sum of the REGULARIZATION_LOSSES made in the current tower (all of them
/// outside a tower); f32 zero "empty_<name>" in an inference tower or when
/// there are none. Costs of differing dtypes are cast to f32.
Output regularize_cost_from_collection(const std::string& name = "regularize_cost");
/// Alias of regularize_cost_from_collection (TF's name).
inline Output get_regularization_loss(const std::string& name = "regularization_loss") {
  return regularize_cost_from_collection(name);
}

}  // namespace spire
