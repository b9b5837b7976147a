// Implementation of spire::cpu::gemm: a BLIS/GotoBLAS-style packed, cache-blocked GEMM.
//
// Loop structure (row-major C, op(A) m x k, op(B) k x n):
//
//   for jc in [0, n) step NC:                 B block (KC x NC) lives in L2/L3
//     for pc in [0, k) step KC:
//       pack op(B)[pc:+KC, jc:+NC]  -> B~ : NR-wide column panels, zero-padded
//       for ic in [0, m) step MC:             A block (MC x KC) lives in L2
//         pack op(A)[ic:+MC, pc:+KC] -> A~ : MR-tall row panels (or read op(A) in place)
//         for jr in [0, NC) step NR:          B~ micro-panel (KC x NR) stays in L1
//           for ir in [0, MC) step MR:        A~ micro-panel streams from L2
//             C[ir:+MR, jr:+NR] = alpha * A~ * B~ + beta' * C   (micro-kernel)
//
// The micro-kernel keeps an MR x NR tile of C in vector registers (NR = NV vectors of W lanes
// along the contiguous n dimension) and, per k step, loads NV vectors of B~ and broadcasts MR
// scalars of A~ into FMAs. beta' is the caller's beta for the first k block and 1 afterwards.
// op(A) is packed only where reading it in place would be slower (read_a_in_place): then the
// MR scalars come from MR row streams of op(A) itself. Tiles on the last rows store only their
// rows; tiles on the last columns are computed whole into scratch and merged. Shapes the
// tiles fit badly are steered elsewhere: m == 1 or n == 1 goes to a vectorized GEMV; few
// columns (n << NR) either use a narrower tile (AVX-512) or solve the transposed problem
// C^T = op(B)^T op(A)^T.
//
// All the arithmetic is written once, with GCC/Clang vector extensions, in always-inline
// templates. Each instruction-set variant (AVX-512, AVX2+FMA, generic) is a small struct whose
// entry points carry a target attribute; the templates are inlined into them and compiled for
// that instruction set. The best supported variant is picked once at run time, so this file
// needs no -march flags.
#include "kernels/cpu/gemm.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <type_traits>

#include "core/thread_pool.h"
#include "kernels/cpu/scratch_buffer.h"

#if defined(__unix__)
#include <unistd.h>  // sysconf
#endif

namespace spire::cpu {
namespace {

using detail::GemmIsa;

#define SPIRE_GEMM_INLINE inline __attribute__((always_inline))

#if defined(__x86_64__) || defined(__i386__)
#define SPIRE_GEMM_HAVE_X86 1
#define SPIRE_GEMM_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,fma")))
#define SPIRE_GEMM_TARGET_AVX2 __attribute__((target("avx2,fma")))
#else
#define SPIRE_GEMM_HAVE_X86 0
#endif

/// The arguments of one gemm() call.
template <class T>
struct GemmArgs {
  bool trans_a, trans_b;
  int64_t m, n, k;
  T alpha;
  const T* a;
  int64_t lda;
  const T* b;
  int64_t ldb;
  T beta;
  T* c;
  int64_t ldc;
  bool trans_c = false;  // C(i, j) is stored at c[j * ldc + i] (used by transposed_problem)
  // Told of each finished block of C, in the caller's coordinates: this problem's C(i, j) is
  // the caller's (row0 + i, col0 + j), or with trans_c its (row0 + j, col0 + i).
  const GemmEpilogue* epilogue = nullptr;
  int64_t row0 = 0, col0 = 0;
  bool deep = detail::gemm_best_depth() == detail::GemmDepth::kDeep;  // f32 AVX-512 KC 384
};

/// Tells g's epilogue (if any) that rows [i0, i1) and columns [j0, j1) of g's C are final.
template <class T>
void finish_block(const GemmArgs<T>& g, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  if (!g.epilogue) return;
  if (g.trans_c) (*g.epilogue)(g.row0 + j0, g.row0 + j1, g.col0 + i0, g.col0 + i1);
  else (*g.epilogue)(g.row0 + i0, g.row0 + i1, g.col0 + j0, g.col0 + j1);
}

/// The same product with the operands' roles exchanged: C^T = op(B)^T op(A)^T.
template <class T>
GemmArgs<T> transposed_problem(const GemmArgs<T>& g) {
  return {!g.trans_b, !g.trans_a, g.n, g.m, g.k, g.alpha, g.b, g.ldb, g.a, g.lda, g.beta, g.c,
          g.ldc, !g.trans_c, g.epilogue, g.row0, g.col0, g.deep};
}

/// A vector of W lanes of T. Lowered to the instruction set of the function it ends up in.
template <class T, int W>
struct VecOf {
  typedef T type __attribute__((vector_size(W * sizeof(T))));
};

/// Register-tile shape and cache blocking of one micro-kernel variant.
template <class T, int kW, int kMR, int kNV, int kMC, int kKC, int kNC, bool kAInPlace = false>
struct Shape {
  using Scalar = T;
  static constexpr int W = kW;    // lanes per vector register
  static constexpr int MR = kMR;  // rows of the C tile (broadcast values of A~ per k step)
  static constexpr int NV = kNV;  // vector registers per row of the C tile
  static constexpr int NR = kW * kNV;  // columns of the C tile
  static constexpr int MC = kMC;  // rows of op(A) per packed A block (multiple of MR)
  static constexpr int KC = kKC;  // depth of the packed blocks
  static constexpr int NC = kNC;  // columns of op(B) per packed B block (multiple of NR)
  static constexpr bool A_IN_PLACE = kAInPlace;  // op(A) may be read unpacked (read_a_in_place)
  static_assert(kMC % kMR == 0 && kNC % (kW * kNV) == 0, "blocks must hold whole tiles");
};

/// The A operand of one micro-kernel call. Packed: an A~ micro-panel, element (i, p) at
/// a[p * MR + i]. In place: op(A) itself, element (i, p) at a[min(i, rows - 1) * si + p * sp]
/// (rows past `rows` repeat the last one: they are computed, never stored). Either way only
/// the first `rows` rows of C are stored.
template <class T>
struct TileA {
  const T* a;
  bool packed;
  int64_t si, sp, rows;
};

/// acc += A * B~ over kc steps for the A tile `a` (packed or in place, per kPacked) and the
/// packed B micro-panel b (kc x NR).
template <class S, bool kPacked, class V>
SPIRE_GEMM_INLINE void micro_kernel_steps(int64_t kc, const TileA<typename S::Scalar>& a,
                                          const typename S::Scalar* __restrict b,
                                          V (&acc)[S::MR][S::NV]) {
  using T = typename S::Scalar;
  constexpr int MR = S::MR, NV = S::NV, W = S::W;
  // In place: one pointer per row and a common offset (one add per step); packed: constant
  // offsets from one pointer.
  const T* __restrict ar[MR];
#pragma GCC unroll 32
  for (int i = 0; i < MR; ++i) ar[i] = kPacked ? a.a + i : a.a + std::min<int64_t>(i, a.rows - 1) * a.si;
  const int64_t sp = kPacked ? MR : a.sp;
  int64_t off = 0;
#pragma GCC unroll 4
  for (int64_t p = 0; p < kc; ++p) {
    V bv[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) std::memcpy(&bv[v], b + v * W, sizeof(V));
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i) {
      const T ai = kPacked ? a.a[off + i] : ar[i][off];
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[i][v] += bv[v] * ai;
    }
    off += sp;
    b += S::NR;
  }
}

/// C[0:rows, 0:NR] = alpha * A * B~ + beta * C for the A tile `a` (kc x MR, see TileA) and the
/// packed B micro-panel b (kc x NR). C is read only when beta != 0; rows of C past a.rows are
/// neither read nor written.
template <class S>
SPIRE_GEMM_INLINE void micro_kernel(int64_t kc, const TileA<typename S::Scalar>& a,
                                    const typename S::Scalar* __restrict b,
                                    typename S::Scalar* __restrict c, int64_t ldc,
                                    typename S::Scalar alpha, typename S::Scalar beta) {
  using T = typename S::Scalar;
  using V = typename VecOf<T, S::W>::type;
  constexpr int MR = S::MR, NV = S::NV, W = S::W;

  // Warm the C tile (every cache line of its rows) while the k loop runs; it is needed only at
  // the end.
  constexpr int kLine = 64 / sizeof(T);
#pragma GCC unroll 32
  for (int i = 0; i < MR; ++i) {
    if (i >= a.rows) break;
#pragma GCC unroll 8
    for (int j = 0; j < S::NR; j += kLine) __builtin_prefetch(c + i * ldc + j);
    __builtin_prefetch(c + i * ldc + S::NR - 1);  // the last line, when rows are misaligned
  }

  V acc[MR][NV];
#pragma GCC unroll 32
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[i][v] = V{};
  if (!S::A_IN_PLACE || a.packed) micro_kernel_steps<S, true>(kc, a, b, acc);
  else micro_kernel_steps<S, false>(kc, a, b, acc);

  if (beta == T(0)) {
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i) {
      if (i >= a.rows) break;
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) {
        const V r = acc[i][v] * alpha;
        std::memcpy(c + i * ldc + v * W, &r, sizeof(V));
      }
    }
  } else {
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i) {
      if (i >= a.rows) break;
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) {
        V r;
        std::memcpy(&r, c + i * ldc + v * W, sizeof(V));
        r = acc[i][v] * alpha + r * beta;
        std::memcpy(c + i * ldc + v * W, &r, sizeof(V));
      }
    }
  }
}

#if defined(__has_builtin)
#if __has_builtin(__builtin_shufflevector)
#define SPIRE_GEMM_HAVE_SHUFFLE 1
#endif
#endif
#ifndef SPIRE_GEMM_HAVE_SHUFFLE
#define SPIRE_GEMM_HAVE_SHUFFLE 0
#endif

#if SPIRE_GEMM_HAVE_SHUFFLE
/// dst[p * R + i] = src[i * s + p] for i < I (4 or 2) and p < 4: a small transpose in registers.
template <int R, int I, class T>
SPIRE_GEMM_INLINE void transpose_to_panel(const T* src, int64_t s, T* __restrict dst) {
  using V = typename VecOf<T, 4>::type;
  V r[4];  // rows i of the 4 source columns; rows >= I are unused
#pragma GCC unroll 4
  for (int i = 0; i < I; ++i) std::memcpy(&r[i], src + i * s, sizeof(V));
  // Interleave row pairs: lo = (x0 y0 x1 y1), hi = (x2 y2 x3 y3).
  const V lo01 = __builtin_shufflevector(r[0], r[1], 0, 4, 1, 5);
  const V hi01 = __builtin_shufflevector(r[0], r[1], 2, 6, 3, 7);
  if constexpr (I == 4) {
    const V lo23 = __builtin_shufflevector(r[2], r[3], 0, 4, 1, 5);
    const V hi23 = __builtin_shufflevector(r[2], r[3], 2, 6, 3, 7);
    const V out[4] = {__builtin_shufflevector(lo01, lo23, 0, 1, 4, 5),
                      __builtin_shufflevector(lo01, lo23, 2, 3, 6, 7),
                      __builtin_shufflevector(hi01, hi23, 0, 1, 4, 5),
                      __builtin_shufflevector(hi01, hi23, 2, 3, 6, 7)};
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) std::memcpy(dst + p * R, &out[p], sizeof(V));
  } else {
    static_assert(I == 2, "transpose_to_panel handles 4 or 2 rows");
    T pairs[8];
    std::memcpy(pairs, &lo01, sizeof(V));
    std::memcpy(pairs + 4, &hi01, sizeof(V));
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) std::memcpy(dst + p * R, pairs + 2 * p, 2 * sizeof(T));
  }
}
#endif

/// Packs an r x kc block of a strided matrix -- element (i, p) at src[i * s_i + p * s_p] -- as
/// kc consecutive groups of R values (rows r..R-1 zero-filled): the micro-kernel's layout.
/// next_r is the number of rows of the following panel (rows R.. of src), prefetched on the way.
template <int R, class T>
SPIRE_GEMM_INLINE void pack_panel(const T* src, int64_t s_i, int64_t s_p, int64_t r, int64_t kc,
                                  int64_t next_r, T* __restrict dst) {
  if (r == R && s_i == 1) {
    // Each group is a contiguous run of the source: a straight vector copy.
    for (int64_t p = 0; p < kc; ++p) {
      const T* s = src + p * s_p;
#pragma GCC unroll 64
      for (int i = 0; i < R; ++i) dst[p * R + i] = s[i];
    }
    return;
  }
  if (s_i == 1) {
    // A partial panel of contiguous runs (e.g. a product with only a few rows): copy the r
    // valid values of each group and zero the rest, without a per-element branch.
    for (int64_t p = 0; p < kc; ++p) {
      const T* s = src + p * s_p;
      T* d = dst + p * R;
      for (int64_t i = 0; i < r; ++i) d[i] = s[i];
      for (int64_t i = r; i < R; ++i) d[i] = T(0);
    }
    return;
  }
  int64_t p = 0;
#if SPIRE_GEMM_HAVE_SHUFFLE
  if constexpr (R % 2 == 0) {
    if (r == R && s_p == 1) {
      // Rows are contiguous along p: transpose 4 x 4 (and 2 x 4) blocks in registers. Each row
      // contributes only kc elements, too short a stream for the hardware prefetcher, so fetch
      // the next panel's rows one cache line at a time.
      constexpr int kLine = 64 / sizeof(T);
      for (; p + 4 <= kc; p += 4) {
        if (p % kLine == 0)
          for (int64_t i = 0; i < next_r; ++i) __builtin_prefetch(src + (R + i) * s_i + p);
#pragma GCC unroll 16
        for (int i = 0; i + 4 <= R; i += 4)
          transpose_to_panel<R, 4>(src + i * s_i + p, s_i, dst + p * R + i);
        if constexpr (R % 4 == 2)
          transpose_to_panel<R, 2>(src + (R - 2) * s_i + p, s_i, dst + p * R + R - 2);
      }
    }
  }
#endif
  for (; p < kc; ++p)
    for (int i = 0; i < R; ++i) dst[p * R + i] = i < r ? src[i * s_i + p * s_p] : T(0);
}

/// Packs a rows x kc block (same addressing as pack_panel) as consecutive R-row panels.
template <int R, class T>
SPIRE_GEMM_INLINE void pack_block(const T* src, int64_t s_i, int64_t s_p, int64_t rows,
                                  int64_t kc, T* dst) {
  if (s_i == 1) {
    // The block's rows are contiguous in the source (B, or a transposed A): walk the source
    // in its own order, one source row (a fixed p) at a time across every panel, so the
    // reads stream. Panel by panel instead, each pass would read R values of kc rows lying
    // s_p apart: one cache line per row, a stride the prefetcher follows poorly. Same
    // layout as pack_panel's.
    const int64_t full = rows / R * R;
    for (int64_t p = 0; p < kc; ++p) {
      const T* s = src + p * s_p;
      T* d = dst + p * R;
      for (int64_t i0 = 0; i0 < full; i0 += R) std::memcpy(d + i0 * kc, s + i0, R * sizeof(T));
      if (full < rows) {
        T* e = d + full * kc;
        for (int64_t i = 0; i < rows - full; ++i) e[i] = s[full + i];
        for (int64_t i = rows - full; i < R; ++i) e[i] = T(0);
      }
    }
    return;
  }
  for (int64_t i0 = 0; i0 < rows; i0 += R)
    pack_panel<R>(src + i0 * s_i, s_i, s_p, std::min<int64_t>(R, rows - i0), kc,
                  std::clamp<int64_t>(rows - i0 - R, 0, R), dst + i0 * kc);
}

// Per-thread scratch for the packed blocks (kernels/cpu/scratch_buffer.h).
thread_local ScratchBuffer tl_packed_a;
thread_local ScratchBuffer tl_packed_b;

constexpr int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

/// Size of an m x n C once padded to whole tiles of shape S: the work the micro-kernels do.
template <class S>
int64_t padded_tiles(int64_t m, int64_t n) {
  return round_up(m, S::MR) * round_up(n, S::NR);
}

/// Whether gemm_blocked<S> should solve the transposed problem C^T = B^T A^T: tiles are much
/// wider (NR) than tall (MR), so when n is the small dimension most of every tile would be
/// padding. Transposed tiles go through the strided edge path, costed at 1.5x.
template <class S>
bool prefer_transposed(int64_t m, int64_t n) {
  return 3 * padded_tiles<S>(n, m) < 2 * padded_tiles<S>(m, n);
}

/// Relative cost of an m x n product on tile shape S, transposed or not (see above).
template <class S>
int64_t tile_cost(int64_t m, int64_t n) {
  return std::min(2 * padded_tiles<S>(m, n), 3 * padded_tiles<S>(n, m));
}

/// The n == 1 case, a matrix-vector product y = alpha * op(A) x + beta * y, where packing and
/// MR x NR tiles would waste most of their work. Vectorized with S's vector width.
template <class S>
SPIRE_GEMM_INLINE void gemv(const GemmArgs<typename S::Scalar>& g) {
  using T = typename S::Scalar;
  using V = typename VecOf<T, S::W>::type;
  constexpr int W = S::W, kUnroll = 4;
  const int64_t x_stride = g.trans_b ? 1 : g.ldb;  // x = op(B)(:, 0)
  const int64_t y_stride = g.trans_c ? 1 : g.ldc;  // y = C(:, 0)
  auto store_y = [&](int64_t i, T dot) {
    T& y = g.c[i * y_stride];
    y = g.beta == T(0) ? g.alpha * dot : g.alpha * dot + g.beta * y;
  };

  if (g.trans_a) {
    // Columns of op(A) are rows of the stored A: accumulate t += x[p] * A[p, :] (contiguous).
    T* __restrict t = tl_packed_a.get<T>(g.m);
    std::fill(t, t + g.m, T(0));
    for (int64_t p = 0; p < g.k; ++p) {
      const T xp = g.b[p * x_stride];
      const T* __restrict row = g.a + p * g.lda;
      for (int64_t i = 0; i < g.m; ++i) t[i] += xp * row[i];
    }
    for (int64_t i = 0; i < g.m; ++i) store_y(i, t[i]);
    return;
  }

  // Rows of op(A) are contiguous: one dot product per row, with x made contiguous first.
  const T* x = g.b;
  if (x_stride != 1) {
    T* packed_x = tl_packed_b.get<T>(g.k);
    for (int64_t p = 0; p < g.k; ++p) packed_x[p] = g.b[p * x_stride];
    x = packed_x;
  }
  for (int64_t i = 0; i < g.m; ++i) {
    const T* row = g.a + i * g.lda;
    V acc[kUnroll] = {};
    int64_t p = 0;
    for (; p + kUnroll * W <= g.k; p += kUnroll * W)
#pragma GCC unroll 4
      for (int u = 0; u < kUnroll; ++u) {
        V a, b;
        std::memcpy(&a, row + p + u * W, sizeof(V));
        std::memcpy(&b, x + p + u * W, sizeof(V));
        acc[u] += a * b;
      }
    for (; p + W <= g.k; p += W) {
      V a, b;
      std::memcpy(&a, row + p, sizeof(V));
      std::memcpy(&b, x + p, sizeof(V));
      acc[0] += a * b;
    }
    const V total = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    T dot = 0;
    for (int l = 0; l < W; ++l) dot += total[l];
    for (; p < g.k; ++p) dot += row[p] * x[p];
    store_y(i, dot);
  }
}

/// Whether gemm_blocked<S> reads op(A) in place rather than packing it into A~ (only shapes
/// with A_IN_PLACE, the AVX-512 ones): when its rows are contiguous (packing them would be a
/// transpose; the micro-kernel broadcasts from MR row streams instead), or when its columns
/// are and a tile's kc steps span at most 32 KiB (small products, such as attention's tiles,
/// where packing costs as much as the FMAs). A tile of a larger transposed A, read in place,
/// would touch a cache line per step at a stride that maps many of them to one L1 set;
/// packed, it is one contiguous stream. Measured on the GPT's products (Intel Xeon, AVX-512):
/// 5 to 20% faster in place for row-major A, and as fast for the large transposed ones only
/// when packed. The AVX2 and generic tiles (2 vectors wide, so twice the broadcasts per FMA)
/// ran 5 to 10% slower in place on the same machine and always pack.
template <class S>
bool read_a_in_place(int64_t a_si, int64_t a_sp, int64_t kc) {
  constexpr int64_t kSpanBytes = 32 * 1024;
  constexpr int64_t kBytes = sizeof(typename S::Scalar);
  return S::A_IN_PLACE && (a_sp == 1 || (a_si == 1 && a_sp * kc * kBytes <= kSpanBytes));
}

/// The blocked GEMM for shape S; Kernel is S's micro-kernel compiled for the caller's ISA.
/// Requires m, n, k >= 1.
template <class S, auto Kernel>
SPIRE_GEMM_INLINE void gemm_blocked(const GemmArgs<typename S::Scalar>& args) {
  using T = typename S::Scalar;
  constexpr int MR = S::MR, NR = S::NR;

  // Matrix-vector products: a single column of C, or a single row (a column of C^T).
  if (args.n == 1 || args.m == 1) {
    if (args.n == 1) gemv<S>(args);
    else gemv<S>(transposed_problem(args));
    return finish_block(args, 0, args.m, 0, args.n);
  }

  const GemmArgs<T> g = prefer_transposed<S>(args.m, args.n) ? transposed_problem(args) : args;
  // Element strides of C's rows and columns.
  const int64_t c_si = g.trans_c ? 1 : g.ldc, c_sj = g.trans_c ? g.ldc : 1;

  // Element strides of op(A) (i along m, p along k) and of op(B) (j along n, p along k).
  const int64_t a_si = g.trans_a ? 1 : g.lda, a_sp = g.trans_a ? g.lda : 1;
  const int64_t b_sj = g.trans_b ? g.ldb : 1, b_sp = g.trans_b ? 1 : g.ldb;

  const int64_t kc_max = std::min<int64_t>(S::KC, g.k);
  const bool direct_a = read_a_in_place<S>(a_si, a_sp, kc_max);
  T* packed_a =
      direct_a ? nullptr : tl_packed_a.get<T>(round_up(std::min<int64_t>(S::MC, g.m), MR) * kc_max);
  T* packed_b = tl_packed_b.get<T>(round_up(std::min<int64_t>(S::NC, g.n), NR) * kc_max);

  for (int64_t jc = 0; jc < g.n; jc += S::NC) {
    const int64_t nc = std::min<int64_t>(S::NC, g.n - jc);
    for (int64_t pc = 0; pc < g.k; pc += S::KC) {
      const int64_t kc = std::min<int64_t>(S::KC, g.k - pc);
      const T beta = pc == 0 ? g.beta : T(1);
      pack_block<NR>(g.b + jc * b_sj + pc * b_sp, b_sj, b_sp, nc, kc, packed_b);

      for (int64_t ic = 0; ic < g.m; ic += S::MC) {
        const int64_t mc = std::min<int64_t>(S::MC, g.m - ic);
        if (!direct_a) pack_block<MR>(g.a + ic * a_si + pc * a_sp, a_si, a_sp, mc, kc, packed_a);

        for (int64_t jr = 0; jr < nc; jr += NR) {
          const int64_t nr = std::min<int64_t>(NR, nc - jr);
          const T* b_panel = packed_b + jr * kc;
          for (int64_t ir = 0; ir < mc; ir += MR) {
            const int64_t mr = std::min<int64_t>(MR, mc - ir);
            const TileA<T> a_tile =
                direct_a ? TileA<T>{g.a + (ic + ir) * a_si + pc * a_sp, false, a_si, a_sp, mr}
                         : TileA<T>{packed_a + ir * kc, true, 1, MR, mr};
            if (direct_a && a_sp == 1 && jr == 0) {
              // A's rows are read in place from L3 or memory on the first pass over this block:
              // fetch the next tile's rows while this one computes (runs of kc elements, too
              // short for the hardware prefetcher).
              constexpr int64_t kLine = 64 / sizeof(T);
              const int64_t next = std::min<int64_t>(MR, mc - ir - MR);
              for (int64_t i = 0; i < next; ++i) {
                const T* row = a_tile.a + (MR + i) * a_si;
                for (int64_t p = 0; p < kc; p += kLine) __builtin_prefetch(row + p);
                __builtin_prefetch(row + kc - 1);
              }
            }
            T* c_tile = g.c + (ic + ir) * c_si + (jc + jr) * c_sj;
            if (nr == NR && !g.trans_c) {
              Kernel(kc, a_tile, b_panel, c_tile, g.ldc, g.alpha, beta);
              continue;
            }
            // Edge (or transposed) tile: compute the full tile into scratch, then merge the valid
            // part, walking C along its contiguous dimension.
            alignas(64) T tile[MR * NR];
            Kernel(kc, a_tile, b_panel, tile, NR, T(1), T(0));
            auto merge = [&](int64_t i, int64_t j) {
              T& out = c_tile[i * c_si + j * c_sj];
              out = beta == T(0) ? g.alpha * tile[i * NR + j]
                                 : g.alpha * tile[i * NR + j] + beta * out;
            };
            if (g.trans_c) {
              for (int64_t j = 0; j < nr; ++j)
                for (int64_t i = 0; i < mr; ++i) merge(i, j);
            } else {
              for (int64_t i = 0; i < mr; ++i)
                for (int64_t j = 0; j < nr; ++j) merge(i, j);
            }
          }
        }
        // The last pass over k: this block of C is final while it is still in cache.
        if (pc + kc >= g.k) finish_block(g, ic, ic + mc, jc, jc + nc);
      }
    }
  }
}

// ---- Instruction-set variants ------------------------------------------------------------------
// Each provides `kernel` (the micro-kernel, kept out of line so its register allocation is not
// disturbed by the loop nest) and `run` (the whole blocked GEMM), both compiled for its ISA.

/// Portable fallback: 128-bit vectors (SSE2 on x86-64, NEON on AArch64, scalar elsewhere).
template <class T>
struct GenericIsa {
  static constexpr int W = 16 / sizeof(T);
  using S = Shape<T, W, 4, 2, 128, 256, 4096 / W * W>;
  __attribute__((noinline)) static void kernel(int64_t kc, const TileA<T>& a,
                                               const T* b, T* c, int64_t ldc, T alpha, T beta) {
    micro_kernel<S>(kc, a, b, c, ldc, alpha, beta);
  }
  static void run(const GemmArgs<T>& g) { gemm_blocked<S, &kernel>(g); }
};

#if SPIRE_GEMM_HAVE_X86
/// AVX2 + FMA (16 ymm registers): a 6 x 2-vector C tile (12 accumulators, 2 B vectors, 1
/// broadcast), the classic Haswell shape.
template <class T>
struct Avx2Isa {
  static constexpr int W = 32 / sizeof(T);
  using S = Shape<T, W, 6, 2, 144, 256, 4096>;
  SPIRE_GEMM_TARGET_AVX2 __attribute__((noinline)) static void kernel(
      int64_t kc, const TileA<T>& a, const T* b, T* c, int64_t ldc, T alpha, T beta) {
    micro_kernel<S>(kc, a, b, c, ldc, alpha, beta);
  }
  SPIRE_GEMM_TARGET_AVX2 static void run(const GemmArgs<T>& g) { gemm_blocked<S, &kernel>(g); }
};

/// AVX-512 (32 zmm registers). The main tile is 6 x 4 vectors (24 accumulators, 4 B vectors, 1
/// broadcast), i.e. 6 x 64 floats / 6 x 32 doubles: per k step, 4 loads + 6 broadcasts feed 24
/// FMAs (12 cycles at two 512-bit FMAs per cycle). Blocking, tuned on AMD Zen 5 (48 KiB L1d,
/// 1 MiB L2): KC = 128 keeps the 32 KiB B~ micro-panel in L1; the A~ block (MC x KC, 126 KiB)
/// and the B~ block (KC x NC: 512 KiB f32, 1 MiB f64) then sit in L2/L3. As the main tile,
/// 14 x 2, 12 x 2, 8 x 3 and 7 x 4, and KC 96..256, MC 120..504, NC 512..4096 were no faster there.
/// Where each core has 2 MiB of L2 (detail::GemmDepth::kDeep), the f32 tiles run with
/// KC = 384 instead: on an Intel AMX VM (48 KiB L1d, 2 MiB L2) GPT-shakespeare_char-shaped
/// products took about 8% less time in all, ResNet-50-shaped ones and GPT baby's about the
/// same; C is then read and written once per 384 of k rather than per 128.
/// Products with few columns (e.g. convolutions with few output channels) use a 12 x 2-vector
/// tile (n = 32 f32 / 16 f64 without padding; faster than the 24 x 1 tile on convolution-shaped
/// products) or a 24 x 1-vector tile, which pads n to 16 (f32) / 8 (f64) rather than 64 / 32.
template <class T>
struct Avx512Isa {
  static constexpr int W = 64 / sizeof(T);
  static constexpr bool kF32 = std::is_same_v<T, float>;
  // Main (6 x 4 vectors), mid (12 x 2) and narrow (24 x 1) tiles at KC 128, and at KC 384
  // (detail::GemmDepth::kDeep, f32 only). All three tiles of a depth share its KC: the tile
  // chosen for a part of a threaded product then sums each element in the same blocks of k
  // as the whole product's tile, and results stay the same for any thread count.
  using S = std::conditional_t<kF32, Shape<T, W, 6, 4, 252, 128, 1024, true>,
                               Shape<T, W, 6, 4, 126, 128, 1024, true>>;
  using Mid = std::conditional_t<kF32, Shape<T, W, 12, 2, 240, 128, 1024, true>,
                                 Shape<T, W, 12, 2, 120, 128, 1024, true>>;
  using Narrow = std::conditional_t<kF32, Shape<T, W, 24, 1, 240, 128, 1024, true>,
                                    Shape<T, W, 24, 1, 120, 128, 1024, true>>;
  using Deep = Shape<T, W, 6, 4, 252, 384, 1024, true>;
  using DeepMid = Shape<T, W, 12, 2, 240, 384, 1024, true>;
  using DeepNarrow = Shape<T, W, 24, 1, 240, 384, 1024, true>;
  template <class Tile>
  SPIRE_GEMM_TARGET_AVX512 __attribute__((noinline)) static void kernel(
      int64_t kc, const TileA<T>& a, const T* b, T* c, int64_t ldc, T alpha, T beta) {
    micro_kernel<Tile>(kc, a, b, c, ldc, alpha, beta);
  }
  template <class Main, class MidTile, class NarrowTile>
  SPIRE_GEMM_TARGET_AVX512 static void run_tiles(const GemmArgs<T>& g) {
    // Narrower tiles need more broadcasts per FMA: the padded work of each is weighted by
    // 8 (6 x 4 vectors), 9 (12 x 2) and 10 (24 x 1), and the cheapest wins.
    const int64_t wide = 8 * tile_cost<Main>(g.m, g.n), mid = 9 * tile_cost<MidTile>(g.m, g.n),
                  narrow = 10 * tile_cost<NarrowTile>(g.m, g.n);
    if (narrow < wide && narrow < mid)
      gemm_blocked<NarrowTile, &kernel<NarrowTile>>(g);
    else if (mid < wide)
      gemm_blocked<MidTile, &kernel<MidTile>>(g);
    else
      gemm_blocked<Main, &kernel<Main>>(g);
  }
  SPIRE_GEMM_TARGET_AVX512 static void run(const GemmArgs<T>& g) {
    if constexpr (kF32) {
      if (g.deep) return run_tiles<Deep, DeepMid, DeepNarrow>(g);
    }
    run_tiles<S, Mid, Narrow>(g);
  }
};
#endif

/// C = beta * C over the m x n view (zero-fill when beta == 0, so C is never read).
template <class T>
void scale_c(const GemmArgs<T>& g) {
  if (g.beta == T(1)) return;
  for (int64_t i = 0; i < g.m; ++i) {
    T* row = g.c + i * g.ldc;
    for (int64_t j = 0; j < g.n; ++j) row[j] = g.beta == T(0) ? T(0) : g.beta * row[j];
  }
}

template <class T>
void gemm_impl(GemmIsa isa, const GemmArgs<T>& g) {
  if (g.m <= 0 || g.n <= 0) return;
  if (g.k <= 0 || g.alpha == T(0)) {
    scale_c(g);
    return finish_block(g, 0, g.m, 0, g.n);
  }
  if (!detail::gemm_isa_supported(isa)) isa = GemmIsa::kGeneric;
  switch (isa) {
#if SPIRE_GEMM_HAVE_X86
    case GemmIsa::kAvx512:
      Avx512Isa<T>::run(g);
      return;
    case GemmIsa::kAvx2:
      Avx2Isa<T>::run(g);
      return;
#endif
    default:
      GenericIsa<T>::run(g);
      return;
  }
}

/// gemm_impl split over `pool`: C is cut along its larger dimension into one macro-panel per
/// chunk (whole register tiles), each solved as an
/// independent GEMM. The k loop of every element is untouched, so the result equals the
/// single-threaded one bit for bit.
template <class T>
void gemm_parallel(GemmIsa isa, const GemmArgs<T>& g, ThreadPool* pool) {
  constexpr double kMinMacs = 1 << 20;    // ~5 us on one core: below, threads cost more
  const int threads = pool ? pool->num_threads() : 1;
  const double macs = static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k);
  if (threads <= 1 || macs < 2 * kMinMacs || g.m <= 0 || g.n <= 0 || g.k <= 0) {
    gemm_impl<T>(isa, g);
    return;
  }
  const bool split_n = g.n >= g.m;
  const int64_t len = split_n ? g.n : g.m;
  // Whole register tiles: NR is at most 64 columns, MR is 6 or 24 rows.
  const int64_t tile = split_n ? 64 : 48;
  // A remainder of one row or column joins the last unit: alone it would be a matrix-vector
  // product (gemv), which sums in another order than the whole product's tiles.
  int64_t units = (len + tile - 1) / tile;
  if (units > 1 && len % tile == 1) --units;
  // Each chunk gets at least kMinMacs of work.
  const int64_t unit_macs = static_cast<int64_t>(macs / static_cast<double>(units)) + 1;
  const int64_t grain = std::max<int64_t>(1, static_cast<int64_t>(kMinMacs) / unit_macs);
  pool->parallel_for(units, grain, [&](int64_t u0, int64_t u1) {
    const int64_t begin = u0 * tile, end = u1 >= units ? len : u1 * tile;
    GemmArgs<T> part = g;
    if (split_n) {
      part.n = end - begin;
      part.b = g.trans_b ? g.b + begin * g.ldb : g.b + begin;
      part.c = g.c + begin;
      part.col0 = g.col0 + begin;
    } else {
      part.m = end - begin;
      part.a = g.trans_a ? g.a + begin : g.a + begin * g.lda;
      part.c = g.c + begin * g.ldc;
      part.row0 = g.row0 + begin;
    }
    gemm_impl<T>(isa, part);
  });
}

}  // namespace

namespace detail {

bool gemm_isa_supported(GemmIsa isa) {
#if SPIRE_GEMM_HAVE_X86
  switch (isa) {
    case GemmIsa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("fma");
    case GemmIsa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    default:
      return true;
  }
#else
  return isa == GemmIsa::kGeneric;
#endif
}

int64_t l2_cache_bytes() {
  static const int64_t bytes = [] {
    long l2 = 0;
#if defined(_SC_LEVEL2_CACHE_SIZE)
    l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);  // glibc: 0 or -1 when unknown
#endif
    return static_cast<int64_t>(l2 > 0 ? l2 : 0);
  }();
  return bytes;
}

GemmDepth gemm_best_depth() {
  return l2_cache_bytes() >= (int64_t{2} << 20) ? GemmDepth::kDeep : GemmDepth::kShallow;
}

GemmIsa gemm_best_isa() {
  static const GemmIsa best = [] {
    for (GemmIsa isa : {GemmIsa::kAvx512, GemmIsa::kAvx2})
      if (gemm_isa_supported(isa)) return isa;
    return GemmIsa::kGeneric;
  }();
  return best;
}

void gemm_with_isa(GemmIsa isa, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                   float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                   float beta, float* c, int64_t ldc) {
  gemm_impl<float>(isa, {trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc});
}

void gemm_with_isa(GemmIsa isa, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                   float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                   float beta, float* c, int64_t ldc, GemmDepth depth, ThreadPool* pool) {
  GemmArgs<float> g{trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc};
  g.deep = depth == GemmDepth::kDeep;
  gemm_parallel<float>(isa, g, pool);
}

void gemm_with_isa(GemmIsa isa, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                   double alpha, const double* a, int64_t lda, const double* b, int64_t ldb,
                   double beta, double* c, int64_t ldc) {
  gemm_impl<double>(isa, {trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc});
}

}  // namespace detail

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  detail::gemm_with_isa(detail::gemm_best_isa(), trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb,
                        beta, c, ldc);
}

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
          const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
          int64_t ldc) {
  detail::gemm_with_isa(detail::gemm_best_isa(), trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb,
                        beta, c, ldc);
}

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
          ThreadPool* pool) {
  gemm_parallel<float>(detail::gemm_best_isa(),
                       {trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc}, pool);
}

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
          const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
          int64_t ldc, ThreadPool* pool) {
  gemm_parallel<double>(detail::gemm_best_isa(),
                        {trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc}, pool);
}

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
          ThreadPool* pool, const GemmEpilogue& epilogue) {
  GemmArgs<float> g{trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc};
  g.epilogue = epilogue ? &epilogue : nullptr;
  gemm_parallel<float>(detail::gemm_best_isa(), g, pool);
}

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
          const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
          int64_t ldc, ThreadPool* pool, const GemmEpilogue& epilogue) {
  GemmArgs<double> g{trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc};
  g.epilogue = epilogue ? &epilogue : nullptr;
  gemm_parallel<double>(detail::gemm_best_isa(), g, pool);
}

}  // namespace spire::cpu
