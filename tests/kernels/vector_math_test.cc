// Tests for kernels/vector_math.h (the vectorizable f32 exp and erf) over dense grids
// against the double-precision math library, and for the f32 Gelu and GeluGrad ops that use
// them through the CPU's per-instruction-set elementwise loops (kernels/cpu/elementwise.cc):
// long inputs (vector bodies and scalar tails) against the exact formulas in double.
#include "kernels/vector_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "spire.h"

namespace spire {
namespace {

TEST(VectorMath, ExpF32IsWithinTwoUlpOnItsRange) {
  double worst = 0;
  for (int i = 0; i <= 2000000; ++i) {
    const float x = -87.3f + static_cast<float>(i) * (175.3f / 2000000.0f);
    const double want = std::exp(static_cast<double>(x));
    const double rel = std::abs(static_cast<double>(vmath::exp_f32(x)) - want) / want;
    worst = std::max(worst, rel);
  }
  EXPECT_LT(worst, 2.5 * std::numeric_limits<float>::epsilon()) << "worst relative error " << worst;
  EXPECT_EQ(vmath::exp_f32(0.0f), 1.0f);
  EXPECT_EQ(vmath::exp_f32(-100.0f), 0.0f) << "below the range: 0 (the true value is subnormal)";
  EXPECT_EQ(vmath::exp_f32(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_TRUE(std::isnan(vmath::exp_f32(std::numeric_limits<float>::quiet_NaN())));
}

TEST(VectorMath, ErfF32IsWithinAbramowitzStegunsBound) {
  double worst = 0;
  for (int i = 0; i <= 2000000; ++i) {
    const float x = -9.0f + static_cast<float>(i) * (18.0f / 2000000.0f);
    const double err = std::abs(static_cast<double>(vmath::erf_f32(x)) - std::erf(static_cast<double>(x)));
    worst = std::max(worst, err);
    ASSERT_EQ(vmath::erf_f32(-x), -vmath::erf_f32(x)) << "erf is odd; x = " << x;
  }
  // A&S 7.1.26 is within 1.5e-7; f32 rounding of 1 - (about 0.5) adds a few ulp of 0.5
  // (measured: 3.3e-7 at worst).
  EXPECT_LT(worst, 3.5e-7) << "worst absolute error " << worst;
  // Near 0 the series keeps erf's relative precision.
  for (float x : {1e-30f, 1e-6f, 1e-3f, 0.1f, 0.3f, 0.49f}) {
    const double want = std::erf(static_cast<double>(x));
    EXPECT_LT(std::abs(vmath::erf_f32(x) - want) / want, 4 * std::numeric_limits<float>::epsilon()) << x;
  }
  EXPECT_EQ(vmath::erf_f32(0.0f), 0.0f);
  EXPECT_EQ(vmath::erf_f32(20.0f), 1.0f);
  EXPECT_EQ(vmath::erf_f32(-std::numeric_limits<float>::infinity()), -1.0f);
  EXPECT_TRUE(std::isnan(vmath::erf_f32(std::numeric_limits<float>::quiet_NaN())));
}

// The ops on 100,003 values in [-12, 12] (not a multiple of any vector width).
TEST(VectorMath, GeluOpsInF32MatchTheExactFormulas) {
  const int64_t n = 100003;
  Tensor xv(DType::F32, Shape{n}), dyv(DType::F32, Shape{n});
  for (int64_t i = 0; i < n; ++i) {
    xv.data<float>()[i] = -12.0f + 24.0f * static_cast<float>(i) / static_cast<float>(n - 1);
    dyv.data<float>()[i] = 0.5f + static_cast<float>(i % 7) * 0.25f;
  }
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {n}, "x");
  Output dy = ops::placeholder(DType::F32, {n}, "dy");
  SessionOptions options;
  options.num_threads = 2;
  Session s(g, options);
  const auto out = s.run({ops::gelu(x), ops::gelu_grad(dy, x)}, {{x, xv}, {dy, dyv}});
  size_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double xd = xv.data<float>()[i];
    const double cdf = 0.5 * (1 + std::erf(xd / std::sqrt(2.0)));
    const double grad = cdf + xd * std::exp(-0.5 * xd * xd) / std::sqrt(2 * M_PI);
    const double tol = 4e-7 * (1 + std::abs(xd));
    const double got[2] = {out[0].data<float>()[i], out[1].data<float>()[i]};
    const double want[2] = {xd * cdf, dyv.data<float>()[i] * grad};
    for (int k = 0; k < 2; ++k)
      if (!(std::abs(got[k] - want[k]) <= tol * (k == 1 ? 1.75 : 1)) && bad++ < 5)
        ADD_FAILURE() << "output " << k << " at x = " << xd << ": " << got[k] << ", want " << want[k];
  }
  EXPECT_EQ(bad, 0u);
}

}  // namespace
}  // namespace spire
