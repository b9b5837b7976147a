// Implementation of kernels/cpu/gemm_bf16.h.
//
//   for jc in [0, n) step NC:        pack op(B)[pc:+KC, jc:+NC] as NR-wide panels of k pairs
//     for pc in [0, k) step KC:
//       for ic in [0, m) step MC:    pack op(A)[ic:+MC, pc:+KC] as MR-tall panels of k pairs
//         for each MR x NR tile:     C tile (+)= A~ B~ (MR x NV accumulators, VDPBF16PS)
//
// Packed layouts (q = k pair, zero-padded past k and past the panel's rows / columns):
//   B~ panel: for each q, NR columns of (B[2q, j], B[2q+1, j]): NV vectors of 16 pairs.
//   A~ panel: for each q, MR rows of (A[i, 2q], A[i, 2q+1]): one 32-bit word broadcast per row.
#include "kernels/cpu/gemm_bf16.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu/scratch_buffer.h"
#include "kernels/functors.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define SPIRE_BF16_X86 1
// Packing runs only where the kernel does (AVX-512 CPUs): vectorized for AVX-512 too.
#define SPIRE_BF16_PACK_TARGET __attribute__((target("avx512f,avx512bw,avx512vl")))
#define SPIRE_BF16_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma")))
#else
#define SPIRE_BF16_X86 0
#define SPIRE_BF16_PACK_TARGET
#endif

namespace spire::cpu {
namespace {

constexpr int kMR = 6;             // rows of a C tile
constexpr int kNV = 4;             // 16-column vectors per row of a C tile
constexpr int kNR = 16 * kNV;      // columns of a C tile
constexpr int64_t kKC = 256;       // k per packed block (even)
constexpr int64_t kMC = 20 * kMR;  // rows of op(A) per packed block
constexpr int64_t kNC = 8 * kNR;   // columns of op(B) per packed block

// Per-thread scratch for the packed blocks (kernels/cpu/scratch_buffer.h).
thread_local ScratchBuffer tl_bf16_a;
thread_local ScratchBuffer tl_bf16_b;

/// The bf16 bits of an operand element: as stored, or an f32 rounded to nearest even (as
/// the Cast op rounds).
inline uint16_t bf16_bits(uint16_t h) { return h; }
inline uint16_t bf16_bits(float f) { return functors::float_to_bf16_bits(f); }

/// Element (i, p) of a strided matrix of bf16 bits or f32 values: src[i * s_i + p * s_p].
template <class Src>
struct Strided {
  const Src* p;
  int64_t s_i, s_p;
  uint16_t at(int64_t i, int64_t q) const { return bf16_bits(p[i * s_i + q * s_p]); }
};

/// Packs rows [0, rows) x k [0, kc) of `src` as panels of R rows: for each k pair q, R pairs
/// (row-major within the panel), zero-padded. Two layouts of the source copy whole runs:
/// k contiguous (each pair is one 32-bit word of the source) and rows contiguous (each pair
/// interleaves two source rows, a loop the compiler vectorizes); others go element by element.
template <int R, class Src>
SPIRE_BF16_PACK_TARGET void pack_pairs(const Strided<Src>& src, int64_t rows, int64_t kc,
                                       uint16_t* dst) {
  const int64_t pairs = (kc + 1) / 2, full = kc / 2;  // full: pairs with both k in range
  for (int64_t r0 = 0; r0 < rows; r0 += R) {
    const int64_t r = std::min<int64_t>(R, rows - r0);
    uint16_t* panel = dst + r0 * pairs * 2;
    int64_t q = 0;
    if (r == R && src.s_p == 1) {
      for (; q < full; ++q) {
        uint16_t* __restrict d = panel + q * R * 2;
        for (int64_t i = 0; i < R; ++i) {
          const Src* s = src.p + (r0 + i) * src.s_i + 2 * q;
          if constexpr (std::is_same_v<Src, uint16_t>) {
            std::memcpy(d + 2 * i, s, 2 * sizeof(uint16_t));
          } else {
            d[2 * i] = bf16_bits(s[0]);
            d[2 * i + 1] = bf16_bits(s[1]);
          }
        }
      }
    } else if (r == R && src.s_i == 1) {
      for (; q < full; ++q) {
        uint16_t* __restrict d = panel + q * R * 2;
        const Src* __restrict row0 = src.p + r0 + 2 * q * src.s_p;
        const Src* __restrict row1 = row0 + src.s_p;
        for (int64_t i = 0; i < R; ++i) {
          d[2 * i] = bf16_bits(row0[i]);
          d[2 * i + 1] = bf16_bits(row1[i]);
        }
      }
    }
    for (; q < pairs; ++q) {
      uint16_t* d = panel + q * R * 2;
      const int64_t p0 = 2 * q;
      const bool second = p0 + 1 < kc;
      for (int64_t i = 0; i < r; ++i) {
        d[2 * i] = src.at(r0 + i, p0);
        d[2 * i + 1] = second ? src.at(r0 + i, p0 + 1) : uint16_t{0};
      }
      for (int64_t i = r; i < R; ++i) d[2 * i] = d[2 * i + 1] = 0;
    }
  }
}

#if SPIRE_BF16_X86
/// r rounded to bf16 precision (nearest even; a NaN made quiet), as f32: exactly
/// bf16_bits_to_float(float_to_bf16_bits(r)) of kernels/functors.h, per lane.
SPIRE_BF16_TARGET inline __m512 round_to_bf16(__m512 r) {
  const __m512i x = _mm512_castps_si512(r);
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  const __m512i rounded =
      _mm512_and_si512(_mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), lsb), high);
  const __m512i quiet = _mm512_and_si512(_mm512_or_si512(x, _mm512_set1_epi32(0x00400000)), high);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(
      _mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  return _mm512_castsi512_ps(_mm512_mask_blend_epi32(nan, rounded, quiet));
}

/// tile (MR x NR, row stride ldt) = or += A~ panel x B~ panel over `pairs` k pairs; with
/// `round`, the stored values are rounded to bf16 precision (the last k block of a product
/// whose result is rounded).
SPIRE_BF16_TARGET __attribute__((noinline)) void micro_kernel(int64_t pairs, const uint16_t* a,
                                                              const uint16_t* b, float* tile,
                                                              int64_t ldt, bool accumulate,
                                                              bool round) {
  __m512 acc[kMR][kNV];
#pragma GCC unroll 8
  for (int i = 0; i < kMR; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < kNV; ++v) acc[i][v] = _mm512_setzero_ps();
  for (int64_t q = 0; q < pairs; ++q) {
    __m512bh bv[kNV];
#pragma GCC unroll 8
    for (int v = 0; v < kNV; ++v)
      bv[v] = (__m512bh)_mm512_loadu_si512(static_cast<const void*>(b + (q * kNR + v * 16) * 2));
#pragma GCC unroll 8
    for (int i = 0; i < kMR; ++i) {
      int32_t pair;
      std::memcpy(&pair, a + (q * kMR + i) * 2, sizeof pair);
      const __m512bh av = (__m512bh)_mm512_set1_epi32(pair);
#pragma GCC unroll 8
      for (int v = 0; v < kNV; ++v) acc[i][v] = _mm512_dpbf16_ps(acc[i][v], av, bv[v]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < kMR; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < kNV; ++v) {
      float* out = tile + i * ldt + v * 16;
      const __m512 r = accumulate ? _mm512_add_ps(_mm512_loadu_ps(out), acc[i][v]) : acc[i][v];
      _mm512_storeu_ps(out, round ? round_to_bf16(r) : r);
    }
}

/// The blocked product of rows [0, m) x columns [0, n) (m, n, k >= 1).
template <class Src>
void gemm_blocked(const Strided<Src>& a, const Strided<Src>& b, int64_t m, int64_t n, int64_t k,
                  float* c, int64_t ldc, bool round_output) {
  const int64_t kc_max = std::min(kKC, k), pairs_max = (kc_max + 1) / 2;
  uint16_t* pa = tl_bf16_a.get<uint16_t>((std::min(kMC, m) + kMR) * pairs_max * 2);
  uint16_t* pb = tl_bf16_b.get<uint16_t>((std::min(kNC, n) + kNR) * pairs_max * 2);
  alignas(64) float tile[kMR * kNR];
  for (int64_t jc = 0; jc < n; jc += kNC) {
    const int64_t nc = std::min(kNC, n - jc);
    for (int64_t pc = 0; pc < k; pc += kKC) {
      const int64_t kc = std::min(kKC, k - pc), pairs = (kc + 1) / 2;
      const bool accumulate = pc > 0;
      const bool round = round_output && pc + kc == k;  // the last k block finishes C
      // op(B) block as columns j (rows of the packing) by k.
      pack_pairs<kNR>(Strided<Src>{b.p + jc * b.s_i + pc * b.s_p, b.s_i, b.s_p}, nc, kc, pb);
      for (int64_t ic = 0; ic < m; ic += kMC) {
        const int64_t mc = std::min(kMC, m - ic);
        pack_pairs<kMR>(Strided<Src>{a.p + ic * a.s_i + pc * a.s_p, a.s_i, a.s_p}, mc, kc, pa);
        for (int64_t jr = 0; jr < nc; jr += kNR) {
          const int64_t nr = std::min<int64_t>(kNR, nc - jr);
          const uint16_t* b_panel = pb + jr * pairs * 2;
          for (int64_t ir = 0; ir < mc; ir += kMR) {
            const int64_t mr = std::min<int64_t>(kMR, mc - ir);
            const uint16_t* a_panel = pa + ir * pairs * 2;
            float* ct = c + (ic + ir) * ldc + jc + jr;
            if (mr == kMR && nr == kNR) {
              micro_kernel(pairs, a_panel, b_panel, ct, ldc, accumulate, round);
              continue;
            }
            micro_kernel(pairs, a_panel, b_panel, tile, kNR, false, false);
            for (int64_t i = 0; i < mr; ++i)
              for (int64_t j = 0; j < nr; ++j) {
                const float v = accumulate ? ct[i * ldc + j] + tile[i * kNR + j] : tile[i * kNR + j];
                ct[i * ldc + j] =
                    round ? functors::bf16_bits_to_float(functors::float_to_bf16_bits(v)) : v;
              }
          }
        }
      }
    }
  }
}
#endif

}  // namespace

bool gemm_bf16_supported() {
#if SPIRE_BF16_X86
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                         __builtin_cpu_supports("avx512bf16");
  return ok;
#else
  return false;
#endif
}

namespace {

template <class Src>
void gemm_bf16_impl(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const Src* a,
                    int64_t lda, const Src* b, int64_t ldb, float* c, int64_t ldc,
                    ThreadPool* pool, bool round_output) {
  if (!gemm_bf16_supported()) throw_error("gemm_bf16: this CPU has no AVX512-BF16");
#if SPIRE_BF16_X86
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
    return;
  }
  // op(A) (i, p) and op(B)^T (j, p): rows of the packing by k.
  using S = Strided<Src>;
  const S sa = trans_a ? S{a, 1, lda} : S{a, lda, 1};
  const S sb = trans_b ? S{b, ldb, 1} : S{b, 1, ldb};
  const int threads = pool ? pool->num_threads() : 1;
  const double macs = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  if (threads <= 1 || macs < double(1 << 21)) {
    gemm_blocked(sa, sb, m, n, k, c, ldc, round_output);
    return;
  }
  // Split C along its longer side into whole tiles; each part is an independent product.
  const bool split_n = n >= m;
  const int64_t len = split_n ? n : m, unit = split_n ? kNR : kMR;
  const int64_t units = (len + unit - 1) / unit;
  const int64_t grain = std::max<int64_t>(
      1, static_cast<int64_t>(double(1 << 20) / (macs / static_cast<double>(units))));
  pool->parallel_for(units, grain, [&](int64_t u0, int64_t u1) {
    const int64_t begin = u0 * unit, end = std::min(len, u1 * unit);
    if (split_n)
      gemm_blocked(sa, S{sb.p + begin * sb.s_i, sb.s_i, sb.s_p}, m, end - begin, k, c + begin, ldc,
                   round_output);
    else
      gemm_blocked(S{sa.p + begin * sa.s_i, sa.s_i, sa.s_p}, sb, end - begin, n, k,
                   c + begin * ldc, ldc, round_output);
  });
#else
  (void)trans_a, (void)trans_b, (void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)ldb;
  (void)c, (void)ldc, (void)pool, (void)round_output;
#endif
}

}  // namespace

void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const uint16_t* a,
               int64_t lda, const uint16_t* b, int64_t ldb, float* c, int64_t ldc,
               ThreadPool* pool) {
  gemm_bf16_impl(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, pool, false);
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
               int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
               ThreadPool* pool, bool round_output) {
  gemm_bf16_impl(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, pool, round_output);
}

}  // namespace spire::cpu
