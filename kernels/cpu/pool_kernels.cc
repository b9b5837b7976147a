// CPU kernels for the NHWC pooling ops registered in core/ops/nn_ops.cc, f32 and f64:
// MaxPool, MaxPoolGrad, MaxPoolGradGrad, AvgPool and AvgPoolGrad. Windows follow TF's
// SAME/VALID rules (ops::window_dim); padded positions are skipped, so a max never comes
// from padding and a SAME average divides by the number of valid elements. The three
// max-pool kernels share one routine that finds the first maximum of each window.
#include <algorithm>
#include <vector>

#include "core/kernel_registry.h"
#include "core/ops/nn_ops.h"

namespace spire::cpu {
namespace {

struct PoolGeom {
  int64_t n, h, w, c;
  int64_t kh, kw, sh, sw;
  int64_t oh, ow, pt, pl;
  Shape in_shape() const { return Shape{n, h, w, c}; }
  Shape out_shape() const { return Shape{n, oh, ow, c}; }
  // Valid input rows [y0, y1) and cols [x0, x1) of output window (oy, ox).
  void window(int64_t oy, int64_t ox, int64_t* y0, int64_t* y1, int64_t* x0, int64_t* x1) const {
    const int64_t ys = oy * sh - pt, xs = ox * sw - pl;
    *y0 = std::max<int64_t>(ys, 0);
    *y1 = std::min<int64_t>(ys + kh, h);
    *x0 = std::max<int64_t>(xs, 0);
    *x1 = std::min<int64_t>(xs + kw, w);
  }
};

PoolGeom pool_geom(KernelContext& ctx, const Shape& in) {
  if (in.rank() != 4) ctx.fail("input must be NHWC (rank 4)");
  auto ksize = ctx.attr<std::vector<int64_t>>("ksize");
  auto strides = ctx.attr<std::vector<int64_t>>("strides");
  const std::string padding = ctx.attr<std::string>("padding");
  if (ksize.size() != 2 || strides.size() != 2) ctx.fail("ksize and strides need 2 entries");
  ops::WindowDim hd, wd;
  std::string err = ops::window_dim(in[1], ksize[0], strides[0], 1, padding, &hd);
  if (err.empty()) err = ops::window_dim(in[2], ksize[1], strides[1], 1, padding, &wd);
  if (!err.empty()) ctx.fail(err);
  return PoolGeom{in[0], in[1], in[2], in[3], ksize[0], ksize[1], strides[0], strides[1],
                  hd.out, wd.out, hd.pad_before, wd.pad_before};
}

void expect_shape(KernelContext& ctx, const char* what, const Tensor& t, const Shape& want) {
  if (t.shape() != want)
    ctx.fail(what, " has shape ", t.shape().to_string(), ", expected ", want.to_string());
}

// Calls f(out_index, in_index) for every output element, with in_index the flat input
// index of the first maximum of its window (scan order: rows, then cols), or -1 for a
// window without valid elements.
template <typename T, typename F>
void for_each_window_argmax(const PoolGeom& g, const T* x, F f) {
  std::vector<T> best(static_cast<size_t>(g.c));
  std::vector<int64_t> arg(static_cast<size_t>(g.c));
  for (int64_t b = 0; b < g.n; ++b) {
    for (int64_t oy = 0; oy < g.oh; ++oy) {
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        std::fill(arg.begin(), arg.end(), -1);
        int64_t y0, y1, x0, x1;
        g.window(oy, ox, &y0, &y1, &x0, &x1);
        for (int64_t iy = y0; iy < y1; ++iy) {
          for (int64_t ix = x0; ix < x1; ++ix) {
            const int64_t base = ((b * g.h + iy) * g.w + ix) * g.c;
            for (int64_t ch = 0; ch < g.c; ++ch) {
              const size_t k = static_cast<size_t>(ch);
              const T v = x[base + ch];
              if (arg[k] < 0 || v > best[k]) {
                best[k] = v;
                arg[k] = base + ch;
              }
            }
          }
        }
        const int64_t out = ((b * g.oh + oy) * g.ow + ox) * g.c;
        for (int64_t ch = 0; ch < g.c; ++ch) f(out + ch, arg[static_cast<size_t>(ch)]);
      }
    }
  }
}

// Calls f(out_base, in_base, count) for every output pixel and every valid input pixel of
// its window (bases are flat indices of channel 0), count = valid elements in the window.
template <typename F>
void for_each_window_pixel(const PoolGeom& g, F f) {
  for (int64_t b = 0; b < g.n; ++b) {
    for (int64_t oy = 0; oy < g.oh; ++oy) {
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        int64_t y0, y1, x0, x1;
        g.window(oy, ox, &y0, &y1, &x0, &x1);
        const int64_t count = std::max<int64_t>(y1 - y0, 0) * std::max<int64_t>(x1 - x0, 0);
        const int64_t out = ((b * g.oh + oy) * g.ow + ox) * g.c;
        for (int64_t iy = y0; iy < y1; ++iy)
          for (int64_t ix = x0; ix < x1; ++ix) f(out, ((b * g.h + iy) * g.w + ix) * g.c, count);
      }
    }
  }
}

template <typename T>
void max_pool_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  PoolGeom g = pool_geom(ctx, x.shape());
  Tensor& y = ctx.allocate_output(0, g.out_shape());
  const T* px = x.data<T>();
  T* py = y.data<T>();
  for_each_window_argmax(g, px, [&](int64_t o, int64_t i) { py[o] = i >= 0 ? px[i] : T(0); });
}

template <typename T>
void max_pool_grad_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  PoolGeom g = pool_geom(ctx, x.shape());
  expect_shape(ctx, "y", ctx.input(1), g.out_shape());
  expect_shape(ctx, "dy", ctx.input(2), g.out_shape());
  Tensor& dx = ctx.allocate_output(0, x.shape());
  const T* pdy = ctx.input(2).data<T>();
  T* pdx = dx.data<T>();
  std::fill(pdx, pdx + dx.num_elements(), T(0));
  for_each_window_argmax(g, x.data<T>(), [&](int64_t o, int64_t i) {
    if (i >= 0) pdx[i] += pdy[o];
  });
}

template <typename T>
void max_pool_grad_grad_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  PoolGeom g = pool_geom(ctx, x.shape());
  expect_shape(ctx, "y", ctx.input(1), g.out_shape());
  expect_shape(ctx, "g", ctx.input(2), x.shape());
  Tensor& out = ctx.allocate_output(0, g.out_shape());
  const T* pg = ctx.input(2).data<T>();
  T* po = out.data<T>();
  for_each_window_argmax(g, x.data<T>(), [&](int64_t o, int64_t i) {
    po[o] = i >= 0 ? pg[i] : T(0);
  });
}

template <typename T>
void avg_pool_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  PoolGeom g = pool_geom(ctx, x.shape());
  Tensor& y = ctx.allocate_output(0, g.out_shape());
  const T* px = x.data<T>();
  T* py = y.data<T>();
  std::fill(py, py + y.num_elements(), T(0));
  for_each_window_pixel(g, [&](int64_t o, int64_t i, int64_t count) {
    const T scale = T(1) / static_cast<T>(count);
    for (int64_t ch = 0; ch < g.c; ++ch) py[o + ch] += px[i + ch] * scale;
  });
}

template <typename T>
void avg_pool_grad_kernel(KernelContext& ctx) {
  const Tensor& like = ctx.input(0);
  PoolGeom g = pool_geom(ctx, like.shape());
  expect_shape(ctx, "dy", ctx.input(1), g.out_shape());
  Tensor& dx = ctx.allocate_output(0, like.shape());
  const T* pdy = ctx.input(1).data<T>();
  T* pdx = dx.data<T>();
  std::fill(pdx, pdx + dx.num_elements(), T(0));
  for_each_window_pixel(g, [&](int64_t o, int64_t i, int64_t count) {
    const T scale = T(1) / static_cast<T>(count);
    for (int64_t ch = 0; ch < g.c; ++ch) pdx[i + ch] += pdy[o + ch] * scale;
  });
}

}  // namespace

SPIRE_REGISTER_KERNEL("MaxPool", DeviceType::CPU, max_pool_kernel<float>, DType::F32);
SPIRE_REGISTER_KERNEL("MaxPool", DeviceType::CPU, max_pool_kernel<double>, DType::F64);
SPIRE_REGISTER_KERNEL("MaxPoolGrad", DeviceType::CPU, max_pool_grad_kernel<float>, DType::F32);
SPIRE_REGISTER_KERNEL("MaxPoolGrad", DeviceType::CPU, max_pool_grad_kernel<double>, DType::F64);
SPIRE_REGISTER_KERNEL("MaxPoolGradGrad", DeviceType::CPU, max_pool_grad_grad_kernel<float>,
                      DType::F32);
SPIRE_REGISTER_KERNEL("MaxPoolGradGrad", DeviceType::CPU, max_pool_grad_grad_kernel<double>,
                      DType::F64);
SPIRE_REGISTER_KERNEL("AvgPool", DeviceType::CPU, avg_pool_kernel<float>, DType::F32);
SPIRE_REGISTER_KERNEL("AvgPool", DeviceType::CPU, avg_pool_kernel<double>, DType::F64);
SPIRE_REGISTER_KERNEL("AvgPoolGrad", DeviceType::CPU, avg_pool_grad_kernel<float>, DType::F32);
SPIRE_REGISTER_KERNEL("AvgPoolGrad", DeviceType::CPU, avg_pool_grad_kernel<double>, DType::F64);

}  // namespace spire::cpu
