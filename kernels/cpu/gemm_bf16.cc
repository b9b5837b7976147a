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
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/scratch_buffer.h"
#include "kernels/functors.h"

#include <cstdlib>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#define SPIRE_BF16_X86 1
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's AVX-512 intrinsics start their results from `__m512i __Y = __Y;`, which
// -Wmaybe-uninitialized reports wherever they are inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// Packing runs only where the kernel does (AVX-512 CPUs): vectorized for AVX-512 too.
#define SPIRE_BF16_PACK_TARGET __attribute__((target("avx512f,avx512bw,avx512vl")))
#define SPIRE_BF16_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma")))
// The AMX path: tiles, the BF16 tile product, and the AVX-512 of its merges.
#define SPIRE_AMX_TARGET                                                                   \
  __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16," \
                        "fma")))
#else
#define SPIRE_BF16_X86 0
#define SPIRE_BF16_PACK_TARGET
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace spire::cpu {
namespace {

constexpr int kMR = 6;             // rows of a C tile
constexpr int kNV = 4;             // 16-column vectors per row of a C tile
constexpr int kNR = 16 * kNV;      // columns of a C tile
constexpr int64_t kKC = 256;       // k per packed block (even)
constexpr int64_t kMC = 20 * kMR;  // rows of op(A) per packed block
constexpr int64_t kNC = 8 * kNR;   // columns of op(B) per packed block

// The AMX path's blocks (see gemm_blocked_amx).
constexpr int kAmxT = 16;                  // rows of every tile; k pairs per A and B tile
constexpr int kAmxMR = 2 * kAmxT;          // rows of a C block
constexpr int kAmxNR = 2 * kAmxT;          // columns of a C block
constexpr int64_t kAmxMC = 4 * kAmxMR;     // rows of op(A) per packed block
constexpr int64_t kAmxNC = 16 * kAmxNR;    // columns of op(B) per packed block
constexpr int64_t kAmxKC = 512;            // k per packed block, or the least that fits in L2

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

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

#if SPIRE_BF16_X86
/// r rounded to bf16 precision (nearest even; a NaN made quiet), as f32: exactly
/// bf16_bits_to_float(float_to_bf16_bits(r)) of kernels/functors.h, per lane.
SPIRE_BF16_PACK_TARGET inline __m512 round_to_bf16(__m512 r) {
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

/// The bf16 bits of s[0..16) (kernels/functors.h's float_to_bf16_bits, per lane).
SPIRE_BF16_PACK_TARGET inline __m256i bf16_vector(const float* s) {
  const __m512i rounded = _mm512_castps_si512(round_to_bf16(_mm512_loadu_ps(s)));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(rounded, 16));
}
SPIRE_BF16_PACK_TARGET inline __m256i bf16_vector(const uint16_t* s) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
}

/// The 16 x 16 matrix of 32-bit words v[0..16) (row i in v[i]) transposed in place.
SPIRE_BF16_PACK_TARGET inline void transpose_16x16(__m512i v[16]) {
  __m512i t[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; i += 2) {  // 2 x 2 blocks of words
    t[i] = _mm512_unpacklo_epi32(v[i], v[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(v[i], v[i + 1]);
  }
#pragma GCC unroll 16
  for (int i = 0; i < 16; i += 4) {  // 4 x 4 blocks: v[i + c] holds column 4L + c of rows i..i+3
    v[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    v[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    v[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    v[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
#pragma GCC unroll 16
  for (int i = 0; i < 16; i += 8)  // 128-bit lanes of rows i..i+7
    for (int c = 0; c < 4; ++c) {
      t[i + c] = _mm512_shuffle_i32x4(v[i + c], v[i + 4 + c], 0x88);
      t[i + 4 + c] = _mm512_shuffle_i32x4(v[i + c], v[i + 4 + c], 0xdd);
    }
#pragma GCC unroll 16
  for (int c = 0; c < 4; ++c) {  // whole columns
    v[c] = _mm512_shuffle_i32x4(t[c], t[8 + c], 0x88);
    v[4 + c] = _mm512_shuffle_i32x4(t[4 + c], t[12 + c], 0x88);
    v[8 + c] = _mm512_shuffle_i32x4(t[c], t[8 + c], 0xdd);
    v[12 + c] = _mm512_shuffle_i32x4(t[4 + c], t[12 + c], 0xdd);
  }
}

/// The 16 pairs (run0[i], run1[i]) of two runs of 16 elements, as bf16 bits.
template <class Src>
SPIRE_BF16_PACK_TARGET inline __m512i interleave_pairs(const Src* run0, const Src* run1) {
  // Word j: run 0's element j / 2 (even j), run 1's (odd j).
  alignas(64) static constexpr uint16_t kInterleave[32] = {
      0, 16, 1, 17, 2, 18, 3, 19, 4,  20, 5,  21, 6,  22, 7,  23,
      8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i two =
      _mm512_inserti64x4(_mm512_zextsi256_si512(bf16_vector(run0)), bf16_vector(run1), 1);
  return _mm512_permutexvar_epi16(_mm512_load_si512(static_cast<const void*>(kInterleave)), two);
}

/// 32 consecutive elements as bf16 bits (16 pairs).
template <class Src>
SPIRE_BF16_PACK_TARGET inline __m512i bf16_pairs(const Src* s) {
  if constexpr (std::is_same_v<Src, float>)
    return _mm512_inserti64x4(_mm512_zextsi256_si512(bf16_vector(s)), bf16_vector(s + 16), 1);
  else
    return _mm512_loadu_si512(static_cast<const void*>(s));
}

#endif

/// Packs rows [0, rows) x k [0, kc) of `src` as panels of R rows: for each k pair q, R pairs
/// (row-major within the panel), zero-padded; pairs before q_begin are left as they are
/// (pack_panels has written them). Two layouts of the source copy whole runs: k contiguous
/// (each pair is one 32-bit word of the source; with R a multiple of 16, 16 rows x 16 pairs at
/// a time by vector) and rows contiguous (each pair interleaves two source rows; pack_panels
/// packs the whole panels' pairs by vector first); others go element by element.
template <int R, class Src>
SPIRE_BF16_PACK_TARGET void pack_pairs(const Strided<Src>& src, int64_t rows, int64_t kc,
                                       uint16_t* dst, int64_t q_begin = 0) {
  const int64_t pairs = (kc + 1) / 2, full = kc / 2;  // full: pairs with both k in range
  for (int64_t r0 = 0; r0 < rows; r0 += R) {
    const int64_t r = std::min<int64_t>(R, rows - r0);
    uint16_t* panel = dst + r0 * pairs * 2;
    int64_t q = q_begin;
    if (r == R && src.s_p == 1) {
#if SPIRE_BF16_X86
      // 16 rows x 16 pairs at a time: each row's 16 pairs are one vector; the transpose
      // gives each pair's 16 rows.
      if constexpr (R % 16 == 0)
        for (; q + 16 <= full; q += 16)
          for (int64_t i0 = 0; i0 < R; i0 += 16) {
            __m512i v[16];
#pragma GCC unroll 16
            for (int i = 0; i < 16; ++i) v[i] = bf16_pairs(src.p + (r0 + i0 + i) * src.s_i + 2 * q);
            transpose_16x16(v);
            for (int j = 0; j < 16; ++j)
              _mm512_storeu_si512(static_cast<void*>(panel + ((q + j) * R + i0) * 2), v[j]);
          }
#endif
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

/// Packs columns [0, cols) x k [0, kc) of op(B) (rows of `src`) as R-column panels of
/// `pairs` k pairs each (pack_pairs' layout, zero pairs past kc; panels pairs * R * 2 apart).
/// With the columns contiguous in the source, the whole pairs of the whole panels go first,
/// a pair of source rows at a time across all panels (the source is read in order).
template <int R, class Src>
SPIRE_BF16_PACK_TARGET void pack_panels(const Strided<Src>& src, int64_t cols, int64_t kc,
                                        int64_t pairs, uint16_t* dst) {
  const int64_t used = (kc + 1) / 2, panel = pairs * R * 2, full_cols = cols / R * R;
  int64_t q_done = 0;  // pairs of the whole panels packed below
#if SPIRE_BF16_X86
  if constexpr (R % 16 == 0)
    if (src.s_i == 1 && full_cols > 0) {
      q_done = kc / 2;
      for (int64_t q = 0; q < q_done; ++q) {
        const Src* row0 = src.p + 2 * q * src.s_p;
        const Src* row1 = row0 + src.s_p;
        for (int64_t j = 0; j < full_cols; j += 16)
          _mm512_storeu_si512(static_cast<void*>(dst + j / R * panel + (q * R + j % R) * 2),
                              interleave_pairs(row0 + j, row1 + j));
      }
    }
#endif
  for (int64_t j0 = 0; j0 < cols; j0 += R) {
    uint16_t* d = dst + j0 / R * panel;
    pack_pairs<R>(Strided<Src>{src.p + j0 * src.s_i, src.s_i, src.s_p},
                  std::min<int64_t>(R, cols - j0), kc, d, j0 < full_cols ? q_done : 0);
    std::fill(d + used * R * 2, d + panel, uint16_t{0});
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
      pack_panels<kNR>(Strided<Src>{b.p + jc * b.s_i + pc * b.s_p, b.s_i, b.s_p}, nc, kc, pairs, pb);
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

// ---- AMX tiles (TDPBF16PS) ------------------------------------------------------------------
// Each k block's products (detail::amx_k_block: as few blocks as fit in L2) are summed
// from zero in tile registers, then added to C; within a tile the hardware adds a row's 32
// products in its own order (not micro_kernel's bits, the same for any thread count). A C block
// is 32 x 32: four 16 x 16 f32 tiles, fed by two A tiles (16 rows x 16 k pairs) and two B
// tiles (16 k pairs x 16 columns). k is padded with zero pairs to whole tiles.

/// The tile configuration (palette 1): all eight tiles 16 rows of 64 bytes.
struct alignas(64) AmxConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
  AmxConfig() {
    for (int t = 0; t < 8; ++t) colsb[t] = 64, rows[t] = kAmxT;
  }
};

/// Packs rows [0, rows) x k [0, kc) of `src` row-major into rows of `width` bf16 (k past kc
/// and rows up to a multiple of kAmxMR zero): an A tile's rows are 16 consecutive k pairs.
/// With the rows contiguous in the source (op(A) = A transposed), 16 rows x 32 k at a time:
/// two k runs of 16 rows interleave into 16 pairs, and 16 such words transpose to the rows.
template <class Src>
SPIRE_BF16_PACK_TARGET void pack_rows(const Strided<Src>& src, int64_t rows, int64_t kc,
                                      int64_t width, uint16_t* dst) {
  const int64_t padded = round_up(rows, kAmxMR);
  if (src.s_p == 1) {
    for (int64_t r = 0; r < rows; ++r) {
      const Src* __restrict s = src.p + r * src.s_i;
      uint16_t* __restrict d = dst + r * width;
      int64_t p = 0;
      if constexpr (std::is_same_v<Src, float>)
        for (; p + 16 <= kc; p += 16)
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + p), bf16_vector(s + p));
      for (; p < kc; ++p) d[p] = bf16_bits(s[p]);
      std::fill(d + kc, d + width, uint16_t{0});
    }
  } else {
    const bool runs = src.s_i == 1;
    for (int64_t r0 = 0; r0 < rows; r0 += kAmxT) {
      const int64_t r1 = std::min<int64_t>(rows, r0 + kAmxT);
      int64_t p = 0;
      if (runs && r1 - r0 == kAmxT)
        for (; p + 2 * kAmxT <= kc; p += 2 * kAmxT) {
          __m512i v[kAmxT];
#pragma GCC unroll 16
          for (int q = 0; q < kAmxT; ++q) {
            const Src* s = src.p + r0 + (p + 2 * q) * src.s_p;
            v[q] = interleave_pairs(s, s + src.s_p);
          }
          transpose_16x16(v);
          for (int r = 0; r < kAmxT; ++r)
            _mm512_storeu_si512(static_cast<void*>(dst + (r0 + r) * width + p), v[r]);
        }
      // Each remaining k reads one run of the source and adds one element to each row.
      for (; p < kc; ++p) {
        const Src* __restrict s = src.p + p * src.s_p;
        for (int64_t r = r0; r < r1; ++r) dst[r * width + p] = bf16_bits(s[r * src.s_i]);
      }
    }
    for (int64_t r = 0; r < rows; ++r) std::fill(dst + r * width + kc, dst + (r + 1) * width, uint16_t{0});
  }
  std::fill(dst + rows * width, dst + padded * width, uint16_t{0});
}

/// out (32 x 32 f32, row-major) = the products of a 32-row A panel (rows `width` bf16 apart)
/// and a B panel over `tiles` tiles of 16 k pairs.
SPIRE_AMX_TARGET __attribute__((noinline)) void amx_block(int64_t tiles, const uint16_t* a,
                                                          int64_t width, const uint16_t* b,
                                                          float* out) {
  // GCC's tile loads are asm without a memory operand: keep the packing's stores before them
  // (this function also stays out of line).
  asm volatile("" ::: "memory");
  const int64_t a_stride = width * 2, b_stride = kAmxNR * 4;
  const uint16_t* a1 = a + kAmxT * width;
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t t = 0; t < tiles; ++t) {
    const uint16_t* bt = b + t * kAmxT * kAmxNR * 2;
    _tile_loadd(4, a + t * 2 * kAmxT, a_stride);
    _tile_loadd(5, a1 + t * 2 * kAmxT, a_stride);
    _tile_loadd(6, bt, b_stride);
    _tile_loadd(7, bt + 2 * kAmxT, b_stride);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  constexpr int64_t ld = kAmxNR * 4;
  _tile_stored(0, out, ld);
  _tile_stored(1, out + kAmxT, ld);
  _tile_stored(2, out + kAmxT * kAmxNR, ld);
  _tile_stored(3, out + kAmxT * kAmxNR + kAmxT, ld);
}

/// C block (rows mr, columns nr) = or += tile (32 x 32), rounded to bf16 with `round`.
/// With `stream`, whole 32-column rows of C on 64-byte boundaries are written by
/// non-temporal stores, which leave C's lines out of the caches and, when nothing is added
/// to C (k within one block), skip reading them for ownership: for final values of a C much
/// larger than the caches, whose lines would be evicted before their reader came (the
/// caller fences once after its last block). Same values.
SPIRE_AMX_TARGET void amx_merge(const float* tile, int64_t mr, int64_t nr, float* c, int64_t ldc,
                                bool accumulate, bool round, bool stream) {
  // (Whole rows only: then no scalar tail below, and every vector store is aligned.)
  const bool nt = stream && nr == kAmxNR && reinterpret_cast<uintptr_t>(c) % 64 == 0 &&
                  ldc % 16 == 0;
  for (int64_t i = 0; i < mr; ++i) {
    const float* t = tile + i * kAmxNR;
    float* out = c + i * ldc;
    int64_t j = 0;
    for (; j + 16 <= nr; j += 16) {
      __m512 r = _mm512_loadu_ps(t + j);
      if (accumulate) r = _mm512_add_ps(_mm512_loadu_ps(out + j), r);
      if (round) r = round_to_bf16(r);
      if (nt) _mm512_stream_ps(out + j, r);
      else _mm512_storeu_ps(out + j, r);
    }
    for (; j < nr; ++j) {
      const float v = accumulate ? out[j] + t[j] : t[j];
      out[j] = round ? functors::bf16_bits_to_float(functors::float_to_bf16_bits(v)) : v;
    }
  }
}

/// gemm_blocked on AMX tiles, k in blocks of kc_block (detail::amx_k_block of the whole product).
template <class Src>
SPIRE_AMX_TARGET void gemm_blocked_amx(const Strided<Src>& a, const Strided<Src>& b, int64_t m,
                                       int64_t n, int64_t k, int64_t kc_block, float* c,
                                       int64_t ldc, bool round_output, bool stream) {
  const int64_t kc_max = std::min(kc_block, k), pairs_max = round_up((kc_max + 1) / 2, kAmxT);
  uint16_t* pa = tl_bf16_a.get<uint16_t>(round_up(std::min(kAmxMC, m), kAmxMR) * pairs_max * 2);
  uint16_t* pb = tl_bf16_b.get<uint16_t>(round_up(std::min(kAmxNC, n), kAmxNR) * pairs_max * 2);
  alignas(64) float tile[kAmxMR * kAmxNR];
  const AmxConfig config;
  _tile_loadconfig(&config);
  for (int64_t jc = 0; jc < n; jc += kAmxNC) {
    const int64_t nc = std::min(kAmxNC, n - jc);
    for (int64_t pc = 0; pc < k; pc += kc_block) {
      const int64_t kc = std::min(kc_block, k - pc), pairs = round_up((kc + 1) / 2, kAmxT);
      const int64_t width = pairs * 2;
      const bool accumulate = pc > 0;
      const bool last = pc + kc == k;
      const bool round = round_output && last;
      pack_panels<kAmxNR>(Strided<Src>{b.p + jc * b.s_i + pc * b.s_p, b.s_i, b.s_p}, nc, kc, pairs, pb);
      for (int64_t ic = 0; ic < m; ic += kAmxMC) {
        const int64_t mc = std::min(kAmxMC, m - ic);
        pack_rows(Strided<Src>{a.p + ic * a.s_i + pc * a.s_p, a.s_i, a.s_p}, mc, kc, width, pa);
        for (int64_t jr = 0; jr < nc; jr += kAmxNR) {
          const uint16_t* b_panel = pb + jr / kAmxNR * pairs * kAmxNR * 2;
          for (int64_t ir = 0; ir < mc; ir += kAmxMR) {
            amx_block(pairs / kAmxT, pa + ir * width, width, b_panel, tile);
            amx_merge(tile, std::min<int64_t>(kAmxMR, mc - ir), std::min<int64_t>(kAmxNR, nc - jr),
                      c + (ic + ir) * ldc + jc + jr, ldc, accumulate, round, stream && last);
          }
        }
      }
    }
  }
  _tile_release();
  if (stream) _mm_sfence();  // the non-temporal stores ordered before whoever reads C next
}

/// Asks Linux for this process's permission to use the AMX tile data (once per process; it
/// then holds for every thread).
bool amx_permitted() {
#if defined(__linux__) && defined(SYS_arch_prctl)
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtileData = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtileData) == 0;
#else
  return false;
#endif
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

bool gemm_bf16_amx_supported() {
#if SPIRE_BF16_X86
  static const bool ok = [] {
    if (!gemm_bf16_supported()) return false;
    if (const char* v = std::getenv("SPIRE_CPU_AMX"); v != nullptr && v[0] == '0' && v[1] == '\0')
      return false;
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    const bool amx_bf16 = (edx >> 22) & 1u, amx_tile = (edx >> 24) & 1u;
    return amx_bf16 && amx_tile && amx_permitted();
  }();
  return ok;
#else
  return false;
#endif
}

namespace {

template <class Src>
void gemm_bf16_impl(Bf16Kernel kernel, bool trans_a, bool trans_b, int64_t m, int64_t n,
                    int64_t k, const Src* a, int64_t lda, const Src* b, int64_t ldb, float* c,
                    int64_t ldc, ThreadPool* pool, bool round_output) {
  if (!gemm_bf16_supported()) throw_error("gemm_bf16: this CPU has no AVX512-BF16");
  if (kernel == Bf16Kernel::kAmx && !gemm_bf16_amx_supported())
    throw_error("gemm_bf16: AMX tiles asked for, but this CPU or OS does not run them");
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
  const bool amx = kernel == Bf16Kernel::kAmx;
  // Streamed where C is too large to stay cached for its reader (detail::kBf16StreamBytes;
  // measured on an Intel Xeon with 2 MiB of L2 a core, on 1 and 2 threads).
  const bool stream = static_cast<double>(m) * static_cast<double>(n) * sizeof(float) >=
                      static_cast<double>(detail::kBf16StreamBytes);
  const int64_t kc_block = amx ? detail::amx_k_block(trans_a, n, k) : 0;
  auto blocked = [&](const S& pa, const S& pb, int64_t rows, int64_t cols, float* pc) {
    if (amx) gemm_blocked_amx(pa, pb, rows, cols, k, kc_block, pc, ldc, round_output, stream);
    else gemm_blocked(pa, pb, rows, cols, k, pc, ldc, round_output);
  };
  const int threads = pool ? pool->num_threads() : 1;
  const double macs = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  if (threads <= 1 || macs < double(1 << 21)) {
    blocked(sa, sb, m, n, c);
    return;
  }
  // Split C along its longer side into whole tiles; each part is an independent product.
  const bool split_n = n >= m;
  const int64_t len = split_n ? n : m;
  const int64_t unit = split_n ? (amx ? kAmxNR : kNR) : (amx ? kAmxMR : kMR);
  const int64_t units = (len + unit - 1) / unit;
  const int64_t grain = std::max<int64_t>(
      1, static_cast<int64_t>(double(1 << 20) / (macs / static_cast<double>(units))));
  pool->parallel_for(units, grain, [&](int64_t u0, int64_t u1) {
    const int64_t begin = u0 * unit, end = std::min(len, u1 * unit);
    if (split_n)
      blocked(sa, S{sb.p + begin * sb.s_i, sb.s_i, sb.s_p}, m, end - begin, c + begin);
    else
      blocked(S{sa.p + begin * sa.s_i, sa.s_i, sa.s_p}, sb, end - begin, n, c + begin * ldc);
  });
#else
  (void)kernel, (void)trans_a, (void)trans_b, (void)m, (void)n, (void)k, (void)a, (void)lda;
  (void)b, (void)ldb;
  (void)c, (void)ldc, (void)pool, (void)round_output;
#endif
}

Bf16Kernel best_kernel() {
  return gemm_bf16_amx_supported() ? Bf16Kernel::kAmx : Bf16Kernel::kAvx512Bf16;
}

}  // namespace

void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const uint16_t* a,
               int64_t lda, const uint16_t* b, int64_t ldb, float* c, int64_t ldc,
               ThreadPool* pool) {
  gemm_bf16_impl(best_kernel(), trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, pool, false);
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
               int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
               ThreadPool* pool, bool round_output) {
  gemm_bf16_impl(best_kernel(), trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, pool,
                 round_output);
}

namespace detail {

// (kernels/cpu/gemm_bf16.h.) Measured on an Intel Xeon (AMX; one core loads 12 GB/s, 2 MiB
// of L2): a 2048 x 384 x 1536 product whose operands come from memory took 5.1 ms in three k
// blocks of 512 and 3.3 ms in one; the GPT's bf16 step 469-484 -> 447-456 ms. Longer blocks
// with op(A) transposed (weight gradients, k = the batch's rows: the packing reads one
// source row per k) made those products slower in the step, so they keep blocks of 512.
int64_t amx_k_block(bool trans_a, int64_t n, int64_t k) {
  if (trans_a || k <= 0) return kAmxKC;
  const int64_t l2 = l2_cache_bytes();
  const int64_t budget = (l2 > 0 ? l2 : int64_t{1} << 20) * 4 / 5;
  const int64_t per_k = (round_up(std::min(kAmxNC, n), kAmxNR) + kAmxMC) * 2;  // bf16 bytes
  const int64_t fit = std::max(kAmxKC, budget / per_k / (2 * kAmxT) * (2 * kAmxT));
  const int64_t blocks = (k + fit - 1) / fit;
  return round_up((k + blocks - 1) / blocks, 2 * kAmxT);
}

void gemm_bf16_with(Bf16Kernel kernel, bool trans_a, bool trans_b, int64_t m, int64_t n,
                    int64_t k, const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb,
                    float* c, int64_t ldc, ThreadPool* pool) {
  gemm_bf16_impl(kernel, trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, pool, false);
}

void gemm_bf16_with(Bf16Kernel kernel, bool trans_a, bool trans_b, int64_t m, int64_t n,
                    int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                    float* c, int64_t ldc, ThreadPool* pool, bool round_output) {
  gemm_bf16_impl(kernel, trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, pool, round_output);
}

}  // namespace detail

}  // namespace spire::cpu
