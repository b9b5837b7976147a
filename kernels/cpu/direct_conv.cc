// Implementation of kernels/cpu/direct_conv.h.
//
// Forward: per output row and block of 1 or 2 vectors of output channels, tiles of MR
// consecutive output pixels keep MR x NV accumulators in registers; per (tap, channel) one
// vector load per NV from the filter (HWIO rows are contiguous over o) feeds MR broadcasts
// of the padded strip. Filter gradient: per filter row and block of output channels, tiles of
// MC (tap, input channel) pairs of that row, consecutive in the strip and in dw, accumulate
// over every pixel of a band of rows (dy vectors times broadcast input values). Tiles never
// cross an output row, so the strip needs no junk columns.
#include "kernels/cpu/direct_conv.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu/scratch_buffer.h"

namespace spire::cpu {
namespace {

using detail::GemmIsa;

#define SPIRE_DC_INLINE inline __attribute__((always_inline))
#if defined(__x86_64__) || defined(__i386__)
#define SPIRE_DC_HAVE_X86 1
#define SPIRE_DC_AVX512 __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,fma")))
#define SPIRE_DC_AVX2 __attribute__((target("avx2,fma")))
#else
#define SPIRE_DC_HAVE_X86 0
#endif

template <class T, int W>
struct VecOf {
  typedef T type __attribute__((vector_size(W * sizeof(T))));
};

// Padded input rows per band are bounded so a band's strip (128 KiB of f32, 256 KiB of f64;
// more only when one band of a single output row needs it) stays in the core's L2 cache
// while every tap reads it.
constexpr int64_t kStripElements = int64_t{1} << 15;
// The filter rows (kh * kw * c) a tile streams per output: above this the im2col GEMM, which
// blocks over k, is the better lowering.
constexpr int64_t kMaxDepth = 1024;

/// The per-thread strip of padded input rows (kernels/cpu/scratch_buffer.h).
thread_local ScratchBuffer tl_strip;

/// Copies rows [r0, r1) of image xi padded as the shape says (padded row r is input row
/// r - pt, padded column q is input column q - pl, zero outside) into p: wp columns a row.
template <class T>
void pad_rows(const DirectConvShape& s, const T* xi, int64_t r0, int64_t r1, int64_t wp, T* p) {
  const int64_t c = s.c;
  const int64_t lo = std::clamp<int64_t>(s.pl, 0, wp);
  const int64_t hi = std::clamp<int64_t>(s.pl + s.w, lo, wp);
  for (int64_t r = r0; r < r1; ++r) {
    T* dst = p + (r - r0) * wp * c;
    const int64_t iy = r - s.pt;
    if (iy < 0 || iy >= s.h) {
      std::fill(dst, dst + wp * c, T(0));
      continue;
    }
    std::fill(dst, dst + lo * c, T(0));
    if (hi > lo)
      std::memcpy(dst + lo * c, xi + (iy * s.w + lo - s.pl) * c,
                  static_cast<size_t>((hi - lo) * c) * sizeof(T));
    std::fill(dst + hi * c, dst + wp * c, T(0));
  }
}

/// pad_rows with each row stored channel-major (column q of channel ch at ch * wp + q): the
/// forward kernel's layout, where the MR pixels of one tap and channel are adjacent, so the
/// tile's broadcasts are constant offsets from one pointer.
template <class T>
void pad_rows_channel_major(const DirectConvShape& s, const T* xi, int64_t r0, int64_t r1,
                            int64_t wp, T* p) {
  const int64_t c = s.c;
  const int64_t lo = std::clamp<int64_t>(s.pl, 0, wp);
  const int64_t hi = std::clamp<int64_t>(s.pl + s.w, lo, wp);
  for (int64_t r = r0; r < r1; ++r) {
    T* dst = p + (r - r0) * wp * c;
    const int64_t iy = r - s.pt;
    if (iy < 0 || iy >= s.h) {
      std::fill(dst, dst + wp * c, T(0));
      continue;
    }
    const T* src = xi + iy * s.w * c;  // column q of channel ch: src[(q - pl) * c + ch]
    for (int64_t ch = 0; ch < c; ++ch) {
      T* d = dst + ch * wp;
      std::fill(d, d + lo, T(0));
      for (int64_t q = lo; q < hi; ++q) d[q] = src[(q - s.pl) * c + ch];
      std::fill(d + hi, d + wp, T(0));
    }
  }
}

/// y[i, 0:NV*W] (row stride ldy) = the MR output pixels starting at strip position a (tap
/// (0, 0), channel 0; strip rows prow apart) times the filter block b (rows of ldb, ordered
/// (ky, kx, c)). CS > 0: the strip is NHWC with CS (== c) channels, a compile-time pixel
/// stride; CS == 0: the strip is channel-major (pixels adjacent, channels wp apart). Either
/// way the MR broadcasts of one (tap, channel) are constant offsets from one pointer.
template <class T, int W, int MR, int NV, int CS>
SPIRE_DC_INLINE void fwd_tile(const T* __restrict a, int64_t c, int64_t kh, int64_t kw,
                              int64_t prow, int64_t wp, const T* __restrict b, int64_t ldb,
                              T* __restrict y, int64_t ldy) {
  using V = typename VecOf<T, W>::type;
  V acc[MR][NV];
#pragma GCC unroll 32
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = V{};
  for (int64_t ky = 0; ky < kh; ++ky)
    for (int64_t kx = 0; kx < kw; ++kx) {
      const T* ap = a + ky * prow + kx * (CS > 0 ? CS : 1);
      const T* bp = b + (ky * kw + kx) * c * ldb;
#pragma GCC unroll 2
      for (int64_t ch = 0; ch < c; ++ch) {
        V bv[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) std::memcpy(&bv[v], bp + ch * ldb + v * W, sizeof(V));
        const T* ac = CS > 0 ? ap + ch : ap + ch * wp;
#pragma GCC unroll 32
        for (int i = 0; i < MR; ++i) {
          const T ai = ac[i * (CS > 0 ? CS : 1)];
#pragma GCC unroll 4
          for (int v = 0; v < NV; ++v) acc[i][v] += bv[v] * ai;
        }
      }
    }
#pragma GCC unroll 32
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) std::memcpy(y + i * ldy + v * W, &acc[i][v], sizeof(V));
}

/// fwd_tile for a tile of mr pixels, 1 <= mr <= MR, chosen at run time.
template <class T, int W, int NV, int CS, int MR>
SPIRE_DC_INLINE void fwd_tile_of(int64_t mr, const T* a, int64_t c, int64_t kh, int64_t kw,
                                 int64_t prow, int64_t wp, const T* b, int64_t ldb, T* y,
                                 int64_t ldy) {
  if (mr == MR) return fwd_tile<T, W, MR, NV, CS>(a, c, kh, kw, prow, wp, b, ldb, y, ldy);
  if constexpr (MR > 1)
    fwd_tile_of<T, W, NV, CS, MR - 1>(mr, a, c, kh, kw, prow, wp, b, ldb, y, ldy);
}

/// One output row as ceil(ow / MR) tiles whose widths differ by at most one pixel: 14 pixels
/// are one 14-pixel tile, 7 one 7-pixel tile, rather than 12 + 2 or 4 + 2 + 1, whose narrow
/// tails hold too few accumulators to hide the FMA latency. (Every output sums its taps and
/// channels in the same order whatever tile it falls in.)
template <class T, int W, int NV, int CS, int MR>
SPIRE_DC_INLINE void fwd_row(const T* a, int64_t c, int64_t kh, int64_t kw, int64_t prow,
                             int64_t wp, const T* b, int64_t ldb, T* y, int64_t ldy, int64_t ow) {
  const int64_t tiles = (ow + MR - 1) / MR, base = ow / tiles, wider = ow % tiles;
  for (int64_t t = 0, ox = 0; t < tiles; ++t) {
    const int64_t mr = base + (t < wider ? 1 : 0);
    fwd_tile_of<T, W, NV, CS, MR>(mr, a + ox * (CS > 0 ? CS : 1), c, kh, kw, prow, wp, b, ldb,
                                  y + ox * ldy, ldy);
    ox += mr;
  }
}

/// dw[i, 0:NV*W] (row stride ldw) += sum over rows r < nrows and pixels p < npix of
/// a[r * prow + p * c + i] * dy[r * dyrow + p * ldo + (0:NV*W)], for MC channels i.
template <class T, int W, int MC, int NV>
SPIRE_DC_INLINE void dw_tile(const T* __restrict a, int64_t c, int64_t prow, const T* __restrict dy,
                             int64_t ldo, int64_t dyrow, int64_t nrows, int64_t npix,
                             T* __restrict dw, int64_t ldw) {
  using V = typename VecOf<T, W>::type;
  V acc[MC][NV];
#pragma GCC unroll 32
  for (int i = 0; i < MC; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) std::memcpy(&acc[i][v], dw + i * ldw + v * W, sizeof(V));
  for (int64_t r = 0; r < nrows; ++r) {
    const T* ar = a + r * prow;
    const T* dr = dy + r * dyrow;
#pragma GCC unroll 2
    for (int64_t p = 0; p < npix; ++p) {
      V dv[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) std::memcpy(&dv[v], dr + p * ldo + v * W, sizeof(V));
#pragma GCC unroll 32
      for (int i = 0; i < MC; ++i) {
        const T ai = ar[p * c + i];
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[i][v] += dv[v] * ai;
      }
    }
  }
#pragma GCC unroll 32
  for (int i = 0; i < MC; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) std::memcpy(dw + i * ldw + v * W, &acc[i][v], sizeof(V));
}

/// dw_tile for a tile of mc channels, 1 <= mc <= MC, chosen at run time.
template <class T, int W, int NV, int MC>
SPIRE_DC_INLINE void dw_tile_of(int64_t mc, const T* a, int64_t c, int64_t prow, const T* dy,
                                int64_t ldo, int64_t dyrow, int64_t nrows, int64_t npix, T* dw,
                                int64_t ldw) {
  if (mc == MC) return dw_tile<T, W, MC, NV>(a, c, prow, dy, ldo, dyrow, nrows, npix, dw, ldw);
  if constexpr (MC > 1)
    dw_tile_of<T, W, NV, MC - 1>(mc, a, c, prow, dy, ldo, dyrow, nrows, npix, dw, ldw);
}

/// `channels` consecutive strip values per pixel (pixel stride c) into as many rows of dw, as
/// ceil(channels / MC) tiles whose heights differ by at most one.
template <class T, int W, int NV, int MC>
SPIRE_DC_INLINE void dw_channels(const T* a, int64_t c, int64_t channels, int64_t prow,
                                 const T* dy, int64_t ldo, int64_t dyrow, int64_t nrows,
                                 int64_t npix, T* dw, int64_t ldw) {
  const int64_t tiles = (channels + MC - 1) / MC, base = channels / tiles;
  const int64_t taller = channels % tiles;
  for (int64_t t = 0, ci = 0; t < tiles; ++t) {
    const int64_t mc = base + (t < taller ? 1 : 0);
    dw_tile_of<T, W, NV, MC>(mc, a + ci, c, prow, dy, ldo, dyrow, nrows, npix, dw + ci * ldw, ldw);
    ci += mc;
  }
}

// ---- Instruction-set variants: the row and channel loops compiled per ISA ------------------
// Tiles: NV = 1 or 2 vectors of outputs. Rows (forward) and channel runs (filter gradient)
// split evenly into tiles of at most R1 (NV = 1) or R2 (NV = 2) pixels or channels. AVX-512
// (32 registers): 16 x 1 (16 accumulators) and 14 x 2 (28 accumulators, 2 vectors of the
// other operand and a broadcast: 31 registers). AVX2 (16 registers): 12 x 1 and 6 x 2.

#define SPIRE_DC_VARIANT(NAME, TARGET, LANES_BYTES, R1, R2)                                   \
  template <class T>                                                                          \
  struct NAME {                                                                               \
    static constexpr int W = LANES_BYTES / sizeof(T);                                         \
    template <int CS>                                                                         \
    TARGET __attribute__((noinline)) static void row1(const T* a, int64_t c, int64_t kh,      \
                                                      int64_t kw, int64_t prow, const T* b,   \
                                                      int64_t ldb, T* y, int64_t ldy,         \
                                                      int64_t ow) {                           \
      fwd_row<T, W, 1, CS, R1>(a, c, kh, kw, prow, prow / c, b, ldb, y, ldy, ow);             \
    }                                                                                         \
    template <int CS>                                                                         \
    TARGET __attribute__((noinline)) static void row2(const T* a, int64_t c, int64_t kh,      \
                                                      int64_t kw, int64_t prow, const T* b,   \
                                                      int64_t ldb, T* y, int64_t ldy,         \
                                                      int64_t ow) {                           \
      fwd_row<T, W, 2, CS, R2>(a, c, kh, kw, prow, prow / c, b, ldb, y, ldy, ow);             \
    }                                                                                         \
    TARGET __attribute__((noinline)) static void dw1(                                        \
        const T* a, int64_t c, int64_t channels, int64_t prow, const T* dy, int64_t ldo,      \
        int64_t dyrow, int64_t nrows, int64_t npix, T* dw, int64_t ldw) {                     \
      dw_channels<T, W, 1, R1>(a, c, channels, prow, dy, ldo, dyrow, nrows, npix, dw, ldw);   \
    }                                                                                         \
    TARGET __attribute__((noinline)) static void dw2(                                        \
        const T* a, int64_t c, int64_t channels, int64_t prow, const T* dy, int64_t ldo,      \
        int64_t dyrow, int64_t nrows, int64_t npix, T* dw, int64_t ldw) {                     \
      dw_channels<T, W, 2, R2>(a, c, channels, prow, dy, ldo, dyrow, nrows, npix, dw, ldw);   \
    }                                                                                         \
  };

#if SPIRE_DC_HAVE_X86
SPIRE_DC_VARIANT(Avx512Dc, SPIRE_DC_AVX512, 64, 16, 14)
SPIRE_DC_VARIANT(Avx2Dc, SPIRE_DC_AVX2, 32, 12, 6)
#endif

/// Calls fn(img, oy0, oy1, strip) for each band of output rows among rows [u0, u1) of the
/// flattened [n * oh] output, with the band's padded input rows copied to the thread's strip
/// (channel-major rows when `channel_major`).
template <class T, class F>
void for_bands(const DirectConvShape& s, const T* x, int64_t u0, int64_t u1, bool channel_major,
               F&& fn) {
  const int64_t wp = s.ow + s.kw - 1, prow = wp * s.c;
  const int64_t band = std::clamp<int64_t>(kStripElements / prow - (s.kh - 1), 1, s.oh);
  for (int64_t u = u0; u < u1;) {
    const int64_t img = u / s.oh, oy0 = u % s.oh;
    const int64_t oy1 = std::min({s.oh, oy0 + band, oy0 + (u1 - u)});
    T* strip = tl_strip.get<T>((oy1 - oy0 + s.kh - 1) * prow);
    if (channel_major)
      pad_rows_channel_major(s, x + img * s.h * s.w * s.c, oy0, oy1 + s.kh - 1, wp, strip);
    else
      pad_rows(s, x + img * s.h * s.w * s.c, oy0, oy1 + s.kh - 1, wp, strip);
    fn(img, oy0, oy1, static_cast<const T*>(strip));
    u += oy1 - oy0;
  }
}

/// Multiply-adds of one output row: the unit of work split across threads.
int64_t row_macs(const DirectConvShape& s) {
  return std::max<int64_t>(1, s.ow * s.o * s.kh * s.kw * s.c);
}

/// forward with the strip layout of CS (see fwd_tile): NHWC when the channel count is CS.
template <class T, template <class> class Isa, int CS>
void forward_layout(const DirectConvShape& s, const T* x, const T* w, T* y, ThreadPool* pool,
                    const GemmEpilogue& epilogue) {
  constexpr int W = Isa<T>::W;
  const int64_t prow = (s.ow + s.kw - 1) * s.c;
  auto rows = [&](int64_t u0, int64_t u1) {
    for_bands<T>(s, x, u0, u1, CS == 0, [&](int64_t img, int64_t oy0, int64_t oy1, const T* strip) {
      for (int64_t oy = oy0; oy < oy1; ++oy) {
        const T* a = strip + (oy - oy0) * prow;
        T* yrow = y + (img * s.oh + oy) * s.ow * s.o;
        for (int64_t o0 = 0; o0 < s.o; o0 += 2 * W) {
          if (s.o - o0 >= 2 * W)
            Isa<T>::template row2<CS>(a, s.c, s.kh, s.kw, prow, w + o0, s.o, yrow + o0, s.o, s.ow);
          else
            Isa<T>::template row1<CS>(a, s.c, s.kh, s.kw, prow, w + o0, s.o, yrow + o0, s.o, s.ow);
        }
      }
      if (epilogue) epilogue((img * s.oh + oy0) * s.ow, (img * s.oh + oy1) * s.ow, 0, s.o);
    });
  };
  const int64_t units = s.n * s.oh;
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 18) / row_macs(s));
  if (pool == nullptr || pool->num_threads() <= 1 || units <= grain) {
    rows(0, units);
    return;
  }
  pool->parallel_for(units, grain, ThreadPool::RangeFn(rows));
}

/// The forward pass: the NHWC strip (a plain copy) for the common channel counts 16, 32 and
/// 64, whose pixel stride the tiles take as a constant; the channel-major strip otherwise.
template <class T, template <class> class Isa>
void forward(const DirectConvShape& s, const T* x, const T* w, T* y, ThreadPool* pool,
             const GemmEpilogue& epilogue) {
  if (s.n <= 0 || s.oh <= 0 || s.ow <= 0 || s.o <= 0) return;
  switch (s.c) {
    case 16:
      return forward_layout<T, Isa, 16>(s, x, w, y, pool, epilogue);
    case 32:
      return forward_layout<T, Isa, 32>(s, x, w, y, pool, epilogue);
    case 64:
      return forward_layout<T, Isa, 64>(s, x, w, y, pool, epilogue);
    default:
      return forward_layout<T, Isa, 0>(s, x, w, y, pool, epilogue);
  }
}

template <class T, template <class> class Isa>
void filter_grad(const DirectConvShape& s, const T* x, const T* dy, T* dw, ThreadPool* pool) {
  constexpr int W = Isa<T>::W;
  const int64_t prow = (s.ow + s.kw - 1) * s.c, size = s.kh * s.kw * s.c * s.o;
  const int64_t units = s.n * s.oh;
  if (size <= 0) return;
  if (units <= 0 || s.ow <= 0) {
    std::fill(dw, dw + size, T(0));
    return;
  }
  // Rows [u0, u1) of the batch added into out.
  auto rows = [&](int64_t u0, int64_t u1, T* out) {
    for_bands<T>(s, x, u0, u1, false, [&](int64_t img, int64_t oy0, int64_t oy1, const T* strip) {
      const T* dyb = dy + (img * s.oh + oy0) * s.ow * s.o;
      // Per filter row ky, its kw taps of c channels are kw * c consecutive strip values per
      // pixel and kw * c consecutive rows of dw: one run of channels (MNIST's first layer,
      // c = 1, gets tiles of 3 rather than 1).
      const int64_t run = s.kw * s.c;
      for (int64_t ky = 0; ky < s.kh; ++ky) {
        const T* a = strip + ky * prow;
        T* taps = out + ky * run * s.o;
        for (int64_t o0 = 0; o0 < s.o; o0 += 2 * W) {
          if (s.o - o0 >= 2 * W)
            Isa<T>::dw2(a, s.c, run, prow, dyb + o0, s.o, s.ow * s.o, oy1 - oy0, s.ow, taps + o0,
                        s.o);
          else
            Isa<T>::dw1(a, s.c, run, prow, dyb + o0, s.o, s.ow * s.o, oy1 - oy0, s.ow, taps + o0,
                        s.o);
        }
      }
    });
  };
  std::fill(dw, dw + size, T(0));
  const int64_t threads = pool ? pool->num_threads() : 1;
  const int64_t parts = units * row_macs(s) < (int64_t{1} << 20) ? 1 : std::min(threads, units);
  if (parts <= 1) {
    rows(0, units, dw);
    return;
  }
  // One partial gradient per share of the rows (share 0 writes dw), summed in share order.
  std::vector<T> partials(static_cast<size_t>((parts - 1) * size));
  pool->parallel_for(parts, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p)
      rows(ThreadPool::chunk_begin(units, parts, p), ThreadPool::chunk_begin(units, parts, p + 1),
           p == 0 ? dw : partials.data() + (p - 1) * size);
  });
  pool->parallel_for(size, 1 << 14, [&](int64_t i0, int64_t i1) {
    for (int64_t p = 1; p < parts; ++p) {
      const T* src = partials.data() + (p - 1) * size;
      for (int64_t i = i0; i < i1; ++i) dw[i] += src[i];
    }
  });
}

[[noreturn]] void no_variant() {
  throw_error(
      "direct convolution: no AVX2 or AVX-512 variant on this CPU (check direct_conv_applies "
      "first)");
}

template <class T>
void forward_isa(GemmIsa isa, const DirectConvShape& s, const T* x, const T* w, T* y,
                 ThreadPool* pool, const GemmEpilogue& epilogue) {
#if SPIRE_DC_HAVE_X86
  if (isa == GemmIsa::kAvx512 && detail::gemm_isa_supported(isa))
    return forward<T, Avx512Dc>(s, x, w, y, pool, epilogue);
  if (isa == GemmIsa::kAvx2 && detail::gemm_isa_supported(isa))
    return forward<T, Avx2Dc>(s, x, w, y, pool, epilogue);
#endif
  (void)s, (void)x, (void)w, (void)y, (void)pool, (void)epilogue;
  no_variant();
}

template <class T>
void filter_grad_isa(GemmIsa isa, const DirectConvShape& s, const T* x, const T* dy, T* dw,
                     ThreadPool* pool) {
#if SPIRE_DC_HAVE_X86
  if (isa == GemmIsa::kAvx512 && detail::gemm_isa_supported(isa))
    return filter_grad<T, Avx512Dc>(s, x, dy, dw, pool);
  if (isa == GemmIsa::kAvx2 && detail::gemm_isa_supported(isa))
    return filter_grad<T, Avx2Dc>(s, x, dy, dw, pool);
#endif
  (void)s, (void)x, (void)dy, (void)dw, (void)pool;
  no_variant();
}

}  // namespace

namespace detail {

template <class T>
int direct_conv_lanes(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::kAvx512:
      return static_cast<int>(64 / sizeof(T));
    case GemmIsa::kAvx2:
      return static_cast<int>(32 / sizeof(T));
    default:
      return 0;
  }
}
template int direct_conv_lanes<float>(GemmIsa);
template int direct_conv_lanes<double>(GemmIsa);

void direct_conv2d_with_isa(GemmIsa isa, const DirectConvShape& s, const float* x, const float* w,
                            float* y, ThreadPool* pool) {
  forward_isa(isa, s, x, w, y, pool, {});
}
void direct_conv2d_with_isa(GemmIsa isa, const DirectConvShape& s, const double* x, const double* w,
                            double* y, ThreadPool* pool) {
  forward_isa(isa, s, x, w, y, pool, {});
}
void direct_conv2d_filter_grad_with_isa(GemmIsa isa, const DirectConvShape& s, const float* x,
                                        const float* dy, float* dw, ThreadPool* pool) {
  filter_grad_isa(isa, s, x, dy, dw, pool);
}
void direct_conv2d_filter_grad_with_isa(GemmIsa isa, const DirectConvShape& s, const double* x,
                                        const double* dy, double* dw, ThreadPool* pool) {
  filter_grad_isa(isa, s, x, dy, dw, pool);
}

}  // namespace detail

namespace {
// SPIRE_CPU_DIRECT_CONV=0 in the environment sends every convolution to im2col (for A/B
// measurements); read once, overridable by detail::set_direct_conv_enabled.
std::atomic<bool>& direct_conv_switch() {
  static std::atomic<bool> enabled{[] {
    const char* v = std::getenv("SPIRE_CPU_DIRECT_CONV");
    return v == nullptr || std::string(v) != "0";
  }()};
  return enabled;
}
bool direct_conv_enabled() { return direct_conv_switch().load(std::memory_order_relaxed); }
}  // namespace

namespace detail {
bool set_direct_conv_enabled(bool enabled) { return direct_conv_switch().exchange(enabled); }
}  // namespace detail

template <class T>
bool direct_conv_applies(const DirectConvShape& s) {
  const int lanes = detail::direct_conv_lanes<T>(detail::gemm_best_isa());
  return direct_conv_enabled() && lanes > 0 && s.n > 0 && s.oh > 0 && s.ow > 0 && s.o > 0 &&
         s.o % lanes == 0 && s.c >= 1 && s.kh * s.kw * s.c <= kMaxDepth;
}
template bool direct_conv_applies<float>(const DirectConvShape&);
template bool direct_conv_applies<double>(const DirectConvShape&);

void direct_conv2d(const DirectConvShape& s, const float* x, const float* w, float* y,
                   ThreadPool* pool, const GemmEpilogue& epilogue) {
  forward_isa(detail::gemm_best_isa(), s, x, w, y, pool, epilogue);
}
void direct_conv2d(const DirectConvShape& s, const double* x, const double* w, double* y,
                   ThreadPool* pool, const GemmEpilogue& epilogue) {
  forward_isa(detail::gemm_best_isa(), s, x, w, y, pool, epilogue);
}
void direct_conv2d_filter_grad(const DirectConvShape& s, const float* x, const float* dy, float* dw,
                               ThreadPool* pool) {
  filter_grad_isa(detail::gemm_best_isa(), s, x, dy, dw, pool);
}
void direct_conv2d_filter_grad(const DirectConvShape& s, const double* x, const double* dy,
                               double* dw, ThreadPool* pool) {
  filter_grad_isa(detail::gemm_best_isa(), s, x, dy, dw, pool);
}

}  // namespace spire::cpu
