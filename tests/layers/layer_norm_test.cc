// Tests of the LayerNorm layer (layers/layer_norm.cc): tensorpack's variable
// names (gamma, beta) and options (use_bias, use_scale, epsilon,
// gamma_initializer, through explicit options and argscope), values against a
// hand-written f64 reference on a rank-3 input, gradients reaching the
// variables, and the errors for an unknown last dim and a bad option.
#include <cmath>
#include <random>

#include "layers/layers.h"
#include "tests/layers/layer_test_util.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

// LayerNorm over the last axis of x (rows of c) in double.
std::vector<double> reference(const std::vector<double>& x, int64_t c, const std::vector<double>& gamma,
                              const std::vector<double>& beta, double eps) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / static_cast<size_t>(c); ++r) {
    const double* xs = x.data() + r * static_cast<size_t>(c);
    double mean = 0, var = 0;
    for (int64_t j = 0; j < c; ++j) mean += xs[j] / static_cast<double>(c);
    for (int64_t j = 0; j < c; ++j) var += (xs[j] - mean) * (xs[j] - mean) / static_cast<double>(c);
    for (int64_t j = 0; j < c; ++j)
      y[r * static_cast<size_t>(c) + static_cast<size_t>(j)] =
          (xs[j] - mean) / std::sqrt(var + eps) * gamma[static_cast<size_t>(j)] +
          beta[static_cast<size_t>(j)];
  }
  return y;
}

std::vector<double> random_values(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-2, 3);
  std::vector<double> v(n);
  for (double& d : v) d = u(rng);
  return v;
}

TEST(LayerNormLayer, VariablesAndValues) {
  GraphEnv env;
  const Shape s{2, 3, 5};
  const std::vector<double> xv = random_values(30, 1);
  Output x = ops::constant(f64(s, xv));
  Output y = LayerNorm("ln", x);
  EXPECT_EQ(y.node->name(), "ln/output");
  EXPECT_EQ(y.shape(), s);
  EXPECT_EQ(names_of(trainable_variables()), (std::vector<std::string>{"ln/gamma", "ln/beta"}));
  auto sess = init_session(env.g);
  // Set gamma and beta to non-trivial values.
  const std::vector<double> gv = {1, -2, 0.5, 3, 1.5}, bv = {0.1, 0, -1, 2, 0.5};
  sess->run_targets({ops::assign(Output(var_node(env.g, "ln/gamma"), 0), ops::constant(f64({5}, gv))).node,
                     ops::assign(Output(var_node(env.g, "ln/beta"), 0), ops::constant(f64({5}, bv))).node});
  const std::vector<double> got = vals(sess->run({y})[0]);
  const std::vector<double> want = reference(xv, 5, gv, bv, 1e-5);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << i;
  // Both variables get gradients.
  std::vector<Output> g = gradients({ops::sum(ops::mul(y, y))}, trainable_variables());
  ASSERT_TRUE(g[0].valid() && g[1].valid());
  auto gvals = sess->run(g);
  double norm = 0;
  for (double v : vals(gvals[0])) norm += std::abs(v);
  EXPECT_GT(norm, 0);
}

TEST(LayerNormLayer, UseBiasUseScaleAndEpsilon) {
  GraphEnv env;
  const std::vector<double> xv = random_values(12, 2);
  Output x = ops::constant(f64({3, 4}, xv));
  // nanoGPT's LayerNorm: no bias.
  Output a = LayerNorm("no_bias", x, LayerNormOptions().use_bias(false));
  // Neither scale nor bias: plain normalization, no variables.
  Output b = LayerNorm("plain", x, LayerNormOptions().use_bias(false).use_scale(false).epsilon(0.5));
  Output c;
  {
    ArgScope scope(LayerNormOptions().epsilon(0.25).gamma_initializer(init::constant(2.0)));
    c = LayerNorm("scoped", x);
  }
  EXPECT_EQ(names_of(trainable_variables()),
            (std::vector<std::string>{"no_bias/gamma", "scoped/gamma", "scoped/beta"}));
  auto sess = init_session(env.g);
  auto v = sess->run({a, b, c});
  const std::vector<double> ones(4, 1.0), zeros(4, 0.0), twos(4, 2.0);
  const std::vector<double> wa = reference(xv, 4, ones, zeros, 1e-5);
  const std::vector<double> wb = reference(xv, 4, ones, zeros, 0.5);
  const std::vector<double> wc = reference(xv, 4, twos, zeros, 0.25);
  for (size_t i = 0; i < 12; ++i) {
    EXPECT_NEAR(vals(v[0])[i], wa[i], 1e-12);
    EXPECT_NEAR(vals(v[1])[i], wb[i], 1e-12);
    EXPECT_NEAR(vals(v[2])[i], wc[i], 1e-12);
  }
}

TEST(LayerNormLayer, Errors) {
  GraphEnv env;
  Output unknown = ops::placeholder(DType::F32, {2, -1}, "x");
  expect_error([&] { LayerNorm("ln", unknown); }, {"LayerNorm 'ln'", "last) dimension must be known"});
  Output x = ops::placeholder(DType::F32, {2, 3}, "x2");
  expect_error([&] { LayerNorm("ln2", x, LayerNormOptions().epsilon(-1)); }, {"epsilon must be >= 0"});
  expect_error([&] { ArgScope bad({LayerKind::LayerNorm}, LayerArgs().momentum(0.5)); },
               {"LayerNorm has no argument 'momentum'"});
}

}  // namespace
}  // namespace spire::testing
