// Window math of the CUDA pooling kernels (kernels/cuda/pool_kernels.cu): the
// geometry of an NHWC pooling (TF SAME/VALID rules, planned on the host by
// kernels/pool_geometry.h for both devices; the CPU kernels also use
// pool_window) and one SPIRE_HD function per kernel that computes output
// (or input-gradient) element i. Plain C++ with no CUDA includes, so
// tests/kernels/pool_index_test.cc runs the very same functions on the host
// over every element and compares them with the CPU kernels
// (kernels/cpu/pool_kernels.cc), whose semantics they reproduce:
//  - padded positions are skipped: a max never comes from padding, an average
//    divides by the number of valid elements of its window;
//  - the max of a window is its *first* maximum in scan order (rows, then
//    columns): the first valid pixel starts the scan and a later one replaces
//    it only when strictly greater (so a NaN wins only as the first pixel);
//  - MaxPoolGrad routes dy of each window to that first maximum, and
//    AvgPoolGrad spreads dy / count over each window. Both are computed as a
//    gather (one input element sums over the windows that cover it, in
//    ascending window order, the order in which the CPU kernel accumulates),
//    so no atomics are needed and the result is deterministic.
#pragma once

#include <cstdint>

#include "kernels/functors.h"  // SPIRE_HD

namespace spire::kernels {

/// An NHWC pooling: input [n, h, w, c], window kh x kw with strides sh, sw,
/// output [n, oh, ow, c]; window (oy, ox) starts at input row oy * sh - pt and
/// column ox * sw - pl (pt, pl: the padding before, TF's pad_total / 2).
struct PoolGeometry {
  int64_t n = 0, h = 0, w = 0, c = 0;
  int64_t kh = 1, kw = 1, sh = 1, sw = 1;
  int64_t oh = 0, ow = 0, pt = 0, pl = 0;
};

/// Coordinates of a flat NHWC index.
struct NhwcPos {
  int64_t b, y, x, ch;
};

/// Splits flat index i of a row-major [*, h, w, c] tensor.
SPIRE_HD inline NhwcPos unflatten_nhwc(int64_t i, int64_t h, int64_t w, int64_t c) {
  NhwcPos p;
  p.ch = i % c;
  i /= c;
  p.x = i % w;
  i /= w;
  p.y = i % h;
  p.b = i / h;
  return p;
}

/// Valid input rows [*y0, *y1) and columns [*x0, *x1) of output window (oy, ox)
/// (empty ranges when the window lies entirely in the padding).
SPIRE_HD inline void pool_window(const PoolGeometry& g, int64_t oy, int64_t ox, int64_t* y0,
                                 int64_t* y1, int64_t* x0, int64_t* x1) {
  const int64_t ys = oy * g.sh - g.pt, xs = ox * g.sw - g.pl;
  *y0 = ys > 0 ? ys : 0;
  *y1 = ys + g.kh < g.h ? ys + g.kh : g.h;
  *x0 = xs > 0 ? xs : 0;
  *x1 = xs + g.kw < g.w ? xs + g.kw : g.w;
}

/// First index o in [0, n_out) whose window [o * s - p, o * s - p + k) can
/// contain input position i, and one past the last: the windows covering i
/// along one dimension are [*o0, *o1) (possibly empty).
SPIRE_HD inline void pool_covering_1d(int64_t i, int64_t k, int64_t s, int64_t p, int64_t n_out,
                                      int64_t* o0, int64_t* o1) {
  // o * s - p <= i  <=>  o <= (i + p) / s;   i < o * s - p + k  <=>  o >= (i + p - k + 1) / s.
  const int64_t lo_num = i + p - k + 1;
  const int64_t lo = lo_num <= 0 ? 0 : (lo_num + s - 1) / s;
  const int64_t hi = (i + p) / s + 1;  // i + p >= 0 for an input position
  *o0 = lo;
  *o1 = hi < n_out ? hi : n_out;
  if (*o1 < *o0) *o1 = *o0;
}

/// Output windows covering input pixel (iy, ix): rows [*oy0, *oy1), columns [*ox0, *ox1).
SPIRE_HD inline void pool_covering(const PoolGeometry& g, int64_t iy, int64_t ix, int64_t* oy0,
                                   int64_t* oy1, int64_t* ox0, int64_t* ox1) {
  pool_covering_1d(iy, g.kh, g.sh, g.pt, g.oh, oy0, oy1);
  pool_covering_1d(ix, g.kw, g.sw, g.pl, g.ow, ox0, ox1);
}

/// The first maximum of output element i's window (i indexes [n, oh, ow, c]):
/// its spatial index iy * w + ix within the image, or -1 for an empty window.
template <typename T>
SPIRE_HD inline int64_t max_pool_argmax(const PoolGeometry& g, const T* x, int64_t i) {
  const NhwcPos o = unflatten_nhwc(i, g.oh, g.ow, g.c);
  int64_t y0, y1, x0, x1;
  pool_window(g, o.y, o.x, &y0, &y1, &x0, &x1);
  if (y0 >= y1 || x0 >= x1) return -1;
  const T* img = x + o.b * g.h * g.w * g.c + o.ch;
  int64_t best_at = y0 * g.w + x0;
  T best = img[best_at * g.c];
  for (int64_t iy = y0; iy < y1; ++iy) {
    for (int64_t ix = x0; ix < x1; ++ix) {
      const int64_t at = iy * g.w + ix;
      const T v = img[at * g.c];
      if (v > best) {
        best = v;
        best_at = at;
      }
    }
  }
  return best_at;
}

/// MaxPool output element i: the first maximum of its window (0 for an empty window).
template <typename T>
SPIRE_HD inline T max_pool_value(const PoolGeometry& g, const T* x, int64_t i) {
  const int64_t at = max_pool_argmax(g, x, i);
  if (at < 0) return T(0);
  const int64_t b = i / (g.oh * g.ow * g.c), ch = i % g.c;
  return x[(b * g.h * g.w + at) * g.c + ch];
}

/// MaxPoolGrad input-gradient element i (i indexes [n, h, w, c]): the sum of dy
/// over the windows covering it whose first maximum it is. `argmax` holds
/// max_pool_argmax for every output element (any integer type).
template <typename T, typename A>
SPIRE_HD inline T max_pool_grad_value(const PoolGeometry& g, const A* argmax, const T* dy,
                                      int64_t i) {
  const NhwcPos p = unflatten_nhwc(i, g.h, g.w, g.c);
  int64_t oy0, oy1, ox0, ox1;
  pool_covering(g, p.y, p.x, &oy0, &oy1, &ox0, &ox1);
  const int64_t at = p.y * g.w + p.x;
  T acc = T(0);
  for (int64_t oy = oy0; oy < oy1; ++oy) {
    for (int64_t ox = ox0; ox < ox1; ++ox) {
      const int64_t o = ((p.b * g.oh + oy) * g.ow + ox) * g.c + p.ch;
      if (static_cast<int64_t>(argmax[o]) == at) acc += dy[o];
    }
  }
  return acc;
}

/// MaxPoolGradGrad output element i (i indexes [n, oh, ow, c]): gin (shaped
/// like x) at the first maximum of the window (0 for an empty window).
template <typename T>
SPIRE_HD inline T max_pool_grad_grad_value(const PoolGeometry& g, const T* x, const T* gin,
                                           int64_t i) {
  const int64_t at = max_pool_argmax(g, x, i);
  if (at < 0) return T(0);
  const int64_t b = i / (g.oh * g.ow * g.c), ch = i % g.c;
  return gin[(b * g.h * g.w + at) * g.c + ch];
}

/// Number of valid input pixels of output window (oy, ox).
SPIRE_HD inline int64_t pool_window_count(const PoolGeometry& g, int64_t oy, int64_t ox) {
  int64_t y0, y1, x0, x1;
  pool_window(g, oy, ox, &y0, &y1, &x0, &x1);
  return (y1 > y0 ? y1 - y0 : 0) * (x1 > x0 ? x1 - x0 : 0);
}

/// AvgPool output element i: sum of x * (1 / count) over the valid pixels of
/// its window in scan order (the CPU kernel's arithmetic); 0 for an empty window.
template <typename T>
SPIRE_HD inline T avg_pool_value(const PoolGeometry& g, const T* x, int64_t i) {
  const NhwcPos o = unflatten_nhwc(i, g.oh, g.ow, g.c);
  int64_t y0, y1, x0, x1;
  pool_window(g, o.y, o.x, &y0, &y1, &x0, &x1);
  if (y0 >= y1 || x0 >= x1) return T(0);
  const T scale = T(1) / static_cast<T>((y1 - y0) * (x1 - x0));
  const T* img = x + o.b * g.h * g.w * g.c + o.ch;
  T acc = T(0);
  for (int64_t iy = y0; iy < y1; ++iy)
    for (int64_t ix = x0; ix < x1; ++ix) acc += img[(iy * g.w + ix) * g.c] * scale;
  return acc;
}

/// AvgPoolGrad element i (i indexes [n, h, w, c]): sum of dy * (1 / count)
/// over the windows covering it, in ascending window order.
template <typename T>
SPIRE_HD inline T avg_pool_grad_value(const PoolGeometry& g, const T* dy, int64_t i) {
  const NhwcPos p = unflatten_nhwc(i, g.h, g.w, g.c);
  int64_t oy0, oy1, ox0, ox1;
  pool_covering(g, p.y, p.x, &oy0, &oy1, &ox0, &ox1);
  T acc = T(0);
  for (int64_t oy = oy0; oy < oy1; ++oy) {
    for (int64_t ox = ox0; ox < ox1; ++ox) {
      const T scale = T(1) / static_cast<T>(pool_window_count(g, oy, ox));
      acc += dy[((p.b * g.oh + oy) * g.ow + ox) * g.c + p.ch] * scale;
    }
  }
  return acc;
}

}  // namespace spire::kernels
