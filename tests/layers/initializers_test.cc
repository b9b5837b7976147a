// Tests of the variable initializers (layers/initializers.h): TF's fan
// computation, statistics of the random initializers on large tensors
// against TF's formulas, bounds, node names, and reproducibility from the
// graph seed.
#include <cmath>

#include "layers/initializers.h"
#include "layers/variables.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

struct Stats {
  double mean = 0, std = 0, min = 0, max = 0;
};

Stats stats_of(const Tensor& t) {
  Stats s;
  const int64_t n = t.num_elements();
  s.min = s.max = t.element_as_double(0);
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < n; ++i) {
    double v = t.element_as_double(i);
    sum += v;
    s.min = std::min(s.min, v);
    s.max = std::max(s.max, v);
  }
  s.mean = sum / static_cast<double>(n);
  for (int64_t i = 0; i < n; ++i) {
    double d = t.element_as_double(i) - s.mean;
    sq += d * d;
  }
  s.std = std::sqrt(sq / static_cast<double>(n));
  return s;
}

/// Initial value of a fresh variable of `shape` made with `init` in a graph with `seed`.
Tensor initial_value(const Initializer& init, const Shape& shape, int64_t seed = 0,
                     DType dtype = DType::F32) {
  Graph g;
  g.set_seed(seed);
  DefaultGraphGuard guard(g);
  Variable v = get_variable("v", shape, dtype, init);
  Session s(g);
  s.run({}, {}, {v.initializer});
  return s.run({v.value})[0];
}

TEST(Initializers, ComputeFansLikeTF) {
  EXPECT_EQ(init::compute_fans(Shape{}), std::make_pair(1.0, 1.0));
  EXPECT_EQ(init::compute_fans(Shape{7}), std::make_pair(7.0, 7.0));
  EXPECT_EQ(init::compute_fans(Shape{3, 5}), std::make_pair(3.0, 5.0));
  EXPECT_EQ(init::compute_fans(Shape{3, 3, 16, 32}), std::make_pair(144.0, 288.0));
  EXPECT_EQ(init::compute_fans(Shape{5, 4, 6}), std::make_pair(20.0, 30.0));
}

TEST(Initializers, Constants) {
  expect_tensor(initial_value(init::zeros(), {2, 3}), {2, 3}, {0, 0, 0, 0, 0, 0});
  expect_tensor(initial_value(init::ones(), {3}), {3}, {1, 1, 1});
  expect_tensor(initial_value(init::constant(-1.5), {}), {}, {-1.5});
  expect_tensor(initial_value(init::constant(2), {2, 2}, 0, DType::F64), {2, 2}, {2, 2, 2, 2});
  Tensor i = initial_value(init::constant(3), {2}, 0, DType::I64);
  EXPECT_EQ(i.dtype(), DType::I64);
  expect_tensor(i, {2}, {3, 3});
}

TEST(Initializers, UniformBoundsAndMoments) {
  Tensor t = initial_value(init::uniform(-0.3, 0.7), {200, 300});
  Stats s = stats_of(t);
  EXPECT_GE(s.min, -0.3);
  EXPECT_LT(s.max, 0.7);
  EXPECT_NEAR(s.mean, 0.2, 0.01);
  EXPECT_NEAR(s.std, 1.0 / std::sqrt(12.0), 0.01);
  EXPECT_LT(s.min, -0.29);  // the whole range is used
  EXPECT_GT(s.max, 0.69);
}

TEST(Initializers, NormalMoments) {
  Stats s = stats_of(initial_value(init::normal(1.0, 0.5), {200, 300}));
  EXPECT_NEAR(s.mean, 1.0, 0.01);
  EXPECT_NEAR(s.std, 0.5, 0.01);
  EXPECT_LT(s.min, 1.0 - 2 * 0.5);  // untruncated: some beyond 2 stddev
}

TEST(Initializers, TruncatedNormalWithinTwoStddev) {
  Stats s = stats_of(initial_value(init::truncated_normal(0.5, 0.2), {200, 300}));
  EXPECT_GE(s.min, 0.5 - 0.4 - 1e-6);
  EXPECT_LE(s.max, 0.5 + 0.4 + 1e-6);
  EXPECT_NEAR(s.mean, 0.5, 0.005);
  // Truncation at 2 sigma shrinks the stddev by 0.87962566.
  EXPECT_NEAR(s.std, 0.2 * 0.87962566103423978, 0.005);
}

TEST(Initializers, GlorotUniformLimit) {
  const Shape shape{200, 300};
  double limit = std::sqrt(6.0 / (200 + 300));
  Stats s = stats_of(initial_value(init::glorot_uniform(), shape));
  EXPECT_GE(s.min, -limit);
  EXPECT_LE(s.max, limit);
  EXPECT_GT(s.max, 0.98 * limit);
  EXPECT_NEAR(s.mean, 0.0, 0.003);
  EXPECT_NEAR(s.std, limit / std::sqrt(3.0), 0.02 * limit);
}

TEST(Initializers, GlorotNormalStddev) {
  double stddev = std::sqrt(2.0 / (200 + 300));
  Stats s = stats_of(initial_value(init::glorot_normal(), {200, 300}));
  EXPECT_NEAR(s.std, stddev, 0.02 * stddev);  // the truncation correction restores it
  double bound = 2 * stddev / 0.87962566103423978;
  EXPECT_LE(s.max, bound + 1e-6);
  EXPECT_GE(s.min, -bound - 1e-6);
}

TEST(Initializers, HeNormalAndUniformOnConvFilters) {
  const Shape hwio{3, 3, 64, 128};  // fan_in = 576
  double stddev = std::sqrt(2.0 / 576.0);
  Stats n = stats_of(initial_value(init::he_normal(), hwio));
  EXPECT_NEAR(n.std, stddev, 0.02 * stddev);
  EXPECT_NEAR(n.mean, 0.0, 0.02 * stddev);
  double limit = std::sqrt(6.0 / 576.0);
  Stats u = stats_of(initial_value(init::he_uniform(), hwio));
  EXPECT_LE(u.max, limit);
  EXPECT_GE(u.min, -limit);
  EXPECT_NEAR(u.std, limit / std::sqrt(3.0), 0.02 * limit);
}

TEST(Initializers, VarianceScalingModesAndDistributions) {
  // fan_out, untruncated normal, scale 3: stddev sqrt(3 / 300).
  Stats s = stats_of(initial_value(init::variance_scaling(3.0, "fan_out", "untruncated_normal"),
                                   {200, 300}));
  EXPECT_NEAR(s.std, std::sqrt(3.0 / 300.0), 0.02 * std::sqrt(3.0 / 300.0));
  // fan_in, uniform, scale 0.5: limit sqrt(1.5 / 200).
  double limit = std::sqrt(1.5 / 200.0);
  Stats u = stats_of(initial_value(init::variance_scaling(0.5, "fan_in", "uniform"), {200, 300}));
  EXPECT_LE(u.max, limit);
  EXPECT_GT(u.max, 0.98 * limit);
  expect_error([] { init::variance_scaling(1.0, "fan_sum"); }, {"mode", "fan_sum"});
  expect_error([] { init::variance_scaling(1.0, "fan_in", "cauchy"); }, {"distribution", "cauchy"});
  expect_error([] { init::variance_scaling(0.0); }, {"scale must be positive"});
  expect_error([] { init::uniform(1.0, -1.0); }, {"minval <= maxval"});
}

TEST(Initializers, RandomInitializerRejectsIntegerDtype) {
  Graph g;
  DefaultGraphGuard guard(g);
  expect_error([] { get_variable("i", {2}, DType::I32, init::normal()); },
               {"initializer normal", "i32"});
}

TEST(Initializers, NodesLiveUnderInitializerScope) {
  Graph g;
  DefaultGraphGuard guard(g);
  VariableScopeGuard s("fc");
  Variable w = get_variable("W", {4, 4}, DType::F32, init::truncated_normal());
  Node* value = w.initializer->input(1).node;
  EXPECT_EQ(value->name(), "fc/W/Initializer/truncated_normal");
  EXPECT_EQ(value->op_type(), "TruncatedNormal");
  Variable b = get_variable("b", {4}, DType::F32, init::zeros());
  EXPECT_EQ(b.initializer->input(1).node->name().rfind("fc/b/Initializer/", 0), 0u);
}

TEST(Initializers, ReproducibleFromGraphSeed) {
  auto build = [](int64_t seed) {
    Graph g;
    g.set_seed(seed);
    DefaultGraphGuard guard(g);
    std::vector<Output> vals;
    {
      VariableScopeGuard s("net");
      vals.push_back(get_variable("w1", {20, 30}).value);  // glorot_uniform
      vals.push_back(get_variable("w2", {30, 10}, DType::F32, init::he_normal()).value);
      vals.push_back(get_variable("w3", {10}, DType::F32, init::normal()).value);
    }
    Session sess(g);
    sess.run({}, {}, {global_variables_initializer(&g)});
    return sess.run(vals);
  };
  auto a = build(42), b = build(42), c = build(43);
  bool all_same_c = true;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].num_elements(), b[i].num_elements());
    EXPECT_EQ(a[i].to_vector<float>(), b[i].to_vector<float>()) << "variable " << i;
    all_same_c = all_same_c && a[i].to_vector<float>() == c[i].to_vector<float>();
  }
  EXPECT_FALSE(all_same_c);
  // Two variables in one graph draw different numbers.
  EXPECT_NE(a[0].to_vector<float>()[0], a[1].to_vector<float>()[0]);
}

}  // namespace
}  // namespace spire::testing
