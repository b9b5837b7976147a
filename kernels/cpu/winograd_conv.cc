// Winograd F(2x2, 3x3) convolution (kernels/cpu/winograd_conv.h).
//
// With B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1]
// and A^T = [1 1 1 0; 0 1 -1 -1] (the cross-correlation form), for each block of tiles:
//   V[xi][p][c] = (B^T d_p B)[xi]  for the 4x4 input patch d_p of tile p, channel c
//   M[xi]       = V[xi] x U[xi]    ([tiles x C] x [C x O], U[xi][c][o] = (G g_co G^T)[xi])
//   y block of p = A^T M_p A       (2x2 outputs, clipped at the bottom and right edges)
// Every loop's innermost dimension is the channel (NHWC), so the transforms vectorize.
#include "kernels/cpu/winograd_conv.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/gemm.h"

namespace spire::cpu {
namespace {

// U[xi][c][o] = (G g G^T)[xi] of the 3x3 filter of channel pair (c, o).
template <typename T>
std::vector<T> transform_filter(const DirectConvShape& s, const T* w) {
  const int64_t C = s.c, O = s.o, CO = C * O;
  std::vector<T> u(static_cast<size_t>(16 * CO));
  const T h = T(0.5);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t o = 0; o < O; ++o) {
      T g[3][3], t[4][3];
      for (int ky = 0; ky < 3; ++ky)
        for (int kx = 0; kx < 3; ++kx) g[ky][kx] = w[(ky * 3 + kx) * CO + c * O + o];
      for (int j = 0; j < 3; ++j) {  // t = G g
        t[0][j] = g[0][j];
        t[1][j] = h * (g[0][j] + g[1][j] + g[2][j]);
        t[2][j] = h * (g[0][j] - g[1][j] + g[2][j]);
        t[3][j] = g[2][j];
      }
      for (int i = 0; i < 4; ++i) {  // U = t G^T
        T* dst = u.data() + i * 4 * CO + c * O + o;
        dst[0 * CO] = t[i][0];
        dst[1 * CO] = h * (t[i][0] + t[i][1] + t[i][2]);
        dst[2 * CO] = h * (t[i][0] - t[i][1] + t[i][2]);
        dst[3 * CO] = t[i][2];
      }
    }
  return u;
}

// A 32-byte vector of T (GCC/Clang vector extensions: one AVX2 register, two SSE ones),
// and element-or-vector loads and stores, so each transform is written once for both.
template <class T>
struct Vec32 {
  typedef T type __attribute__((vector_size(32)));
};
#define SPIRE_WINOGRAD_INLINE inline __attribute__((always_inline))
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"  // the vectors never cross a call: everything inlines
template <class E, class T>
SPIRE_WINOGRAD_INLINE E load(const T* p) {
  E e;
  std::memcpy(&e, p, sizeof e);
  return e;
}
template <class E, class T>
SPIRE_WINOGRAD_INLINE void store(T* p, E e) {
  std::memcpy(p, &e, sizeof e);
}

// V[xi] at channel c (E: one channel or a vector of them) = (B^T d B)[xi] of the 4x4 patch
// whose pixel (i, j) is d[i * 4 + j] (C channels).
template <class E, class T>
SPIRE_WINOGRAD_INLINE void input_at(const T* const* d, T* __restrict v, int64_t stride, int64_t c) {
  E t[4][4];
  for (int j = 0; j < 4; ++j) {  // t = B^T d
    const E d0 = load<E>(d[0 * 4 + j] + c), d1 = load<E>(d[1 * 4 + j] + c);
    const E d2 = load<E>(d[2 * 4 + j] + c), d3 = load<E>(d[3 * 4 + j] + c);
    t[0][j] = d0 - d2;
    t[1][j] = d1 + d2;
    t[2][j] = d2 - d1;
    t[3][j] = d1 - d3;
  }
  for (int i = 0; i < 4; ++i) {  // V = t B
    store(v + (i * 4 + 0) * stride + c, t[i][0] - t[i][2]);
    store(v + (i * 4 + 1) * stride + c, t[i][1] + t[i][2]);
    store(v + (i * 4 + 2) * stride + c, t[i][2] - t[i][1]);
    store(v + (i * 4 + 3) * stride + c, t[i][1] - t[i][3]);
  }
}

// The tile's 2x2 outputs at channel o = A^T M A from M[xi] (xi-stride `stride`), into output
// rows y[0] and y[1] (2 pixels of O channels, contiguous).
template <class E, class T>
SPIRE_WINOGRAD_INLINE void output_at(const T* __restrict m, int64_t O, int64_t stride, T* const* y, int64_t o) {
  E t[2][4];
  for (int k = 0; k < 4; ++k) {  // t = A^T M
    const E m0 = load<E>(m + (0 * 4 + k) * stride + o), m1 = load<E>(m + (1 * 4 + k) * stride + o);
    const E m2 = load<E>(m + (2 * 4 + k) * stride + o), m3 = load<E>(m + (3 * 4 + k) * stride + o);
    t[0][k] = m0 + m1 + m2;
    t[1][k] = m1 - m2 - m3;
  }
  for (int r = 0; r < 2; ++r) {  // y = t A
    store(y[r] + o, t[r][0] + t[r][1] + t[r][2]);
    store(y[r] + O + o, t[r][1] - t[r][2] - t[r][3]);
  }
}

// The transforms over all channels.
template <typename T>
SPIRE_WINOGRAD_INLINE void transform_input_body(const T* const* d, int64_t C, T* __restrict v, int64_t stride) {
  using V = typename Vec32<T>::type;
  constexpr int64_t kLanes = 32 / sizeof(T);
  int64_t c = 0;
  for (; c + kLanes <= C; c += kLanes) input_at<V>(d, v, stride, c);
  for (; c < C; ++c) input_at<T>(d, v, stride, c);
}

template <typename T>
SPIRE_WINOGRAD_INLINE void transform_output_body(const T* __restrict m, int64_t O, int64_t stride, T* const* y) {
  using V = typename Vec32<T>::type;
  constexpr int64_t kLanes = 32 / sizeof(T);
  int64_t o = 0;
  for (; o + kLanes <= O; o += kLanes) output_at<V>(m, O, stride, y, o);
  for (; o < O; ++o) output_at<T>(m, O, stride, y, o);
}

// Each compiled for the baseline and, on x86-64, for AVX2, picked once at run time (as
// kernels/cpu/gemm.cc does; not GCC's target_clones, whose ifunc resolvers run before a
// sanitizer's runtime is up).
template <typename T>
__attribute__((noinline)) void transform_input_generic(const T* const* d, int64_t C, T* v, int64_t stride) {
  transform_input_body(d, C, v, stride);
}
template <typename T>
__attribute__((noinline)) void transform_output_generic(const T* m, int64_t O, int64_t stride, T* const* y) {
  transform_output_body(m, O, stride, y);
}
#if defined(__x86_64__) && defined(__GNUC__)
#define SPIRE_WINOGRAD_HAVE_AVX2 1
template <typename T>
__attribute__((noinline, target("avx2"))) void transform_input_avx2(const T* const* d, int64_t C, T* v,
                                                                  int64_t stride) {
  transform_input_body(d, C, v, stride);
}
template <typename T>
__attribute__((noinline, target("avx2"))) void transform_output_avx2(const T* m, int64_t O, int64_t stride,
                                                                   T* const* y) {
  transform_output_body(m, O, stride, y);
}
#else
#define SPIRE_WINOGRAD_HAVE_AVX2 0
#endif

bool use_avx2() {
#if SPIRE_WINOGRAD_HAVE_AVX2
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2;
#else
  return false;
#endif
}

template <typename T>
void transform_input(const T* const* d, int64_t C, T* v, int64_t stride) {
#if SPIRE_WINOGRAD_HAVE_AVX2
  if (use_avx2()) return transform_input_avx2(d, C, v, stride);
#endif
  transform_input_generic(d, C, v, stride);
}

template <typename T>
void transform_output(const T* m, int64_t O, int64_t stride, T* const* y) {
#if SPIRE_WINOGRAD_HAVE_AVX2
  if (use_avx2()) return transform_output_avx2(m, O, stride, y);
#endif
  transform_output_generic(m, O, stride, y);
}
#pragma GCC diagnostic pop

template <typename T>
void winograd(const DirectConvShape& s, const T* x, const T* w, T* y, ThreadPool* pool) {
  const int64_t C = s.c, O = s.o;
  const int64_t th = (s.oh + 1) / 2, tw = (s.ow + 1) / 2, tiles = s.n * th * tw;
  if (tiles == 0) return;
  const std::vector<T> u = transform_filter(s, w);
  // Tiles per block: the block's V and M (16 (C + O) values per tile) within about 192 KiB,
  // in whole 24-row register tiles; fixed by the shape, so the result is too.
  const int64_t per_block = std::max<int64_t>(24, 3072 * 4 / static_cast<int64_t>(sizeof(T)) / (C + O) / 24 * 24);
  const int64_t blocks = (tiles + per_block - 1) / per_block;
  const std::vector<T> zeros(static_cast<size_t>(C), T(0));
  auto run = [&](int64_t b0, int64_t b1) {
    std::vector<T> v(static_cast<size_t>(16 * per_block * C)), m(static_cast<size_t>(16 * per_block * O));
    std::vector<T> out(static_cast<size_t>(4 * O));
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t p0 = b * per_block, np = std::min(per_block, tiles - p0);
      for (int64_t p = 0; p < np; ++p) {
        const int64_t t = p0 + p, img = t / (th * tw), ty = t / tw % th, tx = t % tw;
        // The tile's 4x4 input pixels, read in place (zeros outside the image).
        const int64_t iy0 = 2 * ty - s.pt, ix0 = 2 * tx - s.pl;
        const T* d[16];
        for (int i = 0; i < 4; ++i)
          for (int j = 0; j < 4; ++j) {
            const int64_t iy = iy0 + i, ix = ix0 + j;
            d[i * 4 + j] = iy >= 0 && iy < s.h && ix >= 0 && ix < s.w ? x + ((img * s.h + iy) * s.w + ix) * C
                                                                      : zeros.data();
          }
        transform_input(d, C, v.data() + p * C, per_block * C);
      }
      for (int xi = 0; xi < 16; ++xi)
        gemm(false, false, np, O, C, T(1), v.data() + xi * per_block * C, C, u.data() + xi * C * O, O, T(0),
             m.data() + xi * per_block * O, O);
      for (int64_t p = 0; p < np; ++p) {
        const int64_t t = p0 + p, img = t / (th * tw), ty = t / tw % th, tx = t % tw;
        const int rows = static_cast<int>(std::min<int64_t>(2, s.oh - 2 * ty));
        const int cols = static_cast<int>(std::min<int64_t>(2, s.ow - 2 * tx));
        T* dst = y + ((img * s.oh + 2 * ty) * s.ow + 2 * tx) * O;
        if (rows == 2 && cols == 2) {  // a whole tile: straight into y
          T* const out_rows[2] = {dst, dst + s.ow * O};
          transform_output(m.data() + p * O, O, per_block * O, out_rows);
          continue;
        }
        T* const out_rows[2] = {out.data(), out.data() + 2 * O};
        transform_output(m.data() + p * O, O, per_block * O, out_rows);
        for (int r = 0; r < rows; ++r) std::copy_n(out.data() + r * 2 * O, cols * O, dst + r * s.ow * O);
      }
    }
  };
  if (pool && pool->num_threads() > 1 && blocks > 1) pool->parallel_for(blocks, 1, run);
  else run(0, blocks);
}

}  // namespace

bool winograd_applies(const DirectConvShape& s) { return s.kh == 3 && s.kw == 3 && s.c >= 8 && s.o >= 8; }

void winograd_conv2d(const DirectConvShape& s, const float* x, const float* w, float* y, ThreadPool* pool) {
  winograd(s, x, w, y, pool);
}

void winograd_conv2d(const DirectConvShape& s, const double* x, const double* w, double* y, ThreadPool* pool) {
  winograd(s, x, w, y, pool);
}

}  // namespace spire::cpu
