// Tests for kernels/vector_math.h (the vectorizable f32 exp and erf) over dense grids
// against the double-precision math library, for the per-instruction-set loops of
// kernels/cpu/vector_loops.h (every variant this CPU has gives the same bits as the baseline
// loop, so results do not depend on the machine's vector width, a loop's split or the thread
// count), and for the f32 Gelu and GeluGrad ops that run through them: long inputs (vector
// bodies and scalar tails) against the exact formulas in double. Compiled, like the kernels,
// without FMA contraction (tests/CMakeLists.txt).
#include "kernels/vector_math.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "kernels/cpu/vector_loops.h"
#include "kernels/functors.h"

#include <cmath>
#include <limits>
#include <vector>

#include "spire.h"

namespace spire {
namespace {

TEST(VectorMath, ExpF32IsWithinOneUlpOnItsRange) {
  double worst = 0;
  for (int i = 0; i <= 2000000; ++i) {
    const float x = -87.3f + static_cast<float>(i) * (175.3f / 2000000.0f);
    const double want = std::exp(static_cast<double>(x));
    const double rel = std::abs(static_cast<double>(vmath::exp_f32(x)) - want) / want;
    worst = std::max(worst, rel);
  }
  EXPECT_LT(worst, std::numeric_limits<float>::epsilon()) << "worst relative error " << worst;
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

// Equal bits, or both NaN: which NaN an operation returns (the input's, or the default NaN
// an invalid operation makes, with its sign bit set on x86) depends on operand order, which
// the compiler may choose differently in each variant.
template <class T>
bool same_bits_or_both_nan(T a, T b) {
  if constexpr (std::is_floating_point_v<T>)
    if (std::isnan(a) && std::isnan(b)) return true;
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// Each loop variant this CPU runs against the baseline loop, bit for bit, on 10,007 values
// (vector bodies, a 256-bit epilogue and scalar tails), started at every offset 0..16.
template <class In, class Out, class F>
void expect_unary_variants_agree(const std::vector<In>& x, F f, const char* what) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<Out> base(x.size()), got(x.size());
  cpu::vec_detail::unary_baseline(x.data(), base.data(), n, f);
#if SPIRE_VEC_X86
  using cpu::detail::GemmIsa;
  for (GemmIsa isa : {GemmIsa::kAvx2, GemmIsa::kAvx512}) {
    if (!cpu::detail::gemm_isa_supported(isa)) continue;
    for (int64_t off = 0; off <= 16; ++off) {
      std::fill(got.begin(), got.end(), Out{});
      if (isa == GemmIsa::kAvx512)
        cpu::vec_detail::unary_avx512(x.data() + off, got.data() + off, n - off, f);
      else
        cpu::vec_detail::unary_avx2(x.data() + off, got.data() + off, n - off, f);
      for (size_t q = static_cast<size_t>(off); q < x.size(); ++q)
        ASSERT_TRUE(same_bits_or_both_nan(base[q], got[q]))
            << what << ": isa " << static_cast<int>(isa) << " offset " << off << " element " << q
            << " (x = " << x[q] << "): " << base[q] << " vs " << got[q];
    }
  }
#endif
}

TEST(VectorMath, EveryLoopVariantGivesTheBaselineBits) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-12.0f, 12.0f);
  std::vector<float> x(10007), dy(10007);
  for (size_t i = 0; i < x.size(); ++i) x[i] = dist(rng), dy[i] = dist(rng);
  x[5] = std::numeric_limits<float>::quiet_NaN();
  x[6] = std::numeric_limits<float>::infinity();
  x[7] = -std::numeric_limits<float>::infinity();
  expect_unary_variants_agree<float, float>(x, functors::Gelu{}, "Gelu");
  expect_unary_variants_agree<float, float>(x, functors::Sigmoid{}, "Sigmoid");
  expect_unary_variants_agree<float, float>(x, functors::GeluTanh{}, "GeluTanh");
  expect_unary_variants_agree<float, uint16_t>(
      x, [](float f) { return functors::float_to_bf16_bits(f); }, "f32 to bf16");
  // GeluGrad through the binary loops.
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> base(x.size()), got(x.size());
  cpu::vec_detail::binary_baseline<cpu::VecScalar::kNone>(dy.data(), x.data(), base.data(), n,
                                                          functors::GeluGrad{});
  cpu::binary_vec<cpu::VecScalar::kNone>(dy.data(), x.data(), got.data(), n, functors::GeluGrad{});
  for (size_t q = 0; q < base.size(); ++q)
    ASSERT_TRUE(same_bits_or_both_nan(base[q], got[q])) << "GeluGrad element " << q;
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
    const double grad = cdf + xd * std::exp(-0.5 * xd * xd) / std::sqrt(2 * 3.14159265358979323846);
    const double tol = 4e-7 * (1 + std::abs(xd));
    const double got[2] = {out[0].data<float>()[i], out[1].data<float>()[i]};
    const double want[2] = {xd * cdf, dyv.data<float>()[i] * grad};
    for (int k = 0; k < 2; ++k)
      if (!(std::abs(got[k] - want[k]) <= tol * (k == 1 ? 1.75 : 1)) && bad++ < 5)
        ADD_FAILURE() << "output " << k << " at x = " << xd << ": " << got[k] << ", want " << want[k];
  }
  EXPECT_EQ(bad, 0u);
}

// Up to and past the clamp of erf's argument (|x| / sqrt(2) > 9.3 from x = 13.16): the
// gradient is dy (x > 0) or about 0, with no trace of the clamped density even where x is
// huge; at +-inf it is NaN (x times a zero density), as PyTorch's.
TEST(VectorMath, GeluGradInF32IsExactFarFromZero) {
  for (float x : {13.0f, 13.15f, 13.2f, 14.0f, 20.0f, 1e10f, 1e38f, 3.4e38f}) {
    EXPECT_EQ(functors::GeluGrad{}(1.5f, x), 1.5f) << x;
    // The true values left of -13 are below 2e-36 in magnitude.
    EXPECT_LE(std::abs(functors::GeluGrad{}(1.5f, -x)), 2e-36f) << -x;
  }
  EXPECT_TRUE(std::isnan(functors::GeluGrad{}(1.5f, std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(functors::GeluGrad{}(1.5f, std::numeric_limits<float>::infinity())));
  EXPECT_TRUE(std::isnan(functors::GeluGrad{}(1.5f, -std::numeric_limits<float>::infinity())));
}

}  // namespace
}  // namespace spire
