// CPU kernels for the NHWC pooling ops registered in core/ops/nn_ops.cc, f32 and f64:
// MaxPool, MaxPoolGrad, MaxPoolGradGrad, AvgPool and AvgPoolGrad. Windows follow TF's
// SAME/VALID rules (ops::window_dim); padded positions are skipped, so a max never comes
// from padding and a SAME average divides by the number of valid elements. The three
// max-pool kernels share one routine that finds the first maximum of each window.
// The batch is split over the session's thread pool (each image's windows touch only that
// image), so results do not depend on the thread count.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/fusion.h"
#include "core/kernel_registry.h"
#include "kernels/cpu/fused_program.h"
#include "kernels/cpu/vector_loops.h"
#include "kernels/pool_geometry.h"

namespace spire::cpu {
namespace {

// The shared geometry (kernels/pool_geometry.h, kernels/pool_index.h) with shorthands.
struct PoolGeom : kernels::PoolGeometry {
  Shape in_shape() const { return kernels::pool_in_shape(*this); }
  Shape out_shape() const { return kernels::pool_out_shape(*this); }
  // Valid input rows [y0, y1) and cols [x0, x1) of output window (oy, ox).
  void window(int64_t oy, int64_t ox, int64_t* y0, int64_t* y1, int64_t* x0, int64_t* x1) const {
    kernels::pool_window(*this, oy, ox, y0, y1, x0, x1);
  }
};

PoolGeom pool_geom(KernelContext& ctx, const Shape& in) {
  return PoolGeom{kernels::pool_geometry(ctx, in)};
}

using kernels::expect_pool_shape;

// Calls f(out, pixel_base, pixels, arg) for every output pixel: out is the flat index of its
// channel 0, pixel_base[0..pixels) the flat input indices (channel 0) of the valid pixels of
// its window in scan order (rows, then cols; pixels == 0 for a window without any), and
// arg[ch] the position in that list of the first maximum of channel ch.
// Images [b0, b1) only.
template <typename T, typename F>
void for_each_window_argmax_in(const PoolGeom& g, const T* x, int64_t b0, int64_t b1, F&& f) {
  std::vector<T> best_buf(static_cast<size_t>(g.c));
  std::vector<int32_t> arg_buf(static_cast<size_t>(g.c));
  std::vector<int64_t> pixel_base(static_cast<size_t>(g.kh * g.kw));
  T* __restrict best = best_buf.data();
  int32_t* __restrict arg = arg_buf.data();  // pixel number within the window scan
  for (int64_t b = b0; b < b1; ++b) {
    for (int64_t oy = 0; oy < g.oh; ++oy) {
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        const int64_t out = ((b * g.oh + oy) * g.ow + ox) * g.c;
        int64_t y0, y1, x0, x1;
        g.window(oy, ox, &y0, &y1, &x0, &x1);
        if (y0 >= y1 || x0 >= x1) {
          f(out, pixel_base.data(), int32_t{0}, arg);
          continue;
        }
        // The first valid pixel starts the scan; later ones replace it only when strictly
        // greater (branch-free selects on 32-bit lanes, so the channel loop vectorizes).
        int32_t k = 0;
        for (int64_t iy = y0; iy < y1; ++iy) {
          for (int64_t ix = x0; ix < x1; ++ix, ++k) {
            const int64_t base = ((b * g.h + iy) * g.w + ix) * g.c;
            pixel_base[static_cast<size_t>(k)] = base;
            const T* __restrict p = x + base;
            if (k == 0) {
              for (int64_t ch = 0; ch < g.c; ++ch) {
                best[ch] = p[ch];
                arg[ch] = 0;
              }
              continue;
            }
            for (int64_t ch = 0; ch < g.c; ++ch) {
              const T v = p[ch], cur = best[ch];
              const int32_t greater = -static_cast<int32_t>(v > cur);  // all ones when v > cur
              best[ch] = v > cur ? v : cur;
              arg[ch] = (k & greater) | (arg[ch] & ~greater);
            }
          }
        }
        f(out, pixel_base.data(), k, arg);
      }
    }
  }
}

// Images per parallel chunk of the pooling kernels: about 16K input elements.
inline int64_t pool_grain(const PoolGeom& g) {
  return std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(g.h * g.w * g.c, 1));
}

// All images, split over the kernel's thread pool.
template <typename T, typename F>
void for_each_window_argmax(const KernelContext& ctx, const PoolGeom& g, const T* x, F f) {
  ctx.parallel_for(g.n, pool_grain(g), [&](int64_t b0, int64_t b1) {
    run_vec([&] { for_each_window_argmax_in(g, x, b0, b1, f); });
  });
}

// Calls f(out_base, in_base, count) for every output pixel and every valid input pixel of
// its window (bases are flat indices of channel 0), count = valid elements in the window.
template <typename F>
void for_each_window_pixel(const KernelContext& ctx, const PoolGeom& g, F f) {
  ctx.parallel_for(g.n, pool_grain(g), [&](int64_t b0, int64_t b1) {
  for (int64_t b = b0; b < b1; ++b) {
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
  });
}

template <typename T>
void max_pool_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  PoolGeom g = pool_geom(ctx, x.shape());
  Tensor& y = ctx.allocate_output(0, g.out_shape());
  const T* px = x.data<T>();
  T* py = y.data<T>();
  // Same scan as for_each_window_argmax (first valid pixel, then strictly greater values),
  // keeping only the values.
  ctx.parallel_for(g.n, pool_grain(g), [&](int64_t b0, int64_t b1) {
    run_vec([&] {
      for (int64_t b = b0; b < b1; ++b) {
        for (int64_t oy = 0; oy < g.oh; ++oy) {
          for (int64_t ox = 0; ox < g.ow; ++ox) {
            T* __restrict dst = py + ((b * g.oh + oy) * g.ow + ox) * g.c;
            int64_t y0, y1, x0, x1;
            g.window(oy, ox, &y0, &y1, &x0, &x1);
            if (y0 >= y1 || x0 >= x1) {
              std::fill(dst, dst + g.c, T(0));
              continue;
            }
            const T* first = px + ((b * g.h + y0) * g.w + x0) * g.c;
            std::copy(first, first + g.c, dst);
            for (int64_t iy = y0; iy < y1; ++iy) {
              for (int64_t ix = iy == y0 ? x0 + 1 : x0; ix < x1; ++ix) {
                const T* __restrict p = px + ((b * g.h + iy) * g.w + ix) * g.c;
                for (int64_t ch = 0; ch < g.c; ++ch) dst[ch] = p[ch] > dst[ch] ? p[ch] : dst[ch];
              }
            }
          }
        }
      }
    });
  });
}

// MaxPoolGrad, and with `fused` FusedMaxPoolGrad: dx then rewritten by the node's epilogue
// (kernels/cpu/fused_program.h) one share of images at a time, while it is in cache.
template <typename T, bool fused>
void max_pool_grad_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  auto check = [&] {
    PoolGeom pg = pool_geom(ctx, x.shape());
    expect_pool_shape(ctx, "y", ctx.input(1), pg.out_shape());
    expect_pool_shape(ctx, "dy", ctx.input(2), pg.out_shape());
    return pg;
  };
  PoolGeom g = fused ? in_product(ctx, check) : check();
  std::unique_ptr<Epilogue<T>> epilogue;
  T* pdx = nullptr;
  if constexpr (fused) {
    epilogue = std::make_unique<Epilogue<T>>(ctx, x.shape(), 3);
    pdx = epilogue->product();
    epilogue->bind_product(pdx);
  } else {
    pdx = ctx.allocate_output(0, x.shape()).data<T>();
  }
  const Epilogue<T>* in_place = epilogue && epilogue->in_place() ? epilogue.get() : nullptr;
  const T* pdy = ctx.input(2).data<T>();
  const int64_t c = g.c, image = g.h * g.w * g.c;
  // Windows that tile the input exactly (e.g. 2x2 stride 2 on even sizes) write every dx
  // element once: store instead of zero-filling and accumulating.
  const bool tiles = g.sh == g.kh && g.sw == g.kw && g.pt == 0 && g.pl == 0 &&
                     g.oh * g.kh == g.h && g.ow * g.kw == g.w;
  auto scatter = [&](int64_t o, const int64_t* base, int32_t pixels, const int32_t* arg) {
    const T* __restrict dy = pdy + o;
    for (int32_t k = 0; k < pixels; ++k) {
      T* __restrict d = pdx + base[k];
      if (tiles) {
        for (int64_t ch = 0; ch < c; ++ch) {
          const T v = dy[ch];  // loaded unconditionally so the select vectorizes
          d[ch] = arg[ch] == k ? v : T(0);
        }
      } else {
        for (int64_t ch = 0; ch < c; ++ch) {
          const T v = dy[ch];
          d[ch] += arg[ch] == k ? v : T(0);
        }
      }
    }
  };
  // Otherwise zero the images right before scattering into them. Each share goes a few
  // images (pool_grain's ~16K elements) at a time, so the epilogue finds them in cache.
  const int64_t step = pool_grain(g);
  ctx.parallel_for(g.n, step, [&](int64_t b0, int64_t b1) {
    for (int64_t s0 = b0; s0 < b1; s0 += step) {
      const int64_t s1 = std::min(b1, s0 + step);
      run_vec([&] {
        if (!tiles) std::fill(pdx + s0 * image, pdx + s1 * image, T(0));
        for_each_window_argmax_in(g, x.data<T>(), s0, s1, scatter);
      });
      if (in_place) in_place->block(s0 * g.h * g.w, s1 * g.h * g.w, 0, c);
    }
  });
  if (epilogue && !in_place) epilogue->finish(ctx);
}

template <typename T>
void max_pool_grad_grad_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  PoolGeom g = pool_geom(ctx, x.shape());
  expect_pool_shape(ctx, "y", ctx.input(1), g.out_shape());
  expect_pool_shape(ctx, "g", ctx.input(2), x.shape());
  Tensor& out = ctx.allocate_output(0, g.out_shape());
  const T* pg = ctx.input(2).data<T>();
  T* po = out.data<T>();
  for_each_window_argmax(ctx, g, x.data<T>(),
                         [&](int64_t o, const int64_t* base, int32_t pixels, const int32_t* arg) {
    for (int64_t ch = 0; ch < g.c; ++ch) po[o + ch] = pixels > 0 ? pg[base[arg[ch]] + ch] : T(0);
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
  for_each_window_pixel(ctx, g, [&](int64_t o, int64_t i, int64_t count) {
    const T scale = T(1) / static_cast<T>(count);
    for (int64_t ch = 0; ch < g.c; ++ch) py[o + ch] += px[i + ch] * scale;
  });
}

template <typename T>
void avg_pool_grad_kernel(KernelContext& ctx) {
  const Tensor& like = ctx.input(0);
  PoolGeom g = pool_geom(ctx, like.shape());
  expect_pool_shape(ctx, "dy", ctx.input(1), g.out_shape());
  Tensor& dx = ctx.allocate_output(0, like.shape());
  const T* pdy = ctx.input(1).data<T>();
  T* pdx = dx.data<T>();
  std::fill(pdx, pdx + dx.num_elements(), T(0));
  for_each_window_pixel(ctx, g, [&](int64_t o, int64_t i, int64_t count) {
    const T scale = T(1) / static_cast<T>(count);
    for (int64_t ch = 0; ch < g.c; ++ch) pdx[i + ch] += pdy[o + ch] * scale;
  });
}

}  // namespace

SPIRE_REGISTER_KERNEL("MaxPool", DeviceType::CPU, max_pool_kernel<float>, DType::F32);
SPIRE_REGISTER_KERNEL("MaxPool", DeviceType::CPU, max_pool_kernel<double>, DType::F64);
SPIRE_REGISTER_KERNEL("MaxPoolGrad", DeviceType::CPU, (max_pool_grad_kernel<float, false>), DType::F32);
SPIRE_REGISTER_KERNEL("MaxPoolGrad", DeviceType::CPU, (max_pool_grad_kernel<double, false>), DType::F64);
SPIRE_REGISTER_KERNEL("FusedMaxPoolGrad", DeviceType::CPU, (max_pool_grad_kernel<float, true>), DType::F32);
SPIRE_REGISTER_KERNEL("FusedMaxPoolGrad", DeviceType::CPU, (max_pool_grad_kernel<double, true>), DType::F64);

namespace {
// MaxPoolGrad's epilogue op (core/fusion.h): what the fusion pass may make of it.
struct EpilogueRegistrar {
  EpilogueRegistrar() {
    for (DType t : {DType::F32, DType::F64}) register_epilogue(DeviceType::CPU, "MaxPoolGrad", t, "FusedMaxPoolGrad");
  }
} epilogue_registrar;
}  // namespace
SPIRE_REGISTER_KERNEL("MaxPoolGradGrad", DeviceType::CPU, max_pool_grad_grad_kernel<float>,
                      DType::F32);
SPIRE_REGISTER_KERNEL("MaxPoolGradGrad", DeviceType::CPU, max_pool_grad_grad_kernel<double>,
                      DType::F64);
SPIRE_REGISTER_KERNEL("AvgPool", DeviceType::CPU, avg_pool_kernel<float>, DType::F32);
SPIRE_REGISTER_KERNEL("AvgPool", DeviceType::CPU, avg_pool_kernel<double>, DType::F64);
SPIRE_REGISTER_KERNEL("AvgPoolGrad", DeviceType::CPU, avg_pool_grad_kernel<float>, DType::F32);
SPIRE_REGISTER_KERNEL("AvgPoolGrad", DeviceType::CPU, avg_pool_grad_kernel<double>, DType::F64);

}  // namespace spire::cpu
