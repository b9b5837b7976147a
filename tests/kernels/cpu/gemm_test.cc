// Tests for spire::cpu::gemm: every instruction-set variant this CPU supports is checked against a
// naive double-precision triple loop over transposes, shapes (including empty and edge-tile
// sizes), alpha/beta values and padded leading dimensions.
#include "kernels/cpu/gemm.h"

#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace spire::cpu {
namespace {

using detail::GemmIsa;

struct Dims {
  int64_t m, n, k;
};

// Includes empty products, matrix-vector products (m or n == 1, which take a GEMV path), thin
// shapes (few columns: narrow tiles or the transposed problem), exact tiles and ragged edges.
const Dims kShapes[] = {
    {0, 0, 0},     {0, 5, 3},       {4, 0, 3},      {3, 4, 0},      {1, 1, 1},
    {1, 17, 9},    {19, 1, 9},      {1, 300, 257},  {261, 1, 300},  {7, 13, 5},
    {6, 64, 128},  {33, 65, 17},    {31, 37, 41},   {128, 96, 200}, {257, 129, 300},
    {13, 300, 600}, {600, 40, 7},   {300, 3, 70},
};

std::string isa_name(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::kAvx512:
      return "avx512";
    case GemmIsa::kAvx2:
      return "avx2";
    default:
      return "generic";
  }
}

/// The variants runnable here (the generic one always is).
std::vector<GemmIsa> supported_isas() {
  std::vector<GemmIsa> isas;
  for (GemmIsa isa : {GemmIsa::kGeneric, GemmIsa::kAvx2, GemmIsa::kAvx512})
    if (detail::gemm_isa_supported(isa)) isas.push_back(isa);
  return isas;
}

template <class T>
std::vector<T> random_values(size_t count, std::mt19937& rng) {
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<T> v(count);
  for (T& x : v) x = static_cast<T>(dist(rng));
  return v;
}

/// One gemm problem with stored operands, checked against a double-precision reference.
template <class T>
struct Case {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  T alpha = 1, beta = 0;
  int64_t pad = 0;  // extra elements in every leading dimension
  std::optional<detail::GemmDepth> depth;  // f32 only: forced, else gemm_best_depth()

  void run(GemmIsa isa, uint32_t seed) const {
    SCOPED_TRACE(testing::Message()
                 << isa_name(isa) << " ta=" << trans_a << " tb=" << trans_b << " m=" << m
                 << " n=" << n << " k=" << k << " alpha=" << alpha << " beta=" << beta
                 << " pad=" << pad);
    std::mt19937 rng(seed);
    // Stored shapes: A is m x k (k x m when transposed), B is k x n (n x k when transposed).
    const int64_t a_rows = trans_a ? k : m, a_cols = trans_a ? m : k;
    const int64_t b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;
    const int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = n + pad;
    const auto a = random_values<T>(static_cast<size_t>(a_rows * lda), rng);
    const auto b = random_values<T>(static_cast<size_t>(b_rows * ldb), rng);
    // C gets kGuardRows rows past its m (more than any tile's MR): an edge tile that stored a
    // row it does not own would change them.
    constexpr int64_t kGuardRows = 24;
    auto c = random_values<T>(static_cast<size_t>((m + kGuardRows) * ldc), rng);
    if (beta == T(0)) {
      // beta == 0 must overwrite C without reading it: NaN poison must not leak.
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = std::numeric_limits<T>::quiet_NaN();
    }
    const auto c_in = c;

    auto op_a = [&](int64_t i, int64_t p) { return double(trans_a ? a[p * lda + i] : a[i * lda + p]); };
    auto op_b = [&](int64_t p, int64_t j) { return double(trans_b ? b[j * ldb + p] : b[p * ldb + j]); };

    if constexpr (std::is_same_v<T, float>) {
      detail::gemm_with_isa(isa, trans_a, trans_b, m, n, k, alpha, a.data(), lda, b.data(), ldb,
                            beta, c.data(), ldc, depth.value_or(detail::gemm_best_depth()));
    } else {
      detail::gemm_with_isa(isa, trans_a, trans_b, m, n, k, alpha, a.data(), lda, b.data(), ldb,
                            beta, c.data(), ldc);
    }

    const double rel_tol = std::is_same_v<T, float> ? 1e-4 * std::sqrt(double(std::max<int64_t>(k, 1)))
                                                    : 1e-12;
    int failures = 0;
    for (int64_t i = m; i < m + kGuardRows && ldc > 0; ++i)  // ldc == 0: C holds nothing
      ASSERT_EQ(std::memcmp(&c[static_cast<size_t>(i * ldc)], &c_in[static_cast<size_t>(i * ldc)],
                            static_cast<size_t>(ldc) * sizeof(T)),
                0)
          << "row " << i << " past C's " << m << " rows written";
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < ldc; ++j) {
        const size_t idx = static_cast<size_t>(i * ldc + j);
        if (j >= n) {
          // Padding between rows must be left untouched.
          ASSERT_EQ(std::memcmp(&c[idx], &c_in[idx], sizeof(T)), 0) << "padding written at " << i << "," << j;
          continue;
        }
        double dot = 0, mag = 0;  // mag: sum of |terms|, the scale of the rounding error
        for (int64_t p = 0; p < k; ++p) {
          dot += op_a(i, p) * op_b(p, j);
          mag += std::abs(op_a(i, p) * op_b(p, j));
        }
        double expected = double(alpha) * dot;
        double scale = std::abs(double(alpha)) * mag;
        if (beta != T(0)) {
          expected += double(beta) * double(c_in[idx]);
          scale += std::abs(double(beta) * double(c_in[idx]));
        }
        const double got = double(c[idx]);
        if (!(std::abs(got - expected) <= rel_tol * std::max(scale, 1.0)) && ++failures <= 5)
          ADD_FAILURE() << "C(" << i << "," << j << ") = " << got << ", expected " << expected;
      }
    }
    EXPECT_EQ(failures, 0);
  }
};

template <class T>
class GemmTest : public testing::Test {};
using Types = testing::Types<float, double>;
TYPED_TEST_SUITE(GemmTest, Types);

TYPED_TEST(GemmTest, ShapesTransposesAndScalars) {
  using T = TypeParam;
  struct Scalars {
    T alpha, beta;
  };
  const Scalars scalars[] = {{1, 0}, {1, 1}, {T(-1.5), T(0.5)}};
  uint32_t seed = 1;
  for (GemmIsa isa : supported_isas())
    for (const Dims& d : kShapes)
      for (int t = 0; t < 4; ++t)
        for (const Scalars& s : scalars) {
          Case<T> c;
          c.trans_a = t & 1;
          c.trans_b = t & 2;
          c.m = d.m, c.n = d.n, c.k = d.k;
          c.alpha = s.alpha, c.beta = s.beta;
          c.run(isa, seed++);
        }
}

TYPED_TEST(GemmTest, PaddedLeadingDimensions) {
  using T = TypeParam;
  uint32_t seed = 100;
  for (GemmIsa isa : supported_isas())
    for (const Dims& d : {Dims{7, 13, 5}, Dims{33, 65, 17}, Dims{70, 50, 300}, Dims{70, 1, 300},
                          Dims{1, 70, 300}, Dims{200, 5, 30}})
      for (int t = 0; t < 4; ++t)
        for (T beta : {T(0), T(0.5)}) {
          Case<T> c;
          c.trans_a = t & 1;
          c.trans_b = t & 2;
          c.m = d.m, c.n = d.n, c.k = d.k;
          c.alpha = T(0.75), c.beta = beta;
          c.pad = 9;
          c.run(isa, seed++);
        }
}

// Sizes spanning several cache blocks in every dimension (m, n beyond MC; k beyond KC).
TYPED_TEST(GemmTest, Large) {
  using T = TypeParam;
  uint32_t seed = 200;
  for (GemmIsa isa : supported_isas())
    for (int t = 0; t < 4; ++t) {
      // All transposes on the dispatched variant, one per other variant (keeps the test fast).
      if (isa != detail::gemm_best_isa() && t != 0) continue;
      Case<T> c;
      c.trans_a = t & 1;
      c.trans_b = t & 2;
      c.m = 512, c.n = 512, c.k = 512;
      c.beta = t == 3 ? T(1) : T(0);
      c.run(isa, seed++);
    }
  // Ragged cases with edge tiles on top of several blocks along m and k, then along n; thin
  // products (few columns: narrow tiles, or the transposed problem) across several blocks.
  for (const Dims& d :
       {Dims{523, 130, 531}, Dims{61, 4133, 300}, Dims{1000, 16, 300}, Dims{2000, 5, 300}}) {
    Case<T> c;
    c.m = d.m, c.n = d.n, c.k = d.k;
    c.beta = T(0.5), c.pad = 3;
    c.run(detail::gemm_best_isa(), seed++);
  }
}

// k == 0 scales C by beta (zeros when beta == 0, never reading C); alpha == 0 likewise.
TYPED_TEST(GemmTest, EmptyProductScalesC) {
  using T = TypeParam;
  const T nan = std::numeric_limits<T>::quiet_NaN();
  for (T alpha : {T(1), T(0)}) {
    const int64_t k = alpha == T(0) ? 4 : 0;
    const std::vector<T> a(3 * 4, nan), b(4 * 2, nan);  // never read, or multiplied by zero
    std::vector<T> c = {1, 2, 3, 4, 5, 6};
    gemm(false, false, 3, 2, k, alpha, a.data(), 4, b.data(), 2, T(2), c.data(), 2);
    EXPECT_EQ(c, (std::vector<T>{2, 4, 6, 8, 10, 12}));
    std::vector<T> poisoned(6, nan);
    gemm(false, false, 3, 2, k, alpha, a.data(), 4, b.data(), 2, T(0), poisoned.data(), 2);
    EXPECT_EQ(poisoned, std::vector<T>(6, T(0)));
  }
}

// Small exact case for readability: [1 2; 3 4] * [5 6; 7 8] = [19 22; 43 50].
TYPED_TEST(GemmTest, TwoByTwo) {
  using T = TypeParam;
  const std::vector<T> a = {1, 2, 3, 4}, b = {5, 6, 7, 8};
  std::vector<T> c(4);
  gemm(false, false, 2, 2, 2, T(1), a.data(), 2, b.data(), 2, T(0), c.data(), 2);
  EXPECT_EQ(c, (std::vector<T>{19, 22, 43, 50}));
  gemm(true, true, 2, 2, 2, T(1), a.data(), 2, b.data(), 2, T(0), c.data(), 2);  // A^T B^T
  EXPECT_EQ(c, (std::vector<T>{23, 31, 34, 46}));
}

// The AVX-512 f32 tiles at both depths of their packed blocks (KC 128 and 384), whichever
// this CPU's gemm() takes: k within one block, across several, ragged; every transpose; shapes
// that take the 6 x 4 tile (61 x 700, 200 x 640), the 12 x 2 (128 x 96, 257 x 129, 300 x 200,
// 523 x 130) and the 24 x 1 (300 x 16).
TEST(GemmDepth, BothDepthsOfTheAvx512TilesMatchTheReference) {
  if (!detail::gemm_isa_supported(GemmIsa::kAvx512)) GTEST_SKIP() << "this CPU has no AVX-512";
  uint32_t seed = 300;
  for (detail::GemmDepth depth : {detail::GemmDepth::kShallow, detail::GemmDepth::kDeep})
    for (const Dims& d : {Dims{128, 96, 200}, Dims{257, 129, 300}, Dims{300, 200, 800},
                          Dims{523, 130, 1000}, Dims{61, 700, 384}, Dims{200, 640, 1000},
                          Dims{300, 16, 800}})
      for (int t = 0; t < 4; ++t) {
        Case<float> c;
        c.trans_a = t & 1;
        c.trans_b = t & 2;
        c.m = d.m, c.n = d.n, c.k = d.k;
        c.beta = t == 3 ? 0.5f : 0.0f;
        c.pad = t == 1 ? 3 : 0;
        c.depth = depth;
        c.run(GemmIsa::kAvx512, seed++);
      }
}

// At either depth (whichever this CPU's gemm() takes), the product split over threads gives
// the bits of the unsplit one: splits along m and along n, remainders of a single row or
// column, every transpose, k over several blocks of both depths.
TEST(GemmDepth, BothDepthsGiveTheSameBitsOnAnyThreadCount) {
  if (!detail::gemm_isa_supported(GemmIsa::kAvx512)) GTEST_SKIP() << "this CPU has no AVX-512";
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> u(-1, 1);
  ThreadPool pool(3);
  for (detail::GemmDepth depth : {detail::GemmDepth::kShallow, detail::GemmDepth::kDeep})
    for (const Dims& d : {Dims{513, 70, 800}, Dims{70, 1000, 800}, Dims{64, 65, 900},
                          Dims{97, 40, 600}})
      for (int t = 0; t < 4; ++t) {
        const bool ta = t & 1, tb = t & 2;
        std::vector<float> a(static_cast<size_t>(d.m * d.k)), b(static_cast<size_t>(d.k * d.n));
        for (float& v : a) v = u(rng);
        for (float& v : b) v = u(rng);
        std::vector<float> one(static_cast<size_t>(d.m * d.n), 0.25f), three = one;
        const int64_t lda = ta ? d.m : d.k, ldb = tb ? d.k : d.n;
        for (ThreadPool* tp : {static_cast<ThreadPool*>(nullptr), &pool})
          detail::gemm_with_isa(GemmIsa::kAvx512, ta, tb, d.m, d.n, d.k, 1.0f, a.data(), lda,
                                b.data(), ldb, 0.5f, (tp ? three : one).data(), d.n, depth, tp);
        ASSERT_EQ(std::memcmp(one.data(), three.data(), one.size() * sizeof(float)), 0)
            << d.m << "x" << d.n << "x" << d.k << " transposes " << t << " depth "
            << static_cast<int>(depth);
      }
}

TEST(GemmDispatch, BestIsaIsSupported) {
  EXPECT_TRUE(detail::gemm_isa_supported(detail::gemm_best_isa()));
  EXPECT_TRUE(detail::gemm_isa_supported(GemmIsa::kGeneric));
}

// The epilogue (GemmEpilogue) hears of every element of C exactly once, after its value is
// final, for threaded splits along either dimension, transposed problems, matrix-vector
// products and k = 0.
TEST(GemmEpilogue, SeesEveryBlockOnceWhenItIsFinal) {
  struct Case {
    int64_t m, n, k;
    bool ta, tb;
  };
  const Case cases[] = {{300, 70, 64, false, false}, {37, 500, 33, true, false}, {129, 65, 300, false, true},
                        {5, 3, 7, true, true},       {1, 40, 16, false, false},  {40, 1, 16, false, true},
                        {6, 9, 0, false, false},     {2000, 33, 40, false, false}, {64, 2048, 32, false, false},
                        {8, 4200, 16, false, true}};
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int threads : {1, 3})
    for (const Case& c : cases) {
      ThreadPool pool(threads);
      std::vector<float> a(static_cast<size_t>(c.m * c.k)), b(static_cast<size_t>(c.k * c.n));
      for (float& v : a) v = u(rng);
      for (float& v : b) v = u(rng);
      const int64_t lda = c.ta ? c.m : c.k, ldb = c.tb ? c.k : c.n;
      std::vector<float> want(static_cast<size_t>(c.m * c.n), 0.0f), got(want.size(), 0.0f);
      gemm(c.ta, c.tb, c.m, c.n, c.k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, want.data(), c.n, &pool);
      std::vector<int> seen(want.size(), 0);
      std::mutex mu;
      int wrong = 0;
      GemmEpilogue epilogue = [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
        std::lock_guard<std::mutex> lock(mu);
        ASSERT_TRUE(0 <= i0 && i0 < i1 && i1 <= c.m && 0 <= j0 && j0 < j1 && j1 <= c.n);
        for (int64_t i = i0; i < i1; ++i)
          for (int64_t j = j0; j < j1; ++j) {
            const size_t e = static_cast<size_t>(i * c.n + j);
            ++seen[e];
            wrong += std::memcmp(&got[e], &want[e], sizeof(float)) != 0;
            got[e] *= 2.0f;  // an epilogue that rewrites C: later GEMM work must not undo it
          }
      };
      gemm(c.ta, c.tb, c.m, c.n, c.k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, got.data(), c.n, &pool,
           epilogue);
      const std::string where = std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) +
                                ", " + std::to_string(threads) + " threads";
      EXPECT_EQ(wrong, 0) << where << ": a block was not final when the epilogue saw it";
      EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), static_cast<long>(seen.size())) << where;
      for (size_t e = 0; e < want.size(); ++e) ASSERT_EQ(got[e], want[e] * 2.0f) << where;
    }
}

}  // namespace
}  // namespace spire::cpu
