// Tests for the AVX512-BF16 GEMM (kernels/cpu/gemm_bf16.h) against a double-precision loop
// over the same bf16 values: transposes, shapes with edge tiles, odd k, k beyond one packed
// block, m and n beyond one block, a padded C, and a thread pool (which must not change a
// single bit). Skipped, saying so, on CPUs without AVX512-BF16. The AMX tile kernel passes
// the same checks where the CPU and OS run AMX.
#include "kernels/cpu/gemm_bf16.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/functors.h"

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

// The exact (double) C(i, j) of op(A) op(B) from the operands' values x (A) and y (B), stored
// row-major with strides lda / ldb; *mag gets the sum of the products' magnitudes.
double exact_product(const std::vector<double>& x, const std::vector<double>& y, bool ta, bool tb,
                     int64_t lda, int64_t ldb, int64_t i, int64_t j, int64_t k, double* mag) {
  double exact = 0;
  *mag = 0;
  for (int64_t p = 0; p < k; ++p) {
    const double u = ta ? x[static_cast<size_t>(p * lda + i)] : x[static_cast<size_t>(i * lda + p)];
    const double v = tb ? y[static_cast<size_t>(j * ldb + p)] : y[static_cast<size_t>(p * ldb + j)];
    exact += u * v;
    *mag += std::abs(u * v);
  }
  return exact;
}

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
      // The VDPBF16PS kernel itself (gemm_bf16 picks AMX tiles where the CPU has them).
      detail::gemm_bf16_with(Bf16Kernel::kAvx512Bf16, ta, tb, d.m, d.n, d.k, a.data(), lda,
                             b.data(), ldb, c.data(), ldc, nullptr);
      detail::gemm_bf16_with(Bf16Kernel::kAvx512Bf16, ta, tb, d.m, d.n, d.k, a.data(), lda,
                             b.data(), ldb, cp.data(), ldc, &pool);
      const std::string what = std::to_string(d.m) + "x" + std::to_string(d.n) + "x" +
                               std::to_string(d.k) + " transpose " + std::to_string(t);
      for (int64_t i = 0; i < d.m; ++i)
        for (int64_t j = 0; j < d.n; ++j) {
          double mag;
          const double exact = exact_product(av, bv, ta, tb, lda, ldb, i, j, d.k, &mag);
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

// The AMX tile kernel on every shape and transpose, both operand types (bf16 patterns; f32
// values rounded while packed, with and without rounding the result): within a few f32
// epsilons of the exact product of the bf16 values (AMX adds a tile's products in its own
// order, so its bits differ from the VDPBF16PS kernel's), the same bits for any thread
// count, nothing written past n.
TEST(GemmBf16, AmxTilesMatchTheExactProductForAnyThreadCount) {
  if (!gemm_bf16_amx_supported())
    GTEST_SKIP() << "this CPU or OS runs no AMX tiles (or SPIRE_CPU_AMX=0)";
  ThreadPool pool(3);
  const Dims shapes[] = {{1, 1, 1},     {7, 13, 5},     {33, 31, 33},  {37, 19, 70},
                         {300, 3, 257}, {5, 700, 513},  {130, 600, 9}, {96, 96, 600},
                         {400, 70, 100}, {5, 720, 600}, {64, 64, 32}, {129, 65, 1000},
                         {20, 520, 0}};  // k set below: more than fits in L2
  // Several k blocks with op(A) = A too (detail::amx_k_block; sized by this CPU's L2), an odd
  // k, columns split unevenly across threads.
  const int64_t deep = 2 * detail::amx_k_block(false, 520, int64_t{1} << 20) + 33;
  ASSERT_LT(detail::amx_k_block(false, 520, deep), deep);
  ASSERT_EQ(detail::amx_k_block(true, 520, deep), 512);
  for (Dims d : shapes)
    for (int t = 0; t < 4; ++t) {
      if (d.k == 0) d.k = deep;
      const bool ta = (t & 1) != 0, tb = (t & 2) != 0;
      std::mt19937 rng(static_cast<uint32_t>(d.m * 1000 + d.n * 10 + d.k + t));
      std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
      std::vector<uint16_t> a(static_cast<size_t>(d.m * d.k)), b(static_cast<size_t>(d.k * d.n));
      std::vector<float> af(a.size()), bf(b.size());
      std::vector<double> av(a.size()), bv(b.size()), afv(a.size()), bfv(b.size());
      // The f32 operands' values as the kernel rounds them to bf16.
      auto rounded = [](float f) {
        const uint32_t bits = static_cast<uint32_t>(functors::float_to_bf16_bits(f)) << 16;
        float v;
        std::memcpy(&v, &bits, sizeof v);
        return static_cast<double>(v);
      };
      for (size_t i = 0; i < a.size(); ++i) a[i] = random_bf16(rng, &av[i]), af[i] = dist(rng);
      for (size_t i = 0; i < b.size(); ++i) b[i] = random_bf16(rng, &bv[i]), bf[i] = dist(rng);
      for (size_t i = 0; i < a.size(); ++i) afv[i] = rounded(af[i]);
      for (size_t i = 0; i < b.size(); ++i) bfv[i] = rounded(bf[i]);
      const int64_t lda = ta ? d.m : d.k, ldb = tb ? d.k : d.n, ldc = d.n + 5;
      for (int variant = 0; variant < 3; ++variant) {
        const std::string what = std::to_string(d.m) + "x" + std::to_string(d.n) + "x" +
                                 std::to_string(d.k) + " transpose " + std::to_string(t) +
                                 " variant " + std::to_string(variant);
        std::vector<float> c(static_cast<size_t>(d.m * ldc), NAN), cp = c;
        for (ThreadPool* tp : {static_cast<ThreadPool*>(nullptr), &pool}) {
          float* out = (tp ? cp : c).data();
          if (variant == 0)
            detail::gemm_bf16_with(Bf16Kernel::kAmx, ta, tb, d.m, d.n, d.k, a.data(), lda,
                                   b.data(), ldb, out, ldc, tp);
          else
            detail::gemm_bf16_with(Bf16Kernel::kAmx, ta, tb, d.m, d.n, d.k, af.data(), lda,
                                   bf.data(), ldb, out, ldc, tp, /*round_output=*/variant == 2);
        }
        const std::vector<double>& x = variant == 0 ? av : afv;
        const std::vector<double>& y = variant == 0 ? bv : bfv;
        for (int64_t i = 0; i < d.m; ++i)
          for (int64_t j = 0; j < d.n; ++j) {
            double mag;
            const double exact = exact_product(x, y, ta, tb, lda, ldb, i, j, d.k, &mag);
            const size_t at = static_cast<size_t>(i * ldc + j);
            // Rounding the result to bf16 adds up to half an ulp of 8 bits.
            const double tol = 1e-6 * mag + (variant == 2 ? std::abs(exact) / 256 : 0) + 1e-30;
            ASSERT_NEAR(c[at], exact, tol) << what << " (" << i << ", " << j << ")";
            if (variant == 2) {
              uint32_t bits;
              std::memcpy(&bits, &c[at], sizeof bits);
              ASSERT_EQ(bits & 0xffffu, 0u) << what << ": not rounded to bf16";
            }
            ASSERT_EQ(std::memcmp(&c[at], &cp[at], sizeof(float)), 0)
                << what << ": depends on threads";
          }
        for (int64_t i = 0; i < d.m; ++i)
          for (int64_t j = d.n; j < ldc; ++j)
            ASSERT_TRUE(std::isnan(c[static_cast<size_t>(i * ldc + j)]) &&
                        std::isnan(cp[static_cast<size_t>(i * ldc + j)]))
                << what << ": wrote past n";
      }
    }
}

// A C of detail::kBf16StreamBytes or more gets its final values by non-temporal stores
// (whole 32-column blocks on 64-byte boundaries; the rest as usual): the same bits as the
// product computed in row pieces small enough to be stored as usual. Products split along n
// and along m, k beyond one packed block (the streamed pass adds to C), a partial last block
// of rows and of columns, row strides that stream (1056) and that do not (n), results
// rounded or not, threads; nothing written outside C.
TEST(GemmBf16, AmxLargeOutputsStoredPastTheCacheGiveTheSameBits) {
  if (!gemm_bf16_amx_supported())
    GTEST_SKIP() << "this CPU or OS runs no AMX tiles (or SPIRE_CPU_AMX=0)";
  // k past one L2-sized block (for these n) whatever this CPU's L2.
  const int64_t k = detail::amx_k_block(false, 1050, int64_t{1} << 20) + 120, piece = 64;
  ThreadPool pool(3);
  for (const Dims d : {Dims{1030, 1050, k}, Dims{2100, 520, k}}) {
    ASSERT_LT(detail::amx_k_block(false, d.n, k), k) << "k within one block: nothing added";
    ASSERT_GE(d.m * d.n * int64_t{sizeof(float)}, detail::kBf16StreamBytes);
    ASSERT_LT(piece * d.n * int64_t{sizeof(float)}, detail::kBf16StreamBytes);
    std::mt19937 rng(static_cast<uint32_t>(d.m + d.n));
    std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
    std::vector<float> a(static_cast<size_t>(d.m * k)), b(static_cast<size_t>(k * d.n));
    for (float& v : a) v = dist(rng);
    for (float& v : b) v = dist(rng);
    std::vector<uint16_t> ah(a.size()), bh(b.size());
    for (size_t i = 0; i < a.size(); ++i) ah[i] = functors::float_to_bf16_bits(a[i]);
    for (size_t i = 0; i < b.size(); ++i) bh[i] = functors::float_to_bf16_bits(b[i]);
    // C on a 64-byte boundary (as the allocator places tensors), rows n or 1056 floats apart,
    // inside a buffer with NaN slack on both sides.
    for (const int64_t ldc : {d.n, int64_t{1056}}) {
      const size_t size = static_cast<size_t>(d.m * ldc) + 64;
      std::vector<float> whole_buf(size), pieces_buf(size);
      auto aligned = [](std::vector<float>& v) {
        const uintptr_t at = reinterpret_cast<uintptr_t>(v.data()) + 16 * sizeof(float);
        return static_cast<size_t>(16 + (64 - at % 64) % 64 / sizeof(float));
      };
      const size_t w0 = aligned(whole_buf), p0 = aligned(pieces_buf);
      for (int variant = 0; variant < 3; ++variant)
        for (ThreadPool* tp : {static_cast<ThreadPool*>(nullptr), &pool}) {
          std::fill(whole_buf.begin(), whole_buf.end(), NAN);
          std::fill(pieces_buf.begin(), pieces_buf.end(), NAN);
          auto run = [&](int64_t i0, int64_t rows, float* c) {
            if (variant == 0)
              detail::gemm_bf16_with(Bf16Kernel::kAmx, false, false, rows, d.n, k,
                                     ah.data() + i0 * k, k, bh.data(), d.n, c + i0 * ldc, ldc, tp);
            else
              detail::gemm_bf16_with(Bf16Kernel::kAmx, false, false, rows, d.n, k,
                                     a.data() + i0 * k, k, b.data(), d.n, c + i0 * ldc, ldc, tp,
                                     /*round_output=*/variant == 2);
          };
          run(0, d.m, whole_buf.data() + w0);
          for (int64_t i0 = 0; i0 < d.m; i0 += piece)
            run(i0, std::min(piece, d.m - i0), pieces_buf.data() + p0);
          const std::string what = std::to_string(d.m) + "x" + std::to_string(d.n) + " ldc " +
                                   std::to_string(ldc) + " variant " + std::to_string(variant) +
                                   (tp ? " threaded" : "");
          for (size_t e = 0; e < size; ++e) {
            const bool in_c = e >= w0 && e < w0 + static_cast<size_t>(d.m * ldc) &&
                              static_cast<int64_t>(e - w0) % ldc < d.n;
            if (!in_c) {
              ASSERT_TRUE(std::isnan(whole_buf[e])) << what << ": wrote outside C at " << e;
              continue;
            }
            const float* p = &pieces_buf[e - w0 + p0];
            ASSERT_EQ(std::memcmp(&whole_buf[e], p, sizeof(float)), 0)
                << what << " element " << e - w0 << ": " << whole_buf[e] << " whole, " << *p
                << " in pieces";
          }
        }
    }
  }
}

// f32 operands rounded while packed give the bits of the same product of their bf16 patterns
// (kernels/functors.h's float_to_bf16_bits), specials included: ties, the largest finite f32
// (rounds to +inf), infinities, NaN, a denormal. Both kernels, every transpose, sizes that
// reach the vectorized packs (whole vector blocks of rows and panels) and their tails.
TEST(GemmBf16, F32OperandsGiveTheBitsOfTheirBf16Patterns) {
  if (!gemm_bf16_supported())
    GTEST_SKIP() << "this CPU has no AVX512-BF16: the MatMul widens to f32";
  const float specials[] = {1.00390625f, 1.01171875f, -1.00390625f, 3.4028235e38f, INFINITY,
                            -INFINITY,   NAN,         1e-40f,       0.0f,          -0.0f};
  // 40 rows and 70 columns: whole vector blocks of rows and panels of both kernels, and tails.
  const int64_t m = 40, n = 70, k = 70;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  // op(A) (i, p) = a[i * k + p], op(B) (p, j) = b[p * n + j].
  std::vector<float> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(k * n));
  for (float& v : a) v = dist(rng);
  for (float& v : b) v = dist(rng);
  // Specials in a few rows of A and columns of B only, so most of C stays finite.
  for (int64_t p = 0; p < k; ++p) a[static_cast<size_t>(2 * k + p)] = specials[p % 10];
  for (int64_t p = 0; p < k; ++p) b[static_cast<size_t>(p * n + 5)] = specials[(p + 3) % 10];
  for (int64_t i = 0; i < m; ++i) a[static_cast<size_t>(i * k + 17)] = specials[i % 10];
  // Ties alone in a row of A and a column of B, so that their rounding shows in finite sums.
  const float ties[] = {1.00390625f, 1.01171875f, -1.01171875f};
  for (int64_t p = 0; p < k; ++p) a[static_cast<size_t>(3 * k + p)] = ties[p % 3];
  for (int64_t p = 0; p < k; ++p) b[static_cast<size_t>(p * n + 6)] = ties[(p + 1) % 3];
  std::vector<Bf16Kernel> kernels = {Bf16Kernel::kAvx512Bf16};
  if (gemm_bf16_amx_supported()) kernels.push_back(Bf16Kernel::kAmx);
  for (int t = 0; t < 4; ++t) {
    const bool ta = (t & 1) != 0, tb = (t & 2) != 0;
    // The stored operands (transposed where the flag says) as f32 and as bf16 patterns.
    std::vector<float> af(a.size()), bf(b.size());
    for (int64_t i = 0; i < m; ++i)
      for (int64_t p = 0; p < k; ++p)
        af[static_cast<size_t>(ta ? p * m + i : i * k + p)] = a[static_cast<size_t>(i * k + p)];
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = 0; j < n; ++j)
        bf[static_cast<size_t>(tb ? j * k + p : p * n + j)] = b[static_cast<size_t>(p * n + j)];
    std::vector<uint16_t> ah(af.size()), bh(bf.size());
    for (size_t i = 0; i < af.size(); ++i) ah[i] = functors::float_to_bf16_bits(af[i]);
    for (size_t i = 0; i < bf.size(); ++i) bh[i] = functors::float_to_bf16_bits(bf[i]);
    const int64_t lda = ta ? m : k, ldb = tb ? k : n;
    for (Bf16Kernel kernel : kernels) {
      std::vector<float> from_f32(static_cast<size_t>(m * n)), from_bits(from_f32.size());
      detail::gemm_bf16_with(kernel, ta, tb, m, n, k, af.data(), lda, bf.data(), ldb,
                             from_f32.data(), n, nullptr, false);
      detail::gemm_bf16_with(kernel, ta, tb, m, n, k, ah.data(), lda, bh.data(), ldb,
                             from_bits.data(), n, nullptr);
      for (size_t i = 0; i < from_f32.size(); ++i)
        ASSERT_EQ(std::memcmp(&from_f32[i], &from_bits[i], sizeof(float)), 0)
            << "kernel " << static_cast<int>(kernel) << " transposes " << t << " element " << i
            << ": " << from_f32[i] << " from f32, " << from_bits[i] << " from the bf16 patterns";
    }
  }
}

}  // namespace
}  // namespace spire::cpu
