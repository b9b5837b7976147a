// Tests for the AVX512-BF16 GEMM (kernels/cpu/gemm_bf16.h) against a double-precision loop
// over the same bf16 values: transposes, shapes with edge tiles, odd k, k beyond one packed
// block, m and n beyond one block, a padded C, and a thread pool (which must not change a
// single bit). Skipped, saying so, on CPUs without AVX512-BF16.
#include "kernels/cpu/gemm_bf16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"

namespace spire::cpu {
namespace {

// A bf16 pattern of a random value in [-2, 2] (rounded to nearest even), and its value.
uint16_t random_bf16(std::mt19937& rng, double* value) {
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  const float f = dist(rng);
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  const uint16_t h = static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
  const uint32_t back = static_cast<uint32_t>(h) << 16;
  float v;
  std::memcpy(&v, &back, sizeof v);
  *value = v;
  return h;
}

struct Dims {
  int64_t m, n, k;
};

TEST(GemmBf16, MatchesTheExactProductOfTheBf16Values) {
  if (!gemm_bf16_supported())
    GTEST_SKIP() << "this CPU has no AVX512-BF16: the MatMul widens to f32";
  ThreadPool pool(3);
  const Dims shapes[] = {{1, 1, 1},     {7, 13, 5},    {6, 64, 2},    {37, 19, 70},
                         {300, 3, 257}, {5, 700, 513}, {130, 600, 9}, {96, 96, 600},
                         {400, 70, 100}, {5, 720, 600}};  // threaded: the pool splits m, then n
  for (const Dims& d : shapes)
    for (int t = 0; t < 4; ++t) {
      const bool ta = (t & 1) != 0, tb = (t & 2) != 0;
      std::mt19937 rng(static_cast<uint32_t>(d.m * 1000 + d.n * 10 + d.k + t));
      std::vector<uint16_t> a(static_cast<size_t>(d.m * d.k)), b(static_cast<size_t>(d.k * d.n));
      std::vector<double> av(a.size()), bv(b.size());
      for (size_t i = 0; i < a.size(); ++i) a[i] = random_bf16(rng, &av[i]);
      for (size_t i = 0; i < b.size(); ++i) b[i] = random_bf16(rng, &bv[i]);
      const int64_t lda = ta ? d.m : d.k, ldb = tb ? d.k : d.n, ldc = d.n + 3;
      std::vector<float> c(static_cast<size_t>(d.m * ldc), NAN), cp = c;
      gemm_bf16(ta, tb, d.m, d.n, d.k, a.data(), lda, b.data(), ldb, c.data(), ldc, nullptr);
      gemm_bf16(ta, tb, d.m, d.n, d.k, a.data(), lda, b.data(), ldb, cp.data(), ldc, &pool);
      const std::string what = std::to_string(d.m) + "x" + std::to_string(d.n) + "x" +
                               std::to_string(d.k) + " transpose " + std::to_string(t);
      for (int64_t i = 0; i < d.m; ++i)
        for (int64_t j = 0; j < d.n; ++j) {
          double exact = 0, mag = 0;
          for (int64_t p = 0; p < d.k; ++p) {
            const double x =
                ta ? av[static_cast<size_t>(p * lda + i)] : av[static_cast<size_t>(i * lda + p)];
            const double y =
                tb ? bv[static_cast<size_t>(j * ldb + p)] : bv[static_cast<size_t>(p * ldb + j)];
            exact += x * y;
            mag += std::abs(x * y);
          }
          const size_t at = static_cast<size_t>(i * ldc + j);
          // Exact products, f32 sums: within a few f32 epsilons of the sum of magnitudes.
          ASSERT_NEAR(c[at], exact, 1e-6 * mag + 1e-30) << what << " (" << i << ", " << j << ")";
          ASSERT_EQ(std::memcmp(&c[at], &cp[at], sizeof(float)), 0)
              << what << ": depends on threads";
        }
      for (int64_t i = 0; i < d.m; ++i)
        for (int64_t j = d.n; j < ldc; ++j)
          ASSERT_TRUE(std::isnan(c[static_cast<size_t>(i * ldc + j)])) << what << ": wrote past n";
    }
}

}  // namespace
}  // namespace spire::cpu
