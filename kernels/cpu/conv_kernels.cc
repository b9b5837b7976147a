// CPU kernels for Conv2D, Conv2DBackpropInput and Conv2DBackpropFilter (ops registered in
// core/ops/nn_ops.cc; NHWC input, HWIO filter), f32 and f64. Each lowers to the GEMM of
// kernels/cpu/gemm.h over an im2col matrix with one row per output pixel and KH*KW*C
// columns (contiguous C-vectors per filter tap, thanks to NHWC):
//   Conv2D:               y[rows, O]     = col[rows, KKC] x w[KKC, O]
//   Conv2DBackpropInput:  dcol[rows, KKC] = dy[rows, O] x w^T, then col2im adds into dx
//   Conv2DBackpropFilter: dw[KKC, O]    += col^T x dy[rows, O]
// The batch is processed in chunks of images so the im2col buffer stays bounded; a 1x1
// convolution with stride 1 uses the input itself as the col matrix.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/kernel_registry.h"
#include "core/ops/nn_ops.h"
#include "kernels/cpu/gemm.h"

namespace spire::cpu {
namespace {

// Upper bound on the im2col buffer, in elements.
constexpr int64_t kMaxColElements = int64_t{1} << 22;

struct ConvGeom {
  int64_t n, h, w, c;      // input
  int64_t kh, kw, o;       // filter
  int64_t oh, ow;          // output
  int64_t sh, sw, dh, dw;  // strides, dilations
  int64_t pt, pl;          // padding before (top, left)
  int64_t kkc() const { return kh * kw * c; }
  int64_t rows_per_image() const { return oh * ow; }
  // 1x1, stride 1, no padding: the input is the col matrix.
  bool pointwise() const { return kh == 1 && kw == 1 && sh == 1 && sw == 1 && pt == 0 && pl == 0; }
  // Images per chunk so that the col buffer stays under kMaxColElements.
  int64_t chunk() const {
    int64_t per = std::max<int64_t>(rows_per_image() * kkc(), 1);
    return std::max<int64_t>(1, std::min<int64_t>(n, kMaxColElements / per));
  }
};

ConvGeom conv_geom(KernelContext& ctx, const Shape& in, const Shape& f) {
  if (in.rank() != 4) ctx.fail("input must be NHWC (rank 4)");
  if (f.rank() != 4) ctx.fail("filter must be HWIO (rank 4)");
  if (in[3] != f[2])
    ctx.fail("input channels ", in[3], " do not match the filter's input channels ", f[2]);
  auto strides = ctx.attr<std::vector<int64_t>>("strides");
  auto dil = ctx.attr<std::vector<int64_t>>("dilations");
  const std::string padding = ctx.attr<std::string>("padding");
  if (strides.size() != 2 || dil.size() != 2) ctx.fail("strides and dilations need 2 entries");
  ops::WindowDim hd, wd;
  std::string err = ops::window_dim(in[1], f[0], strides[0], dil[0], padding, &hd);
  if (err.empty()) err = ops::window_dim(in[2], f[1], strides[1], dil[1], padding, &wd);
  if (!err.empty()) ctx.fail(err);
  return ConvGeom{in[0], in[1], in[2], in[3], f[0], f[1], f[3], hd.out, wd.out,
                  strides[0], strides[1], dil[0], dil[1], hd.pad_before, wd.pad_before};
}

void expect_dy_shape(KernelContext& ctx, const ConvGeom& g, const Tensor& dy) {
  Shape want{g.n, g.oh, g.ow, g.o};
  if (dy.shape() != want)
    ctx.fail("dy has shape ", dy.shape().to_string(), ", expected ", want.to_string());
}

// Fills col (count images starting at x) with one row per output pixel.
template <typename T>
void im2col(const ConvGeom& g, const T* x, int64_t count, T* col) {
  const int64_t kkc = g.kkc();
  for (int64_t img = 0; img < count; ++img) {
    const T* xi = x + img * g.h * g.w * g.c;
    for (int64_t oy = 0; oy < g.oh; ++oy) {
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        T* row = col + ((img * g.oh + oy) * g.ow + ox) * kkc;
        for (int64_t ky = 0; ky < g.kh; ++ky) {
          const int64_t iy = oy * g.sh - g.pt + ky * g.dh;
          for (int64_t kx = 0; kx < g.kw; ++kx) {
            const int64_t ix = ox * g.sw - g.pl + kx * g.dw;
            T* dst = row + (ky * g.kw + kx) * g.c;
            if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w)
              std::memcpy(dst, xi + (iy * g.w + ix) * g.c, static_cast<size_t>(g.c) * sizeof(T));
            else
              std::fill(dst, dst + g.c, T(0));
          }
        }
      }
    }
  }
}

// Adds col (as produced by im2col for count images) back into dx (the adjoint of im2col).
template <typename T>
void col2im_add(const ConvGeom& g, const T* col, int64_t count, T* dx) {
  const int64_t kkc = g.kkc();
  for (int64_t img = 0; img < count; ++img) {
    T* di = dx + img * g.h * g.w * g.c;
    for (int64_t oy = 0; oy < g.oh; ++oy) {
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        const T* row = col + ((img * g.oh + oy) * g.ow + ox) * kkc;
        for (int64_t ky = 0; ky < g.kh; ++ky) {
          const int64_t iy = oy * g.sh - g.pt + ky * g.dh;
          if (iy < 0 || iy >= g.h) continue;
          for (int64_t kx = 0; kx < g.kw; ++kx) {
            const int64_t ix = ox * g.sw - g.pl + kx * g.dw;
            if (ix < 0 || ix >= g.w) continue;
            const T* src = row + (ky * g.kw + kx) * g.c;
            T* dst = di + (iy * g.w + ix) * g.c;
            for (int64_t ch = 0; ch < g.c; ++ch) dst[ch] += src[ch];
          }
        }
      }
    }
  }
}

// The col matrix of images [n0, n0 + count): the input itself when pointwise, else im2col
// into `buf`.
template <typename T>
const T* col_of(const ConvGeom& g, const T* x, int64_t n0, int64_t count, std::vector<T>& buf) {
  const T* xi = x + n0 * g.h * g.w * g.c;
  if (g.pointwise()) return xi;
  buf.resize(static_cast<size_t>(count * g.rows_per_image() * g.kkc()));
  im2col(g, xi, count, buf.data());
  return buf.data();
}

template <typename T>
void conv2d_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& f = ctx.input(1);
  ConvGeom g = conv_geom(ctx, x.shape(), f.shape());
  Tensor& y = ctx.allocate_output(0, Shape{g.n, g.oh, g.ow, g.o});
  const T* px = x.data<T>();
  const T* pf = f.data<T>();
  T* py = y.data<T>();
  std::vector<T> buf;
  const int64_t chunk = g.chunk(), rows = g.rows_per_image(), kkc = g.kkc();
  for (int64_t n0 = 0; n0 < g.n; n0 += chunk) {
    const int64_t count = std::min(chunk, g.n - n0);
    const T* col = col_of(g, px, n0, count, buf);
    gemm(false, false, count * rows, g.o, kkc, T(1), col, kkc, pf, g.o, T(0),
         py + n0 * rows * g.o, g.o);
  }
}

template <typename T>
void conv2d_backprop_input_kernel(KernelContext& ctx) {
  const Tensor& like = ctx.input(0);
  const Tensor& f = ctx.input(1);
  const Tensor& dy = ctx.input(2);
  ConvGeom g = conv_geom(ctx, like.shape(), f.shape());
  expect_dy_shape(ctx, g, dy);
  Tensor& dx = ctx.allocate_output(0, like.shape());
  const T* pf = f.data<T>();
  const T* pdy = dy.data<T>();
  T* pdx = dx.data<T>();
  const int64_t rows = g.rows_per_image(), kkc = g.kkc();
  if (g.pointwise()) {  // dx = dy x w^T directly
    gemm(false, true, g.n * rows, kkc, g.o, T(1), pdy, g.o, pf, g.o, T(0), pdx, kkc);
    return;
  }
  std::fill(pdx, pdx + dx.num_elements(), T(0));
  std::vector<T> buf;
  const int64_t chunk = g.chunk();
  for (int64_t n0 = 0; n0 < g.n; n0 += chunk) {
    const int64_t count = std::min(chunk, g.n - n0);
    buf.resize(static_cast<size_t>(count * rows * kkc));
    gemm(false, true, count * rows, kkc, g.o, T(1), pdy + n0 * rows * g.o, g.o, pf, g.o, T(0),
         buf.data(), kkc);
    col2im_add(g, buf.data(), count, pdx + n0 * g.h * g.w * g.c);
  }
}

template <typename T>
void conv2d_backprop_filter_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& like = ctx.input(1);
  const Tensor& dy = ctx.input(2);
  ConvGeom g = conv_geom(ctx, x.shape(), like.shape());
  expect_dy_shape(ctx, g, dy);
  Tensor& dw = ctx.allocate_output(0, like.shape());
  const T* px = x.data<T>();
  const T* pdy = dy.data<T>();
  T* pdw = dw.data<T>();
  const int64_t rows = g.rows_per_image(), kkc = g.kkc();
  std::fill(pdw, pdw + dw.num_elements(), T(0));
  std::vector<T> buf;
  const int64_t chunk = g.chunk();
  for (int64_t n0 = 0; n0 < g.n; n0 += chunk) {
    const int64_t count = std::min(chunk, g.n - n0);
    const T* col = col_of(g, px, n0, count, buf);
    gemm(true, false, kkc, g.o, count * rows, T(1), col, kkc, pdy + n0 * rows * g.o, g.o, T(1),
         pdw, g.o);
  }
}

}  // namespace

SPIRE_REGISTER_KERNEL("Conv2D", DeviceType::CPU, conv2d_kernel<float>, DType::F32);
SPIRE_REGISTER_KERNEL("Conv2D", DeviceType::CPU, conv2d_kernel<double>, DType::F64);
SPIRE_REGISTER_KERNEL("Conv2DBackpropInput", DeviceType::CPU, conv2d_backprop_input_kernel<float>,
                      DType::F32);
SPIRE_REGISTER_KERNEL("Conv2DBackpropInput", DeviceType::CPU,
                      conv2d_backprop_input_kernel<double>, DType::F64);
SPIRE_REGISTER_KERNEL("Conv2DBackpropFilter", DeviceType::CPU,
                      conv2d_backprop_filter_kernel<float>, DType::F32);
SPIRE_REGISTER_KERNEL("Conv2DBackpropFilter", DeviceType::CPU,
                      conv2d_backprop_filter_kernel<double>, DType::F64);

}  // namespace spire::cpu
