// Implementation of layers/layers.h except BatchNorm (layers/batch_norm.cc):
// activations, argscope (a per-graph stack of LayerArgs), FullyConnected,
// Conv2D, Conv2DTranspose, pooling, Dropout, Flatten and regularize_cost.
// Each layer is composed of primitive ops, so autodiff handles gradients.
#include "layers/layers.h"

#include <algorithm>
#include <cctype>
#include <regex>

#include "core/ops.h"
#include "layers/layer_util.h"
#include "layers/mixed_precision.h"

namespace spire {

// ---- helpers ---------------------------------------------------------------------------------

namespace layer_detail {

std::string describe(const char* kind, const std::string& name, const Output& x) {
  std::string in =
      x.valid() ? str_cat(dtype_name(x.dtype()), x.shape().to_string()) : std::string("<invalid>");
  return str_cat(kind, " '", name, "' (input ", in, ")");
}

void check_input(const char* kind, const std::string& name, const Output& x) {
  SPIRE_CHECK(!name.empty(), kind, ": the layer name must not be empty");
  SPIRE_CHECK(x.valid(), describe(kind, name, x), ": input is not a valid graph output");
  SPIRE_CHECK(is_floating(x.dtype()), describe(kind, name, x),
              ": input must be floating point, got ", dtype_name(x.dtype()));
}

std::string normalize_padding(const char* kind, const std::string& name, const Output& x,
                              const std::string& padding) {
  std::string p = padding;
  std::transform(p.begin(), p.end(), p.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  SPIRE_CHECK(p == "SAME" || p == "VALID", describe(kind, name, x),
              ": padding must be \"SAME\" or \"VALID\", got \"", padding, "\"");
  return p;
}

bool resolve_training(Graph& g, const std::optional<bool>& training) {
  if (training) return *training;
  if (TowerContext* ctx = get_current_tower_context(&g)) return ctx->is_training();
  return true;
}

}  // namespace layer_detail

using layer_detail::check_input;
using layer_detail::describe;
using layer_detail::normalize_padding;

// ---- activations -----------------------------------------------------------------------------

Activation::Activation(Output (*fn)(const Output&, const std::string&)) {
  if (fn) fn_ = [fn](const Output& x) { return fn(x, ""); };
}

namespace activations {
Activation identity() { return Activation(); }
Activation relu() { return Activation(&ops::relu); }
Activation leaky_relu(double alpha) {
  return Activation([alpha](const Output& x) { return ops::leaky_relu(x, alpha); });
}
Activation sigmoid() { return Activation(&ops::sigmoid); }
Activation tanh() { return Activation(&ops::tanh); }
Activation gelu() { return Activation(&ops::gelu); }
Activation softplus() { return Activation(&ops::softplus); }
Activation bnrelu() { return Activation(&BNReLU); }
}  // namespace activations

// ---- argscope --------------------------------------------------------------------------------

const char* layer_kind_name(LayerKind kind) {
  switch (kind) {
    case LayerKind::FullyConnected:
      return "FullyConnected";
    case LayerKind::Conv2D:
      return "Conv2D";
    case LayerKind::Conv2DTranspose:
      return "Conv2DTranspose";
    case LayerKind::BatchNorm:
      return "BatchNorm";
    case LayerKind::MaxPooling:
      return "MaxPooling";
    case LayerKind::AvgPooling:
      return "AvgPooling";
    case LayerKind::Dropout:
      return "Dropout";
    case LayerKind::LayerNorm:
      return "LayerNorm";
  }
  return "UnknownLayer";
}

std::vector<std::string> LayerArgs::set_fields() const {
  std::vector<std::string> out;
#define SPIRE_COLLECT_SET(T, f) \
  if (f##_) out.push_back(#f);
  SPIRE_LAYER_ARGS(SPIRE_COLLECT_SET)
#undef SPIRE_COLLECT_SET
  return out;
}

namespace {

/// The arguments each layer kind accepts (tensorpack's signatures).
const std::vector<std::string>& accepted_args(LayerKind kind) {
  static const std::vector<std::string> fc = {"activation", "kernel_initializer",
                                              "bias_initializer", "use_bias"};
  static const std::vector<std::string> conv = {"activation",       "kernel_initializer",
                                                "bias_initializer", "use_bias",
                                                "strides",          "padding",
                                                "dilation_rate",    "split"};
  static const std::vector<std::string> deconv = {
      "activation", "kernel_initializer", "bias_initializer", "use_bias", "strides", "padding"};
  static const std::vector<std::string> bn = {
      "axis",      "momentum",         "epsilon",           "center",
      "scale",     "beta_initializer", "gamma_initializer", "training",
      "ema_update", "sync_statistics",  "fused"};
  static const std::vector<std::string> pool = {"strides", "padding"};
  static const std::vector<std::string> dropout = {"rate", "training", "seed"};
  static const std::vector<std::string> ln = {"epsilon", "use_bias", "use_scale",
                                              "gamma_initializer"};
  static const std::vector<std::string> none;
  switch (kind) {
    case LayerKind::FullyConnected:
      return fc;
    case LayerKind::Conv2D:
      return conv;
    case LayerKind::Conv2DTranspose:
      return deconv;
    case LayerKind::BatchNorm:
      return bn;
    case LayerKind::MaxPooling:
    case LayerKind::AvgPooling:
      return pool;
    case LayerKind::Dropout:
      return dropout;
    case LayerKind::LayerNorm:
      return ln;
  }
  return none;
}

void check_args_accepted(LayerKind kind, const LayerArgs& args, const char* where) {
  const auto& ok = accepted_args(kind);
  for (const std::string& f : args.set_fields()) {
    if (std::find(ok.begin(), ok.end(), f) == ok.end())
      throw_error(where, ": ", layer_kind_name(kind), " has no argument '", f, "'");
  }
}

struct ArgScopeEntry {
  std::vector<LayerKind> kinds;
  LayerArgs args;
};

/// The per-graph argscope stack (Graph::extension).
struct ArgScopeStack {
  std::vector<ArgScopeEntry> entries;
};

}  // namespace

ArgScope::ArgScope(const std::vector<LayerKind>& kinds, const LayerArgs& args, Graph* g)
    : g_(g ? *g : default_graph()), depth_(0) {
  SPIRE_CHECK(!kinds.empty(), "argscope: no layer kinds given");
  for (LayerKind k : kinds) check_args_accepted(k, args, "argscope");
  auto& stack = g_.extension<ArgScopeStack>();
  depth_ = stack.entries.size();
  stack.entries.push_back({kinds, args});
}

ArgScope::~ArgScope() {
  auto& stack = g_.extension<ArgScopeStack>();
  if (stack.entries.size() > depth_) stack.entries.resize(depth_);
}

LayerArgs resolve_layer_args(Graph& g, LayerKind kind, const LayerArgs& explicit_args) {
  check_args_accepted(kind, explicit_args, "layer options");
  LayerArgs out = explicit_args;
  const auto& entries = g.extension<ArgScopeStack>().entries;
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    if (std::find(it->kinds.begin(), it->kinds.end(), kind) == it->kinds.end()) continue;
#define SPIRE_MERGE_ARG(T, f) \
  if (!out.f##_ && it->args.f##_) out.f##_ = it->args.f##_;
    SPIRE_LAYER_ARGS(SPIRE_MERGE_ARG)
#undef SPIRE_MERGE_ARG
  }
  return out;
}

// ---- fully connected and convolutions -------------------------------------------------------

namespace {

Initializer default_kernel_init() {
  return init::variance_scaling(2.0, "fan_in", "truncated_normal");
}

void check_positive(const char* kind, const std::string& name, const Output& x, int64_t v,
                    const char* what) {
  SPIRE_CHECK(v > 0, describe(kind, name, x), ": ", what, " must be positive, got ", v);
}

void check_size2(const char* kind, const std::string& name, const Output& x, const Size2& s,
                 const char* what) {
  SPIRE_CHECK(s.h > 0 && s.w > 0, describe(kind, name, x), ": ", what, " must be positive, got {",
              s.h, ", ", s.w, "}");
}

}  // namespace

Output batch_flatten(const Output& x, const std::string& name) {
  SPIRE_CHECK(x.valid(), "batch_flatten: input is not a valid graph output");
  const Shape& s = x.shape();
  SPIRE_CHECK(s.rank() >= 1, "batch_flatten: input must have rank >= 1, got ",
              dtype_name(x.dtype()), s.to_string());
  if (s.rank() == 2 && name.empty()) return x;
  int64_t inner = 1;
  bool inner_known = true;
  for (int i = 1; i < s.rank(); ++i) {
    if (s[i] < 0)
      inner_known = false;
    else
      inner *= s[i];
  }
  if (inner_known) return ops::reshape(x, Shape{-1, inner}, name);
  SPIRE_CHECK(s[0] >= 0, "batch_flatten: cannot flatten ", dtype_name(x.dtype()), s.to_string(),
              ": the batch dimension and some inner dimension are both unknown");
  return ops::reshape(x, Shape{s[0], -1}, name);
}

// The common tail of FullyConnected/Conv2D/Conv2DTranspose: the optional
// bias "b" of `units` elements, the activation, and the "output" node.
static Output bias_activation_output(Output y, int64_t units, const LayerArgs& a) {
  if (a.use_bias_.value_or(true)) {
    Variable b =
        get_variable("b", Shape{units}, y.dtype(), a.bias_initializer_.value_or(init::zeros()));
    y = ops::add(y, b.value);
  }
  y = a.activation_.value_or(Activation())(y);
  return ops::identity(y, "output");
}

Output FullyConnected(const std::string& name, const Output& x, int64_t units,
                      const FullyConnectedOptions& opts) {
  const char* kind = "FullyConnected";
  check_input(kind, name, x);
  check_positive(kind, name, x, units, "units");
  Graph& g = *x.graph();
  DefaultGraphGuard graph_guard(g);
  LayerArgs a = resolve_layer_args(g, LayerKind::FullyConnected, opts.args);
  SPIRE_CHECK(x.shape().rank() >= 2, describe(kind, name, x), ": input must have rank >= 2");
  int64_t in = 1;
  for (int i = 1; i < x.shape().rank(); ++i) {
    SPIRE_CHECK(x.shape()[i] >= 0, describe(kind, name, x),
                ": the non-batch dimensions must be known");
    in *= x.shape()[i];
  }
  VariableScopeGuard scope(name, Reuse::kInherit, nullptr, &g);
  Output flat = batch_flatten(x);
  Variable w = get_variable("W", Shape{in, units}, x.dtype(),
                            a.kernel_initializer_.value_or(default_kernel_init()));
  // Under a mixed precision policy the product runs in bf16 / f16 on casts of x and W
  // (layers/mixed_precision.h); the bias and activation stay in x's dtype.
  return bias_activation_output(autocast_matmul(flat, w.value), units, a);
}

Output Conv2D(const std::string& name, const Output& x, int64_t filters, Size2 kernel_size,
              const Conv2DOptions& opts) {
  const char* kind = "Conv2D";
  check_input(kind, name, x);
  Graph& g = *x.graph();
  DefaultGraphGuard graph_guard(g);
  LayerArgs a = resolve_layer_args(g, LayerKind::Conv2D, opts.args);
  const Shape& s = x.shape();
  SPIRE_CHECK(s.rank() == 4, describe(kind, name, x), ": input must be NHWC (rank 4)");
  SPIRE_CHECK(s[3] >= 0, describe(kind, name, x), ": the channel dimension must be known");
  check_positive(kind, name, x, filters, "filters");
  check_size2(kind, name, x, kernel_size, "kernel_size");
  Size2 strides = a.strides_.value_or(Size2(1));
  Size2 dilation = a.dilation_rate_.value_or(Size2(1));
  check_size2(kind, name, x, strides, "strides");
  check_size2(kind, name, x, dilation, "dilation_rate");
  std::string padding = normalize_padding(kind, name, x, a.padding_.value_or("SAME"));
  int64_t split = a.split_.value_or(1);
  SPIRE_CHECK(split == 1, describe(kind, name, x), ": split (grouped convolution) must be 1, got ",
              split);
  // Checks the window against the input (gives an error naming the layer, not the op).
  for (int d = 0; d < 2; ++d) {
    ops::WindowDim wd;
    int64_t k = d == 0 ? kernel_size.h : kernel_size.w;
    int64_t st = d == 0 ? strides.h : strides.w;
    int64_t dl = d == 0 ? dilation.h : dilation.w;
    std::string err = ops::window_dim(s[1 + d], k, st, dl, padding, &wd);
    SPIRE_CHECK(err.empty(), describe(kind, name, x), ": ", d == 0 ? "height" : "width", ": ", err);
  }

  VariableScopeGuard scope(name, Reuse::kInherit, nullptr, &g);
  Variable w = get_variable("W", Shape{kernel_size.h, kernel_size.w, s[3], filters}, x.dtype(),
                            a.kernel_initializer_.value_or(default_kernel_init()));
  Output y = ops::conv2d(x, w.value, strides.vec(), padding, dilation.vec());
  return bias_activation_output(y, filters, a);
}

Output Conv2DTranspose(const std::string& name, const Output& x, int64_t filters, Size2 kernel_size,
                       const Conv2DTransposeOptions& opts) {
  const char* kind = "Conv2DTranspose";
  check_input(kind, name, x);
  Graph& g = *x.graph();
  DefaultGraphGuard graph_guard(g);
  LayerArgs a = resolve_layer_args(g, LayerKind::Conv2DTranspose, opts.args);
  const Shape& s = x.shape();
  SPIRE_CHECK(s.rank() == 4, describe(kind, name, x), ": input must be NHWC (rank 4)");
  SPIRE_CHECK(s[1] >= 0 && s[2] >= 0 && s[3] >= 0, describe(kind, name, x),
              ": height, width and channels must be known");
  check_positive(kind, name, x, filters, "filters");
  check_size2(kind, name, x, kernel_size, "kernel_size");
  Size2 strides = a.strides_.value_or(Size2(1));
  check_size2(kind, name, x, strides, "strides");
  std::string padding = normalize_padding(kind, name, x, a.padding_.value_or("SAME"));
  // TF's deconv_output_length: SAME in*stride, VALID in*stride + max(k - stride, 0)
  // (= (in-1)*stride + k when k >= stride).
  auto out_len = [&](int64_t in, int64_t k, int64_t st) {
    return padding == "SAME" ? in * st : in * st + std::max<int64_t>(k - st, 0);
  };
  const int64_t oh = out_len(s[1], kernel_size.h, strides.h);
  const int64_t ow = out_len(s[2], kernel_size.w, strides.w);

  VariableScopeGuard scope(name, Reuse::kInherit, nullptr, &g);
  Variable w = get_variable("W", Shape{kernel_size.h, kernel_size.w, filters, s[3]}, x.dtype(),
                            a.kernel_initializer_.value_or(default_kernel_init()));
  // A zero tensor with the run-time output shape [N, oh, ow, filters] (only its shape is
  // used), made from x so an unknown batch size works.
  Output n_like = ops::zeros_like(ops::slice(x, {0, 0, 0, 0}, {-1, 1, 1, 1}));
  Output out_like = ops::tile(n_like, {1, oh, ow, filters});
  Output y = ops::conv2d_backprop_input(out_like, w.value, x, strides.vec(), padding, {1, 1});
  return bias_activation_output(y, filters, a);
}

// ---- pooling, dropout, flatten -------------------------------------------------------------

namespace {

Output pooling(const char* kind, LayerKind lk, bool is_max, const std::string& name,
               const Output& x, Size2 pool_size, const PoolingOptions& opts) {
  check_input(kind, name, x);
  Graph& g = *x.graph();
  DefaultGraphGuard graph_guard(g);
  LayerArgs a = resolve_layer_args(g, lk, opts.args);
  SPIRE_CHECK(x.shape().rank() == 4, describe(kind, name, x), ": input must be NHWC (rank 4)");
  check_size2(kind, name, x, pool_size, "pool_size");
  Size2 strides = a.strides_.value_or(pool_size);
  check_size2(kind, name, x, strides, "strides");
  std::string padding = normalize_padding(kind, name, x, a.padding_.value_or("VALID"));
  for (int d = 0; d < 2; ++d) {
    ops::WindowDim wd;
    std::string err = ops::window_dim(x.shape()[1 + d], d == 0 ? pool_size.h : pool_size.w,
                                      d == 0 ? strides.h : strides.w, 1, padding, &wd);
    SPIRE_CHECK(err.empty(), describe(kind, name, x), ": ", d == 0 ? "height" : "width", ": ", err);
  }
  VariableScopeGuard scope(name, Reuse::kInherit, nullptr, &g);
  Output y = is_max ? ops::max_pool(x, pool_size.vec(), strides.vec(), padding)
                    : ops::avg_pool(x, pool_size.vec(), strides.vec(), padding);
  return ops::identity(y, "output");
}

}  // namespace

Output MaxPooling(const std::string& name, const Output& x, Size2 pool_size,
                  const PoolingOptions& opts) {
  return pooling("MaxPooling", LayerKind::MaxPooling, true, name, x, pool_size, opts);
}

Output AvgPooling(const std::string& name, const Output& x, Size2 pool_size,
                  const PoolingOptions& opts) {
  return pooling("AvgPooling", LayerKind::AvgPooling, false, name, x, pool_size, opts);
}

Output GlobalAvgPooling(const std::string& name, const Output& x) {
  const char* kind = "GlobalAvgPooling";
  check_input(kind, name, x);
  Graph& g = *x.graph();
  DefaultGraphGuard graph_guard(g);
  SPIRE_CHECK(x.shape().rank() == 4, describe(kind, name, x), ": input must be NHWC (rank 4)");
  VariableScopeGuard scope(name, Reuse::kInherit, nullptr, &g);
  return ops::mean(x, {1, 2}, false, "output");
}

Output Dropout(const std::string& name, const Output& x, const DropoutOptions& opts) {
  const char* kind = "Dropout";
  check_input(kind, name, x);
  Graph& g = *x.graph();
  DefaultGraphGuard graph_guard(g);
  LayerArgs a = resolve_layer_args(g, LayerKind::Dropout, opts.args);
  const double rate = a.rate_.value_or(0.5);
  SPIRE_CHECK(rate >= 0.0 && rate < 1.0, describe(kind, name, x), ": rate must be in [0, 1), got ",
              rate);
  const bool training = layer_detail::resolve_training(g, a.training_);
  VariableScopeGuard scope(name, Reuse::kInherit, nullptr, &g);
  if (!training || rate == 0.0) return ops::identity(x, "output");
  Output y = ops::dropout(x, rate, a.seed_.value_or(0));
  return ops::identity(y, "output");
}

Output Flatten(const std::string& name, const Output& x) {
  const char* kind = "Flatten";
  SPIRE_CHECK(!name.empty(), kind, ": the layer name must not be empty");
  SPIRE_CHECK(x.valid(), describe(kind, name, x), ": input is not a valid graph output");
  SPIRE_CHECK(x.shape().rank() >= 1, describe(kind, name, x), ": input must have rank >= 1");
  Graph& g = *x.graph();
  DefaultGraphGuard graph_guard(g);
  VariableScopeGuard scope(name, Reuse::kInherit, nullptr, &g);
  return ops::identity(batch_flatten(x), "output");
}

// ---- regularization --------------------------------------------------------------------------

Regularizer l2_regularizer(double scale) {
  return [scale](const Output& w) { return ops::l2_loss(w) * scale; };
}

Regularizer l1_regularizer(double scale) {
  return [scale](const Output& w) { return ops::sum(ops::abs(w)) * scale; };
}

namespace {

Output empty_cost(Graph& g, const std::string& name) {
  return ops::constant(Tensor::scalar<float>(0.0f), "empty_" + name, &g);
}

/// Sum of scalar costs named `name`; f32 when their dtypes differ.
Output sum_costs(std::vector<Output> costs, const std::string& name) {
  bool mixed = false;
  for (const Output& c : costs) mixed = mixed || c.dtype() != costs[0].dtype();
  if (mixed) {
    for (Output& c : costs)
      if (c.dtype() != DType::F32) c = ops::cast(c, DType::F32);
  }
  if (costs.size() == 1) return ops::identity(costs[0], name);
  return ops::add_n(costs, name);
}

}  // namespace

Output regularize_cost(const std::string& regex, const Regularizer& func, const std::string& name) {
  SPIRE_CHECK(!regex.empty(), "regularize_cost: the regex must not be empty");
  SPIRE_CHECK(static_cast<bool>(func), "regularize_cost: no regularizer function given");
  Graph& g = default_graph();
  TowerContext* ctx = get_current_tower_context(&g);
  if (ctx && !ctx->is_training()) return empty_cost(g, name);
  std::regex re;
  try {
    re = std::regex(regex);
  } catch (const std::regex_error& e) {
    throw_error("regularize_cost: invalid regex '", regex, "': ", e.what());
  }
  // Replicated variables (a tower with its own variable scope): only this tower's. Shared
  // variables (no variable scope, as the main tower of a shared-variable trainer): all.
  std::vector<Output> params = (ctx && ctx->has_own_variables() && !ctx->vs_name().empty())
                                   ? ctx->get_collection_in_tower(GraphKeys::TRAINABLE_VARIABLES)
                                   : g.get_collection(GraphKeys::TRAINABLE_VARIABLES);
  std::vector<Output> costs;
  {
    NameScope internals(g, name + "_internals");
    for (const Output& p : params) {
      if (!std::regex_search(p.node->name(), re)) continue;
      Output c = func(p);
      SPIRE_CHECK(c.valid() && is_floating(c.dtype()) && c.shape().rank() == 0,
                  "regularize_cost: the regularizer of variable '", p.node->name(),
                  "' must give a floating scalar, got ",
                  c.valid() ? str_cat(dtype_name(c.dtype()), c.shape().to_string())
                            : std::string("<invalid>"));
      costs.push_back(c);
    }
  }
  if (costs.empty()) return empty_cost(g, name);
  Output total = sum_costs(costs, name);
  g.add_to_collection(GraphKeys::REGULARIZATION_LOSSES, total);
  return total;
}

Output regularize_cost(const std::string& regex, double l2_factor, const std::string& name) {
  return regularize_cost(regex, l2_regularizer(l2_factor), name);
}

Output regularize_cost_from_collection(const std::string& name) {
  Graph& g = default_graph();
  TowerContext* ctx = get_current_tower_context(&g);
  if (ctx && !ctx->is_training()) return empty_cost(g, name);
  std::vector<Output> losses = ctx ? ctx->get_collection_in_tower(GraphKeys::REGULARIZATION_LOSSES)
                                   : g.get_collection(GraphKeys::REGULARIZATION_LOSSES);
  if (losses.empty()) return empty_cost(g, name);
  return sum_costs(losses, name);
}

}  // namespace spire
