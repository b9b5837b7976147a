// Tests of the random ops (core/ops/random_ops.cc, kernels/cpu/random_kernels.cc)
// and of the Philox generator they share with the CUDA kernels
// (kernels/random.h): known-answer vectors, statistics of large draws,
// reproducibility across graphs and sessions, fresh numbers on every run,
// empty shapes, dropout's mask and gradient, and argument errors.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "kernels/random.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

std::vector<double> values(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.num_elements()));
  for (int64_t i = 0; i < t.num_elements(); ++i) v[static_cast<size_t>(i)] = t.element_as_double(i);
  return v;
}

struct Stats {
  double mean = 0, std = 0, min = 0, max = 0;
};
Stats stats(const std::vector<double>& v) {
  Stats s;
  if (v.empty()) return s;
  double sum = 0, sq = 0;
  s.min = s.max = v[0];
  for (double x : v) {
    sum += x;
    s.min = std::min(s.min, x);
    s.max = std::max(s.max, x);
  }
  s.mean = sum / static_cast<double>(v.size());
  for (double x : v) sq += (x - s.mean) * (x - s.mean);
  s.std = std::sqrt(sq / static_cast<double>(v.size()));
  return s;
}

constexpr int64_t kN = 200000;
constexpr DType kFloatTypes[] = {DType::F32, DType::F64};

using RandomFn = Output (*)(const Shape&, DType, double, double, int64_t, const std::string&,
                            Graph*);

// Draws `shape` from `fn` with the given seeds in a fresh graph.
Tensor draw(RandomFn fn, DType dt, double a, double b, int64_t op_seed, int64_t graph_seed = 0,
            const Shape& shape = {64}) {
  Graph g;
  g.set_seed(graph_seed);
  return run1(fn(shape, dt, a, b, op_seed, "", &g));
}

// ---- Philox4x32-10 ---------------------------------------------------------------

void expect_philox(std::array<uint32_t, 4> ctr, uint32_t k0, uint32_t k1,
                   std::array<uint32_t, 4> want) {
  random::Philox4x32 c{{ctr[0], ctr[1], ctr[2], ctr[3]}};
  random::Philox4x32 r = random::philox4x32_10(c, k0, k1);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(r.v[i], want[static_cast<size_t>(i)]) << "word " << i;
}

TEST(Philox, KnownAnswerVectors) {
  // The Random123 known-answer tests for philox4x32_10.
  expect_philox({0, 0, 0, 0}, 0, 0, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
  expect_philox({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, 0xffffffffu, 0xffffffffu,
                {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu});
  expect_philox({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, 0xa4093822u, 0x299f31d0u,
                {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u});
}

TEST(Philox, CounterAndKeyLayout) {
  // philox_bits puts the element index in words 0-1, the sub-counter in
  // words 2-3 and the 64-bit key low word first.
  random::Philox4x32 a = random::philox_bits(0x299f31d0a4093822ull, 0x85a308d3243f6a88ull,
                                             0x0370734413198a2eull);
  EXPECT_EQ(a.v[0], 0xd16cfe09u);
  EXPECT_EQ(a.v[3], 0x24126ea1u);
}

TEST(Philox, UniformConversions) {
  EXPECT_EQ(random::uniform_f32(0), 0.0f);
  EXPECT_LT(random::uniform_f32(0xffffffffu), 1.0f);
  EXPECT_EQ(random::uniform_f64(0, 0), 0.0);
  EXPECT_LT(random::uniform_f64(0xffffffffu, 0xffffffffu), 1.0);
  random::Philox4x32 ones{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}};
  // Rounding toward maxval is pulled back below it.
  EXPECT_LT(random::uniform_range<float>(ones, 1.0f, 1.0f + 1e-7f), 1.0f + 1e-7f);
  EXPECT_LT(random::uniform_range<double>(ones, -3.0, 5.0), 5.0);
  double z0, z1;
  random::box_muller<double>(random::Philox4x32{{0, 0, 0, 0}}, &z0, &z1);  // u1 = 0: finite
  EXPECT_TRUE(std::isfinite(z0) && std::isfinite(z1));
}

// Dropout decides on integers (dropout_threshold): the same decision as comparing the f64
// uniform with the rate, also for rates on and next to the 2^-53 grid of the uniforms.
TEST(Philox, DropoutThresholdDecidesAsTheF64Compare) {
  const double grid = std::ldexp(1.0, -53);
  std::vector<double> rates{0.0, 1e-300, 1e-9, 0.1, 0.25, 0.5, 0.7, 0.999999, 1.0};
  for (double k : {1.0, 3.0, 4503599627370496.0, 9007199254740991.0}) {
    rates.push_back(k * grid);
    rates.push_back(std::nextafter(k * grid, 0.0));
    rates.push_back(std::nextafter(k * grid, 1.0));
  }
  for (double rate : rates) {
    const uint64_t threshold = random::dropout_threshold(rate);
    // Draws whose 53 bits sit on both sides of the threshold, and random ones.
    for (uint64_t k : {threshold, threshold - 1, threshold + 1}) {
      if (k >= (uint64_t{1} << 53)) continue;
      const uint64_t bits = k << 11;
      const bool by_f64 = random::uniform_f64(static_cast<uint32_t>(bits >> 32),
                                              static_cast<uint32_t>(bits)) >= rate;
      EXPECT_EQ(k >= threshold, by_f64) << "rate " << rate << ", k " << k;
    }
    for (uint64_t i = 0; i < 2000; ++i) {
      const random::Philox4x32 w = random::philox_bits(0x1234ABCDull, i * 7919, 0);
      EXPECT_EQ(random::dropout_keep_bits(0x1234ABCDull, i * 7919, threshold),
                random::uniform_f64(w.v[0], w.v[1]) >= rate)
          << "rate " << rate << ", index " << i * 7919;
      if (::testing::Test::HasFailure()) return;
    }
  }
}

TEST(Philox, KernelMatchesGeneratorElementwise) {
  // Element i of a draw is uniform_range(philox_bits(key, offset + i)), with
  // the key from the graph seed, op seed and node id, and the offset
  // advancing by the element count on each run.
  Graph g;
  g.set_seed(11);
  Output r = ops::random_uniform({5}, DType::F64, -1.0, 3.0, /*seed=*/7, "", &g);
  Output u = ops::random_uniform({3}, DType::F32, 0.0, 1.0, /*seed=*/0, "", &g);
  Session s(g);
  for (uint64_t run = 0; run < 2; ++run) {
    auto vals = s.run({r, u});
    uint64_t key = random::derive_key(11, 7, r.node->id());
    for (uint64_t i = 0; i < 5; ++i)
      EXPECT_EQ(vals[0].data<double>()[i],
                random::uniform_range<double>(random::philox_bits(key, run * 5 + i), -1.0, 3.0));
    uint64_t key_u = random::derive_key(11, 0, u.node->id());
    for (uint64_t i = 0; i < 3; ++i)
      EXPECT_EQ(vals[1].data<float>()[i],
                random::uniform_range<float>(random::philox_bits(key_u, run * 3 + i), 0.f, 1.f));
  }
}

// ---- RandomUniform ---------------------------------------------------------------

SPIRE_FORWARD_TEST(RandomUniform, Statistics) {
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor t = draw(ops::random_uniform, dt, -2.0, 6.0, 3, 0, {kN / 100, 100});
    EXPECT_EQ(t.dtype(), dt);
    EXPECT_EQ(t.shape(), Shape({kN / 100, 100}));
    Stats s = stats(values(t));
    EXPECT_GE(s.min, -2.0);
    EXPECT_LT(s.max, 6.0);
    EXPECT_NEAR(s.mean, 2.0, 0.03);
    EXPECT_NEAR(s.std, 8.0 / std::sqrt(12.0), 0.02);
    EXPECT_LT(s.min, -1.99);
    EXPECT_GT(s.max, 5.99);
  }
}

SPIRE_FORWARD_TEST(RandomUniform, DefaultsAndTinyRange) {
  Graph g;
  Output d = ops::random_uniform({1000}, DType::F32, 0.0, 1.0, 0, "", &g);
  Output tiny = ops::random_uniform({1000}, DType::F32, 1.0, 1.0 + 1e-7, 0, "", &g);
  auto v = run({d, tiny});
  Stats s = stats(values(v[0]));
  EXPECT_GE(s.min, 0.0);
  EXPECT_LT(s.max, 1.0);
  for (double x : values(v[1])) {
    EXPECT_GE(x, 1.0);
    EXPECT_LT(x, static_cast<double>(static_cast<float>(1.0 + 1e-7)));
  }
}

SPIRE_FORWARD_TEST(RandomUniform, ReproducibleAcrossGraphs) {
  for (DType dt : kFloatTypes) {
    // Same graph built twice, with and without op seeds.
    for (int64_t seed : {0, 5}) {
      Tensor a = draw(ops::random_uniform, dt, 0, 1, seed, 42);
      Tensor b = draw(ops::random_uniform, dt, 0, 1, seed, 42);
      EXPECT_EQ(values(a), values(b)) << "op seed " << seed;
    }
    // A different op seed, or graph seed, changes the stream.
    EXPECT_NE(values(draw(ops::random_uniform, dt, 0, 1, 5, 42)),
              values(draw(ops::random_uniform, dt, 0, 1, 6, 42)));
    EXPECT_NE(values(draw(ops::random_uniform, dt, 0, 1, 5, 42)),
              values(draw(ops::random_uniform, dt, 0, 1, 5, 43)));
    EXPECT_NE(values(draw(ops::random_uniform, dt, 0, 1, 0, 1)),
              values(draw(ops::random_uniform, dt, 0, 1, 0, 2)));
  }
}

SPIRE_FORWARD_TEST(RandomUniform, RunsDifferAndSessionsReproduce) {
  Graph g;
  g.set_seed(1);
  Output r = ops::random_uniform({32}, DType::F32, 0, 1, 0, "r", &g);
  Output r2 = ops::random_uniform({32}, DType::F32, 0, 1, 0, "r2", &g);
  Session s1(g), s2(g);
  std::vector<double> a1 = values(s1.run({r})[0]);
  std::vector<double> a2 = values(s1.run({r})[0]);
  EXPECT_NE(a1, a2) << "successive runs must draw fresh numbers";
  EXPECT_EQ(values(s2.run({r})[0]), a1) << "a second session reproduces the sequence";
  EXPECT_EQ(values(s2.run({r})[0]), a2);
  // Unseeded nodes of one graph draw different streams (keyed by node id).
  EXPECT_NE(values(s1.run({r2})[0]), a1);
}

SPIRE_FORWARD_TEST(RandomUniform, StreamContinuesAcrossRuns) {
  // With an op seed the key does not depend on the node: a draw of 2n
  // elements equals two successive draws of n elements.
  Graph a, b;
  Output big = ops::random_uniform({10}, DType::F64, 0, 1, 9, "", &a);
  Output half = ops::random_uniform({5}, DType::F64, 0, 1, 9, "", &b);
  std::vector<double> whole = values(run1(big));
  Session s(b);
  std::vector<double> parts = values(s.run({half})[0]);
  std::vector<double> second = values(s.run({half})[0]);
  parts.insert(parts.end(), second.begin(), second.end());
  EXPECT_EQ(whole, parts);
}

SPIRE_FORWARD_TEST(RandomUniform, ZeroElements) {
  for (DType dt : kFloatTypes) {
    Graph g;
    Tensor t = run1(ops::random_uniform({0, 3}, dt, 0, 1, 0, "", &g));
    EXPECT_EQ(t.dtype(), dt);
    EXPECT_EQ(t.shape(), Shape({0, 3}));
    EXPECT_EQ(t.num_elements(), 0);
    Tensor s = run1(ops::random_uniform({}, dt, 0, 1, 0, "", &g));
    EXPECT_EQ(s.shape(), Shape({}));
    EXPECT_EQ(s.num_elements(), 1);
  }
}

SPIRE_FORWARD_TEST(RandomUniform, BadArgumentsThrow) {
  Graph g;
  expect_error([&] { ops::random_uniform({2}, DType::F32, 1.0, 1.0, 0, "bad_u", &g); },
               {"RandomUniform", "bad_u", "minval", "maxval"});
  expect_error([&] { ops::random_uniform({2}, DType::I32, 0, 1, 0, "int_u", &g); },
               {"RandomUniform", "int_u", "f32 or f64"});
  expect_error([&] { ops::random_uniform({-1, 2}, DType::F32, 0, 1, 0, "dyn_u", &g); },
               {"RandomUniform", "dyn_u", "fully defined"});
  EXPECT_TRUE(OpRegistry::global().get("RandomUniform").stateful());
  EXPECT_TRUE(OpRegistry::global().get("RandomUniform").no_gradient());
}

SPIRE_FORWARD_TEST(RandomUniform, NoGradientActsAsConstant) {
  // d/dx sum(w * r * x) = w * r for the r drawn in the same run.
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F64, {4}, "x");
  Output r = ops::random_uniform({4}, DType::F64, 0, 1, 0, "r");
  Output w = ops::constant(Tensor::from_vector<double>({4}, {1, -2, 3, 0.5}));
  Output dx = gradients({ops::mul(r, x)}, {x}, {w})[0];
  ASSERT_TRUE(dx.valid());
  Session s(g);
  auto v = s.run({dx, r}, {{x, Tensor::from_vector<double>({4}, {1, 2, 3, 4})}});
  std::vector<double> want = values(v[1]);
  const double wv[] = {1, -2, 3, 0.5};
  for (size_t i = 0; i < 4; ++i) want[i] *= wv[i];
  EXPECT_EQ(values(v[0]), want);
}

// ---- RandomNormal ----------------------------------------------------------------

SPIRE_FORWARD_TEST(RandomNormal, Statistics) {
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor t = draw(ops::random_normal, dt, 1.5, 3.0, 0, 4, {kN});
    EXPECT_EQ(t.dtype(), dt);
    std::vector<double> v = values(t);
    Stats s = stats(v);
    EXPECT_NEAR(s.mean, 1.5, 0.03);
    EXPECT_NEAR(s.std, 3.0, 0.03);
    // Tails: about 4.55% beyond 2 sigma, 0.27% beyond 3 sigma.
    int64_t beyond2 = 0, beyond3 = 0;
    for (double x : v) {
      beyond2 += std::abs(x - 1.5) > 6.0;
      beyond3 += std::abs(x - 1.5) > 9.0;
    }
    EXPECT_NEAR(static_cast<double>(beyond2) / kN, 0.0455, 0.003);
    EXPECT_NEAR(static_cast<double>(beyond3) / kN, 0.0027, 0.0008);
    // Skewness ~ 0.
    double skew = 0;
    for (double x : v) skew += std::pow((x - s.mean) / s.std, 3);
    EXPECT_NEAR(skew / kN, 0.0, 0.03);
  }
}

SPIRE_FORWARD_TEST(RandomNormal, Reproducibility) {
  for (DType dt : kFloatTypes) {
    EXPECT_EQ(values(draw(ops::random_normal, dt, 0, 1, 0, 7)),
              values(draw(ops::random_normal, dt, 0, 1, 0, 7)));
    EXPECT_NE(values(draw(ops::random_normal, dt, 0, 1, 1, 7)),
              values(draw(ops::random_normal, dt, 0, 1, 2, 7)));
    EXPECT_NE(values(draw(ops::random_normal, dt, 0, 1, 1, 7)),
              values(draw(ops::random_normal, dt, 0, 1, 1, 8)));
    Graph g;
    Output r = ops::random_normal({16}, dt, 0, 1, 3, "", &g);
    Session s(g);
    EXPECT_NE(values(s.run({r})[0]), values(s.run({r})[0]));
  }
}

SPIRE_FORWARD_TEST(RandomNormal, ZeroStddevAndZeroElements) {
  Graph g;
  expect_tensor(run1(ops::random_normal({3}, DType::F64, 2.5, 0.0, 0, "", &g)), {3},
                {2.5, 2.5, 2.5}, 0);
  Tensor t = run1(ops::random_normal({2, 0}, DType::F32, 0, 1, 0, "", &g));
  EXPECT_EQ(t.shape(), Shape({2, 0}));
  expect_error([&] { ops::random_normal({2}, DType::F32, 0, -1, 0, "neg_sd", &g); },
               {"RandomNormal", "neg_sd", "stddev"});
}

// ---- TruncatedNormal --------------------------------------------------------------

SPIRE_FORWARD_TEST(TruncatedNormal, Statistics) {
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(dtype_name(dt));
    const double mean = -1.0, sd = 2.5;
    Tensor t = draw(ops::truncated_normal, dt, mean, sd, 0, 9, {kN});
    EXPECT_EQ(t.dtype(), dt);
    std::vector<double> v = values(t);
    for (double x : v) ASSERT_LE(std::abs(x - mean), 2 * sd * (1 + 1e-6)) << x;
    Stats s = stats(v);
    EXPECT_NEAR(s.mean, mean, 0.03);
    EXPECT_NEAR(s.std, 0.8796 * sd, 0.02);
    // The tails reach close to the bounds.
    EXPECT_LT(s.min, mean - 1.95 * sd);
    EXPECT_GT(s.max, mean + 1.95 * sd);
  }
}

SPIRE_FORWARD_TEST(TruncatedNormal, ReproducibilityAndEmpty) {
  for (DType dt : kFloatTypes) {
    EXPECT_EQ(values(draw(ops::truncated_normal, dt, 0, 1, 0, 3)),
              values(draw(ops::truncated_normal, dt, 0, 1, 0, 3)));
    EXPECT_NE(values(draw(ops::truncated_normal, dt, 0, 1, 1, 3)),
              values(draw(ops::truncated_normal, dt, 0, 1, 2, 3)));
    Graph g;
    Output r = ops::truncated_normal({16}, dt, 0, 1, 0, "", &g);
    Output e = ops::truncated_normal({0}, dt, 0, 1, 0, "", &g);
    Session s(g);
    auto a = s.run({r, e});
    auto b = s.run({r, e});
    EXPECT_NE(values(a[0]), values(b[0]));
    EXPECT_EQ(a[1].shape(), Shape({0}));
  }
  Graph g;
  expect_error([&] { ops::truncated_normal({2}, DType::F64, 0, -0.5, 0, "tn_bad", &g); },
               {"TruncatedNormal", "tn_bad", "stddev"});
}

// ---- Dropout -----------------------------------------------------------------------

Tensor iota(DType dt, int64_t n) {
  Tensor t(dt, {n});
  for (int64_t i = 0; i < n; ++i)
    visit_dtype(dt, "iota", [&](auto z) {
      using T = decltype(z);
      if constexpr (std::is_floating_point_v<T>)
        t.data<T>()[i] = static_cast<T>(0.25 + static_cast<double>(i % 97) * 0.5 - 20);
    });
  return t;
}

template <typename T>
void check_dropout(double rate) {
  SCOPED_TRACE("rate " + std::to_string(rate));
  DType dt = dtype_of<T>;
  Graph g;
  DefaultGraphGuard guard(g);
  const int64_t n = 100000;
  Tensor xv = iota(dt, n);
  Output x = ops::constant(xv);
  Output y = ops::dropout(x, rate, 0, "drop");
  EXPECT_EQ(y.index, 0);
  EXPECT_EQ(y.dtype(), dt);
  Output mask(y.node, 1);
  EXPECT_EQ(mask.dtype(), dt);
  EXPECT_EQ(mask.shape(), Shape({n}));
  Session s(g);
  auto v = s.run({y, mask});
  const T scale = static_cast<T>(1.0 / (1.0 - rate));
  const T* px = xv.data<T>();
  const T* py = v[0].data<T>();
  const T* pm = v[1].data<T>();
  int64_t zeros = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_TRUE(pm[i] == T(0) || pm[i] == scale) << "mask " << pm[i];
    ASSERT_EQ(py[i], px[i] * pm[i]) << "y == x * mask at " << i;
    if (pm[i] == T(0)) {
      ++zeros;
      ASSERT_EQ(py[i], T(0));
    } else {
      ASSERT_EQ(py[i], px[i] * scale);
    }
  }
  EXPECT_NEAR(static_cast<double>(zeros) / n, rate, 0.006);
  // A second run draws a new mask.
  auto v2 = s.run({mask});
  if (rate > 0) {
    EXPECT_NE(values(v2[0]), values(v[1]));
  }
}

SPIRE_FORWARD_TEST(Dropout, MaskStatisticsAndScaling) {
  for (double rate : {0.1, 0.5, 0.9}) {
    check_dropout<float>(rate);
    check_dropout<double>(rate);
  }
  check_dropout<float>(1.0 / 3.0);
}

SPIRE_FORWARD_TEST(Dropout, RateZeroIsIdentity) {
  for (DType dt : kFloatTypes) {
    Graph g;
    DefaultGraphGuard guard(g);
    Tensor xv = iota(dt, 1000);
    Output y = ops::dropout(ops::constant(xv), 0.0);
    Session s(g);
    auto v = s.run({y, Output(y.node, 1)});
    EXPECT_EQ(values(v[0]), values(xv));
    for (double m : values(v[1])) ASSERT_EQ(m, 1.0);
  }
}

SPIRE_FORWARD_TEST(Dropout, ReproducibleAndSeeded) {
  auto mask_of = [](int64_t op_seed, int64_t graph_seed) {
    Graph g;
    g.set_seed(graph_seed);
    DefaultGraphGuard guard(g);
    Output y = ops::dropout(ops::constant(Tensor::full(DType::F32, {256}, 1.0)), 0.5, op_seed);
    return values(run1(Output(y.node, 1)));
  };
  EXPECT_EQ(mask_of(0, 1), mask_of(0, 1));
  EXPECT_EQ(mask_of(4, 1), mask_of(4, 1));
  EXPECT_NE(mask_of(4, 1), mask_of(5, 1));
  EXPECT_NE(mask_of(4, 1), mask_of(4, 2));
}

SPIRE_FORWARD_TEST(Dropout, FedShapesAndEmpty) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F64, {-1, 3}, "x");
  Output y = ops::dropout(x, 0.25);
  EXPECT_EQ(y.shape(), Shape({-1, 3}));
  Session s(g);
  Tensor in = Tensor::full(DType::F64, {4, 3}, 2.0);
  auto v = s.run({y}, {{x, in}});
  EXPECT_EQ(v[0].shape(), Shape({4, 3}));
  for (double e : values(v[0])) EXPECT_TRUE(e == 0.0 || e == 2.0 / 0.75);
  auto e = s.run({y, Output(y.node, 1)}, {{x, Tensor(DType::F64, {0, 3})}});
  EXPECT_EQ(e[0].shape(), Shape({0, 3}));
  EXPECT_EQ(e[1].shape(), Shape({0, 3}));
}

SPIRE_FORWARD_TEST(Dropout, BadRateThrows) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {3}, "x");
  expect_error([&] { ops::dropout(x, 1.0, 0, "drop_one"); },
               {"Dropout", "drop_one", "rate", "[0, 1)"});
  expect_error([&] { ops::dropout(x, -0.1, 0, "drop_neg"); }, {"Dropout", "drop_neg", "rate"});
  expect_error([&] { ops::dropout(x, std::nan(""), 0, "drop_nan"); },
               {"Dropout", "drop_nan", "rate"});
  Output xi = ops::placeholder(DType::I32, {3}, "xi");
  expect_error([&] { ops::dropout(xi, 0.5, 0, "drop_int"); },
               {"Dropout", "drop_int", "floating"});
}

TEST(DropoutGradient, MatchesMaskOfTheSameRun) {
  // d/dx <w, dropout(x)> = w * mask, with the mask fetched in the same run;
  // repeated runs draw new masks and the gradient follows them.
  Graph g;
  DefaultGraphGuard guard(g);
  const int64_t n = 64;
  Output x = ops::placeholder(DType::F64, {n}, "x");
  Output y = ops::dropout(x, 0.4, 0, "drop");
  Output mask(y.node, 1);
  std::mt19937_64 rng(3);
  Tensor wv = random_tensor(DType::F64, {n}, rng, -1, 1);
  Tensor xv = random_tensor(DType::F64, {n}, rng, -2, 2);
  Output dx = gradients({y}, {x}, {ops::constant(wv)})[0];
  ASSERT_TRUE(dx.valid());
  Session s(g);
  std::vector<double> prev_mask;
  for (int run = 0; run < 3; ++run) {
    auto v = s.run({dx, mask, y}, {{x, xv}});
    std::vector<double> m = values(v[1]);
    int zeros = 0;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(v[0].data<double>()[i], wv.data<double>()[i] * m[static_cast<size_t>(i)]);
      ASSERT_EQ(v[2].data<double>()[i], xv.data<double>()[i] * m[static_cast<size_t>(i)]);
      zeros += m[static_cast<size_t>(i)] == 0.0;
    }
    EXPECT_GT(zeros, 0);
    EXPECT_LT(zeros, n);
    EXPECT_NE(m, prev_mask);
    prev_mask = m;
  }
}

}  // namespace
}  // namespace spire::testing
