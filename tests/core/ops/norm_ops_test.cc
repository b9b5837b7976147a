// Forward tests of the fused normalization ops (core/ops/norm_ops.cc):
// LayerNorm against hand-computed values and against a reference built from
// primitive ops (mean, square, rsqrt) in f32 and f64, with and without beta,
// at odd sizes and with many rows (several of LayerNormGrad's column-sum
// blocks); LayerNormGrad against the autodiff of that reference; its dgamma
// and dbeta bit-identical for 1 and 4 threads; and the errors for a bad
// gamma or beta (shape, dtype, count), a bad epsilon and a run-time mismatch.
#include <cmath>
#include <cstring>
#include <random>

#include "core/ops/norm_ops.h"
#include "core/ops/op_util.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

// The reference LayerNorm from primitive ops: y, mean, rstd.
ops::LayerNormOutputs reference(const Output& x, const Output& gamma, const Output& beta,
                                double eps) {
  Output mean = ops::mean(x, {-1}, true);
  Output xc = ops::sub(x, mean);
  Output var = ops::mean(ops::square(xc), {-1}, true);
  Output rstd = ops::rsqrt(ops::add(var, ops::scalar_like(eps, var)));
  Output y = ops::mul(ops::mul(xc, rstd), gamma);
  if (beta.valid()) y = ops::add(y, beta);
  return {y, ops::squeeze(mean, {-1}), ops::squeeze(rstd, {-1})};
}

// Max |a - b| / (1 + |b|) over the elements.
double max_rel_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  double m = 0;
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    const double x = a.element_as_double(i), y = b.element_as_double(i);
    m = std::max(m, std::abs(x - y) / (1 + std::abs(y)));
  }
  return m;
}

SPIRE_FORWARD_TEST(LayerNorm, HandComputed) {
  Graph g;
  DefaultGraphGuard guard(g);
  // Row [1, 2, 3, 4]: mean 2.5, biased variance 1.25; row [-3, 0, 0, 3]: mean 0, variance 4.5.
  Output x = ops::constant(Tensor::from_vector<double>({2, 4}, {1, 2, 3, 4, -3, 0, 0, 3}));
  Output gamma = ops::constant(Tensor::from_vector<double>({4}, {1, 2, -1, 0.5}));
  Output beta = ops::constant(Tensor::from_vector<double>({4}, {0, 1, 0, -1}));
  ops::LayerNormOutputs o = ops::layer_norm(x, gamma, beta);
  EXPECT_EQ(o.y.shape(), Shape({2, 4}));
  EXPECT_EQ(o.mean.shape(), Shape({2}));
  EXPECT_EQ(o.rstd.shape(), Shape({2}));
  auto v = run({o.y, o.mean, o.rstd});
  const double r0 = 1 / std::sqrt(1.25 + 1e-5), r1 = 1 / std::sqrt(4.5 + 1e-5);
  expect_tensor(v[1], {2}, {2.5, 0}, 1e-15);
  expect_tensor(v[2], {2}, {r0, r1}, 1e-15);
  expect_tensor(v[0], {2, 4},
                {-1.5 * r0, -0.5 * r0 * 2 + 1, -0.5 * r0, 1.5 * r0 * 0.5 - 1,
                 -3 * r1, 1, 0, 3 * r1 * 0.5 - 1},
                1e-14);
}

SPIRE_FORWARD_TEST(LayerNorm, MatchesPrimitiveReference) {
  const Shape shapes[] = {{7}, {3, 37}, {2, 5, 33}, {700, 19}};
  for (DType dt : {DType::F32, DType::F64}) {
    for (const Shape& s : shapes) {
      for (bool with_beta : {true, false}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + " " + s.to_string() +
                     (with_beta ? " with beta" : " without beta"));
        Graph g;
        DefaultGraphGuard guard(g);
        std::mt19937_64 rng(s.num_elements());
        const int64_t c = s[s.rank() - 1];
        // An offset of 3 checks the two-pass variance.
        Output x = ops::constant(random_tensor(dt, s, rng, 1, 5));
        Output gamma = ops::constant(random_tensor(dt, {c}, rng, -2, 2));
        Output beta = with_beta ? ops::constant(random_tensor(dt, {c}, rng, -1, 1)) : Output();
        ops::LayerNormOutputs o = ops::layer_norm(x, gamma, beta, 1e-3);
        ops::LayerNormOutputs r = reference(x, gamma, beta, 1e-3);
        auto got = run({o.y, o.mean, o.rstd});
        auto want = run({r.y, r.mean, r.rstd});
        const double tol = dt == DType::F32 ? 2e-5 : 1e-12;
        for (int k = 0; k < 3; ++k) EXPECT_LT(max_rel_diff(got[k], want[k]), tol) << "output " << k;
      }
    }
  }
}

SPIRE_FORWARD_TEST(LayerNormGrad, MatchesAutodiffOfReference) {
  // 700 rows: 44 blocks of 16 rows for the dgamma/dbeta column sums.
  const Shape shapes[] = {{5}, {4, 9}, {3, 2, 37}, {700, 19}};
  for (DType dt : {DType::F32, DType::F64}) {
    for (const Shape& s : shapes) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + s.to_string());
      Graph g;
      DefaultGraphGuard guard(g);
      std::mt19937_64 rng(s.num_elements() + 1);
      const int64_t c = s[s.rank() - 1];
      Output x = ops::constant(random_tensor(dt, s, rng, -2, 2));
      Output gamma = ops::constant(random_tensor(dt, {c}, rng, -2, 2));
      Output beta = ops::constant(random_tensor(dt, {c}, rng, -1, 1));
      Output dy = ops::constant(random_tensor(dt, s, rng, -1, 1));
      ops::LayerNormOutputs o = ops::layer_norm(x, gamma, beta);
      ops::LayerNormGradOutputs lg = ops::layer_norm_grad(dy, x, gamma, o.mean, o.rstd);
      ops::LayerNormOutputs r = reference(x, gamma, beta, 1e-5);
      std::vector<Output> rg = gradients({ops::sum(ops::mul(r.y, dy))}, {x, gamma, beta});
      // The op's own gradient function builds the same LayerNormGrad.
      std::vector<Output> og = gradients({ops::sum(ops::mul(o.y, dy))}, {x, gamma, beta});
      // Only y is differentiated: dx is LayerNormGrad's output alone, with no terms for the
      // (zero) gradients of mean and rstd.
      EXPECT_EQ(og[0].node->op_type(), "LayerNormGrad");
      auto got = run({lg.dx, lg.dgamma, lg.dbeta, og[0], og[1], og[2]});
      auto want = run({rg[0], rg[1], rg[2]});
      const double tol = dt == DType::F32 ? 1e-4 : 1e-11;
      for (int k = 0; k < 3; ++k) {
        EXPECT_LT(max_rel_diff(got[k], want[k]), tol) << "output " << k;
        EXPECT_LT(max_rel_diff(got[k + 3], want[k]), tol) << "autodiff output " << k;
      }
    }
  }
}

SPIRE_FORWARD_TEST(LayerNormGrad, ColumnSumsIndependentOfThreadCount) {
  // f64 too: there a different grouping of the column sums would show in the last bits.
  for (DType dt : {DType::F32, DType::F64}) {
    SCOPED_TRACE(dtype_name(dt));
    Graph g;
    DefaultGraphGuard guard(g);
    std::mt19937_64 rng(7);
    const Shape s{1000, 23};
    Output x = ops::constant(random_tensor(dt, s, rng, -2, 2));
    Output gamma = ops::constant(random_tensor(dt, {23}, rng, -2, 2));
    Output dy = ops::constant(random_tensor(dt, s, rng, -1, 1));
    ops::LayerNormOutputs o = ops::layer_norm(x, gamma);
    ops::LayerNormGradOutputs lg = ops::layer_norm_grad(dy, x, gamma, o.mean, o.rstd);
    std::vector<std::vector<Tensor>> results;
    for (int threads : {1, 2, 4, 3}) {
      SessionOptions opt;
      opt.num_threads = threads;
      Session sess(g, opt);
      results.push_back(sess.run({lg.dx, lg.dgamma, lg.dbeta}));
    }
    for (size_t i = 1; i < results.size(); ++i)
      for (size_t k = 0; k < 3; ++k) {
        const Tensor& a = results[0][k];
        const Tensor& b = results[i][k];
        ASSERT_EQ(a.shape(), b.shape());
        EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()), 0)
            << "run " << i << " output " << k << " differs from the 1-thread result";
      }
  }
}

TEST(LayerNormErrors, BadGammaOrBeta) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {2, 5}, "x");
  Output g4 = ops::placeholder(DType::F32, {4}, "gamma4");
  Output g5 = ops::placeholder(DType::F32, {5}, "gamma5");
  Output g5d = ops::placeholder(DType::F64, {5}, "gamma5d");
  Output g15 = ops::placeholder(DType::F32, {1, 5}, "gamma15");
  expect_error([&] { ops::layer_norm(x, g4); },
               {"LayerNorm", "gamma must have shape [5]", "got [4]", "gamma4:0"});
  expect_error([&] { ops::layer_norm(x, g15); }, {"LayerNorm", "gamma must have shape [5]", "[1, 5]"});
  expect_error([&] { ops::layer_norm(x, g5d); }, {"LayerNorm", "f32", "f64"});
  expect_error([&] { ops::layer_norm(x, g5, g4); }, {"LayerNorm", "beta must have shape [5]"});
  expect_error([&] { ops::add_op("LayerNorm", {x, g5, g5, g5}); }, {"at most one beta"});
  expect_error([&] { ops::layer_norm(x, g5, Output(), -1.0); }, {"epsilon must be >= 0"});
  Output i = ops::placeholder(DType::I32, {2, 5}, "xi");
  expect_error([&] { ops::layer_norm(i, g5); }, {"LayerNorm", "i32"});
  Output dy = ops::placeholder(DType::F32, {2, 4}, "dy");
  Output m = ops::placeholder(DType::F32, {2}, "m");
  expect_error([&] { ops::layer_norm_grad(dy, x, g5, m, m); }, {"LayerNormGrad", "dy has shape [2, 4]"});
  expect_error([&] { ops::layer_norm_grad(x, x, g5, g5, m); }, {"LayerNormGrad", "mean has shape [5]"});
}

TEST(LayerNormErrors, RunTimeShapeMismatch) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {-1, -1}, "x");
  Output gamma = ops::placeholder(DType::F32, {-1}, "gamma");
  Output y = ops::layer_norm(x, gamma).y;
  expect_error([&] {
    run1(y, {{x, Tensor::zeros(DType::F32, {2, 5})}, {gamma, Tensor::zeros(DType::F32, {3})}});
  }, {"LayerNorm", "gamma must have shape [5]", "got [3]"});
  expect_error([&] {
    run1(y, {{x, Tensor::zeros(DType::F32, {2, 0})}, {gamma, Tensor::zeros(DType::F32, {0})}});
  }, {"LayerNorm", "last) dim of x must be >= 1"});
}

}  // namespace
}  // namespace spire::testing
