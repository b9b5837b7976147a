// LayerNorm (layers/layers.h): tensorpack's LayerNorm layer (variables
// gamma and beta, epsilon 1e-5, use_bias/use_scale) over the last axis, built
// on the fused LayerNorm op (core/ops/norm_ops.h), so its backward is the
// op's one-pass LayerNormGrad.
#include "core/ops.h"
#include "layers/initializers.h"
#include "layers/layer_util.h"
#include "layers/layers.h"
#include "layers/variables.h"

namespace spire {

using layer_detail::check_input;
using layer_detail::describe;

Output LayerNorm(const std::string& name, const Output& x, const LayerNormOptions& opts) {
  const char* kind = "LayerNorm";
  check_input(kind, name, x);
  Graph& g = *x.graph();
  DefaultGraphGuard graph_guard(g);
  LayerArgs a = resolve_layer_args(g, LayerKind::LayerNorm, opts.args);
  const Shape& s = x.shape();
  SPIRE_CHECK(s.rank() >= 1, describe(kind, name, x), ": input must have rank >= 1");
  const int64_t channels = s[s.rank() - 1];
  SPIRE_CHECK(channels >= 1, describe(kind, name, x),
              ": the normalized (last) dimension must be known and >= 1");
  const double epsilon = a.epsilon_.value_or(1e-5);
  SPIRE_CHECK(epsilon >= 0.0, describe(kind, name, x), ": epsilon must be >= 0, got ", epsilon);

  VariableScopeGuard scope(name, Reuse::kInherit, nullptr, &g);
  const DType dt = x.dtype();
  Output gamma, beta;
  if (a.use_scale_.value_or(true))
    gamma = get_variable("gamma", Shape{channels}, dt, a.gamma_initializer_.value_or(init::ones()))
                .value;
  else
    gamma = ops::constant(Tensor::full(dt, Shape{channels}, 1.0), "gamma_ones");
  if (a.use_bias_.value_or(true))
    beta = get_variable("beta", Shape{channels}, dt, init::zeros()).value;
  return ops::identity(ops::layer_norm(x, gamma, beta, epsilon).y, "output");
}

}  // namespace spire
