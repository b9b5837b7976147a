// CPU kernels for Conv2D, Conv2DBackpropInput and Conv2DBackpropFilter (ops registered in
// core/ops/nn_ops.cc; NHWC input, HWIO filter), f32 and f64. Each lowers to the GEMM of
// kernels/cpu/gemm.h over an im2col matrix with one row per output pixel and KH*KW*C
// columns (contiguous C-vectors per filter tap, thanks to NHWC):
//   Conv2D:               y[rows, O]     = col[rows, KKC] x w[KKC, O]
//   Conv2DBackpropInput:  dcol[rows, KKC] = dy[rows, O] x w^T, then col2im adds into dx
//   Conv2DBackpropFilter: dw[KKC, O]    += col^T x dy[rows, O]
// The batch is processed in chunks of images so the im2col buffer stays bounded; a 1x1
// convolution with stride 1 uses the input itself as the col matrix.
// With the session's thread pool, the batch is split across threads (each thread builds the
// col matrix of its own images and runs its own GEMM): forward and input gradient are then
// bitwise identical to one thread; the filter gradient sums per-thread partial gradients in a
// fixed order. A batch smaller than the thread count splits the GEMMs instead.
// Stride-1, undilated convolutions with whole vectors of output channels and at most 1024
// filter rows (the ResNets' 3x3 layers, MNIST's) skip im2col: kernels/cpu/direct_conv.h.
// Where both apply, the direct kernel runs, or with SessionOptions::measure_conv_algorithms
// the faster of the two for the shape, timed once per session (kernels/cpu/conv_algorithm.h);
// measured, 3x3 forward and input-gradient convolutions also try Winograd F(2x2, 3x3)
// (kernels/cpu/winograd_conv.h).
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "core/fusion.h"
#include "core/kernel_registry.h"
#include "kernels/conv_geometry.h"
#include "kernels/cpu/conv_algorithm.h"
#include "kernels/cpu/direct_conv.h"
#include "kernels/cpu/fused_program.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/winograd_conv.h"

namespace spire::cpu {
namespace {

// Upper bound on the im2col buffer, in elements: 1 MiB of f32, so the col matrix of a chunk
// is still in the core's L2 cache when the GEMM packs it (at least one image per chunk).
constexpr int64_t kMaxColElements = int64_t{1} << 18;

// The shared geometry (kernels/conv_geometry.h) plus the im2col sizes of this kernel.
struct ConvGeom : kernels::ConvGeometry {
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

ConvGeom conv_geom(const kernels::ConvGeometry& base) { return ConvGeom{base}; }

// The direct kernels' view of a stride-1, undilated convolution (only then meaningful).
DirectConvShape direct_shape(const ConvGeom& g) {
  return {g.n, g.h, g.w, g.c, g.kh, g.kw, g.o, g.oh, g.ow, g.pt, g.pl};
}
bool unit_stride(const ConvGeom& g) { return g.sh == 1 && g.sw == 1 && g.dh == 1 && g.dw == 1; }
// Whether the direct kernels take convolution g, whose direct problem is d (the forward
// shape, or the input gradient's): never for 1x1 stride-1 (already a plain GEMM).
template <typename T>
bool use_direct(const ConvGeom& g, const DirectConvShape& d) {
  return !g.pointwise() && unit_stride(g) && direct_conv_applies<T>(d);
}
// The algorithms besides im2col + GEMM that take the stride-1 problem d of convolution g
// (the forward shape or the input gradient's): direct, and Winograd (not for the filter
// gradient).
template <typename T>
ConvCandidates candidates(const ConvGeom& g, const DirectConvShape& d, bool winograd_ok) {
  return {use_direct<T>(g, d), winograd_ok && !g.pointwise() && unit_stride(g) && winograd_applies(d)};
}

// The input gradient of a stride-1 convolution as a forward convolution of dy: the filter
// rotated by 180 degrees with c and o swapped, padding kh-1-pt / kw-1-pl.
DirectConvShape direct_input_grad_shape(const ConvGeom& g) {
  return {g.n, g.oh, g.ow, g.o, g.kh, g.kw, g.c, g.h, g.w, g.kh - 1 - g.pt, g.kw - 1 - g.pl};
}
template <typename T>
std::vector<T> rotated_filter(const ConvGeom& g, const T* w) {
  std::vector<T> r(static_cast<size_t>(g.kh * g.kw * g.c * g.o));
  for (int64_t ky = 0; ky < g.kh; ++ky)
    for (int64_t kx = 0; kx < g.kw; ++kx) {
      const T* src = w + ((g.kh - 1 - ky) * g.kw + (g.kw - 1 - kx)) * g.c * g.o;
      T* dst = r.data() + (ky * g.kw + kx) * g.o * g.c;
      for (int64_t ci = 0; ci < g.c; ++ci)
        for (int64_t oi = 0; oi < g.o; ++oi) dst[oi * g.c + ci] = src[ci * g.o + oi];
    }
  return r;
}

// Uninitialized scratch that grows on demand (each thread's share of a kernel owns one).
template <typename T>
class Scratch {
 public:
  T* get(int64_t count) {
    if (static_cast<size_t>(count) > capacity_) {
      data_.reset(new T[static_cast<size_t>(count)]);
      capacity_ = static_cast<size_t>(count);
    }
    return data_.get();
  }

 private:
  std::unique_ptr<T[]> data_;
  size_t capacity_ = 0;
};

// Output columns [*lo, *hi) whose input column ox * sw - pl + kx * dw lies inside the image.
inline void valid_ox(const ConvGeom& g, int64_t kx, int64_t* lo, int64_t* hi) {
  auto ceil_div = [](int64_t a, int64_t b) { return a <= 0 ? 0 : (a + b - 1) / b; };
  const int64_t shift = g.pl - kx * g.dw;  // ix = ox * sw - shift
  *lo = std::min(g.ow, ceil_div(shift, g.sw));
  *hi = std::max(*lo, std::min(g.ow, ceil_div(g.w + shift, g.sw)));
}

// Fills col (count images starting at x) with one row per output pixel. Walks one filter tap
// at a time over a whole output row, so the bounds are checked once per tap and row, and
// the copies of few channels (the first layer of an image model) are tight strided loops.
template <typename T>
void im2col(const ConvGeom& g, const T* x, int64_t count, T* col) {
  const int64_t kkc = g.kkc(), c = g.c;
  for (int64_t img = 0; img < count; ++img) {
    const T* xi = x + img * g.h * g.w * c;
    for (int64_t oy = 0; oy < g.oh; ++oy) {
      T* rows = col + (img * g.oh + oy) * g.ow * kkc;
      for (int64_t ky = 0; ky < g.kh; ++ky) {
        const int64_t iy = oy * g.sh - g.pt + ky * g.dh;
        for (int64_t kx = 0; kx < g.kw; ++kx) {
          T* dst = rows + (ky * g.kw + kx) * c;
          int64_t lo = g.ow, hi = g.ow;
          if (iy >= 0 && iy < g.h) valid_ox(g, kx, &lo, &hi);
          else lo = 0, hi = 0;
          for (int64_t ox = 0; ox < lo; ++ox) std::fill(dst + ox * kkc, dst + ox * kkc + c, T(0));
          // Input offset of output column ox: base + ox * step (only used for valid columns).
          const int64_t base = (iy * g.w - g.pl + kx * g.dw) * c, step = g.sw * c;
          if (c == 1) {
            for (int64_t ox = lo; ox < hi; ++ox) dst[ox * kkc] = xi[base + ox * step];
          } else if (c <= 64) {  // short runs: an inline (vectorized) copy beats a memcpy call
            for (int64_t ox = lo; ox < hi; ++ox) {
              T* __restrict d = dst + ox * kkc;
              const T* __restrict src = xi + base + ox * step;
              for (int64_t ch = 0; ch < c; ++ch) d[ch] = src[ch];
            }
          } else {
            for (int64_t ox = lo; ox < hi; ++ox)
              std::memcpy(dst + ox * kkc, xi + base + ox * step, static_cast<size_t>(c) * sizeof(T));
          }
          for (int64_t ox = std::max(hi, lo); ox < g.ow; ++ox)
            std::fill(dst + ox * kkc, dst + ox * kkc + c, T(0));
        }
      }
    }
  }
}

// Adds col (as produced by im2col for count images) back into dx (the adjoint of im2col),
// tap by tap over whole output rows like im2col.
template <typename T>
void col2im_add(const ConvGeom& g, const T* col, int64_t count, T* dx) {
  const int64_t kkc = g.kkc(), c = g.c;
  for (int64_t img = 0; img < count; ++img) {
    T* di = dx + img * g.h * g.w * c;
    for (int64_t oy = 0; oy < g.oh; ++oy) {
      const T* rows = col + (img * g.oh + oy) * g.ow * kkc;
      for (int64_t ky = 0; ky < g.kh; ++ky) {
        const int64_t iy = oy * g.sh - g.pt + ky * g.dh;
        if (iy < 0 || iy >= g.h) continue;
        for (int64_t kx = 0; kx < g.kw; ++kx) {
          const T* src = rows + (ky * g.kw + kx) * c;
          int64_t lo, hi;
          valid_ox(g, kx, &lo, &hi);
          const int64_t base = (iy * g.w - g.pl + kx * g.dw) * c, step = g.sw * c;
          if (c == 1) {
            for (int64_t ox = lo; ox < hi; ++ox) di[base + ox * step] += src[ox * kkc];
          } else {
            for (int64_t ox = lo; ox < hi; ++ox) {
              T* __restrict d = di + base + ox * step;
              const T* __restrict s = src + ox * kkc;
              for (int64_t ch = 0; ch < c; ++ch) d[ch] += s[ch];
            }
          }
        }
      }
    }
  }
}

// The col matrix of images [n0, n0 + count): the input itself when pointwise, else im2col
// into `buf`.
template <typename T>
const T* col_of(const ConvGeom& g, const T* x, int64_t n0, int64_t count, Scratch<T>& buf) {
  const T* xi = x + n0 * g.h * g.w * g.c;
  if (g.pointwise()) return xi;
  T* col = buf.get(count * g.rows_per_image() * g.kkc());
  im2col(g, xi, count, col);
  return col;
}

// Runs images(b0, b1, pool) over a batch of n images: split by image across
// the session's threads when there are enough images (each call then runs
// its GEMMs serially), else one call whose GEMMs use the thread pool.
template <typename F>
void for_images(KernelContext& ctx, int64_t n, bool whole_batch, F&& images) {
  if (whole_batch || n < ctx.num_threads()) {
    images(0, n, ctx.thread_pool());
    return;
  }
  ctx.parallel_for(n, 1, [&](int64_t b0, int64_t b1) { images(b0, b1, nullptr); });
}

// Conv2D, and with `fused` FusedConv2D: the same convolution, its output then rewritten by
// the node's epilogue (kernels/cpu/fused_program.h) block by block as each GEMM finishes it
// (im2col) or band by band of output rows (direct), or whole after Winograd.
template <typename T, bool fused>
void conv2d_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& f = ctx.input(1);
  ConvGeom g = fused ? in_product(ctx, [&] { return conv_geom(kernels::conv_geometry(ctx, x.shape(), f.shape())); })
                     : conv_geom(kernels::conv_geometry(ctx, x.shape(), f.shape()));
  const Shape out_shape{g.n, g.oh, g.ow, g.o};
  std::unique_ptr<Epilogue<T>> epilogue;
  T* out = nullptr;
  if constexpr (fused) {
    epilogue = std::make_unique<Epilogue<T>>(ctx, out_shape, 2);
    out = epilogue->product();
  } else {
    out = ctx.allocate_output(0, out_shape).data<T>();
  }
  Epilogue<T>* in_place = epilogue && epilogue->in_place() ? epilogue.get() : nullptr;
  const T* px = x.data<T>();
  const T* pf = f.data<T>();
  run_conv_algorithm<T>(ctx, ConvPass::kForward, g, candidates<T>(g, direct_shape(g), true), out,
                        out_shape.num_elements(), [&](ConvAlgorithm algo, T* py) {
    if (in_place) in_place->bind_product(py);
    if (algo == ConvAlgorithm::kDirect) {
      GemmEpilogue finished;
      if (in_place)
        finished = [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) { in_place->block(i0, i1, j0, j1); };
      direct_conv2d(direct_shape(g), px, pf, py, ctx.thread_pool(), finished);
      return;
    }
    if (algo == ConvAlgorithm::kWinograd) {
      winograd_conv2d(direct_shape(g), px, pf, py, ctx.thread_pool());
      if (in_place) in_place->run_all(ctx);
      return;
    }
    const int64_t chunk = g.chunk(), rows = g.rows_per_image(), kkc = g.kkc();
    // Images [b0, b1), with `pool` splitting each GEMM (null inside a per-thread share).
    auto images = [&](int64_t b0, int64_t b1, ThreadPool* pool) {
      Scratch<T> buf;
      for (int64_t n0 = b0; n0 < b1; n0 += chunk) {
        const int64_t count = std::min(chunk, b1 - n0);
        const T* col = col_of(g, px, n0, count, buf);
        GemmEpilogue finished;
        if (in_place)
          finished = [&, row0 = n0 * rows](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
            in_place->block(row0 + i0, row0 + i1, j0, j1);
          };
        gemm(false, false, count * rows, g.o, kkc, T(1), col, kkc, pf, g.o, T(0),
             py + n0 * rows * g.o, g.o, pool, finished);
      }
    };
    for_images(ctx, g.n, g.pointwise(), images);
  });
  if (epilogue && !in_place) epilogue->finish(ctx);
}

template <typename T>
void conv2d_backprop_input_kernel(KernelContext& ctx) {
  const Tensor& like = ctx.input(0);
  const Tensor& f = ctx.input(1);
  const Tensor& dy = ctx.input(2);
  ConvGeom g = conv_geom(kernels::conv_backprop_geometry(ctx));
  Tensor& dx = ctx.allocate_output(0, like.shape());
  const T* pf = f.data<T>();
  const T* pdy = dy.data<T>();
  const int64_t rows = g.rows_per_image(), kkc = g.kkc();
  if (g.pointwise()) {  // dx = dy x w^T directly
    gemm(false, true, g.n * rows, kkc, g.o, T(1), pdy, g.o, pf, g.o, T(0), dx.data<T>(), kkc,
         ctx.thread_pool());
    return;
  }
  run_conv_algorithm<T>(ctx, ConvPass::kInputGradient, g, candidates<T>(g, direct_input_grad_shape(g), true),
                        dx.data<T>(), dx.num_elements(), [&](ConvAlgorithm algo, T* pdx) {
    if (algo == ConvAlgorithm::kDirect || algo == ConvAlgorithm::kWinograd) {
      const std::vector<T> rotated = rotated_filter(g, pf);
      if (algo == ConvAlgorithm::kWinograd)
        return winograd_conv2d(direct_input_grad_shape(g), pdy, rotated.data(), pdx, ctx.thread_pool());
      return direct_conv2d(direct_input_grad_shape(g), pdy, rotated.data(), pdx, ctx.thread_pool());
    }
    const int64_t chunk = g.chunk(), image = g.h * g.w * g.c;
    auto images = [&](int64_t b0, int64_t b1, ThreadPool* pool) {
      std::fill(pdx + b0 * image, pdx + b1 * image, T(0));
      Scratch<T> buf;
      for (int64_t n0 = b0; n0 < b1; n0 += chunk) {
        const int64_t count = std::min(chunk, b1 - n0);
        T* dcol = buf.get(count * rows * kkc);
        gemm(false, true, count * rows, kkc, g.o, T(1), pdy + n0 * rows * g.o, g.o, pf, g.o, T(0),
             dcol, kkc, pool);
        col2im_add(g, dcol, count, pdx + n0 * image);
      }
    };
    for_images(ctx, g.n, false, images);
  });
}

// The filter gradient by im2col + GEMM into pdw (size elements), split over the batch.
template <typename T>
void filter_grad_gemm(KernelContext& ctx, const ConvGeom& g, const T* px, const T* pdy, T* pdw, int64_t size) {
  const int64_t rows = g.rows_per_image(), kkc = g.kkc();
  const int64_t chunk = g.chunk();
  // dw (= out, zeroed first) += the gradient of images [b0, b1).
  auto images = [&](int64_t b0, int64_t b1, T* out, ThreadPool* pool) {
    std::fill(out, out + size, T(0));
    Scratch<T> buf;
    for (int64_t n0 = b0; n0 < b1; n0 += chunk) {
      const int64_t count = std::min(chunk, b1 - n0);
      const T* col = col_of(g, px, n0, count, buf);
      gemm(true, false, kkc, g.o, count * rows, T(1), col, kkc, pdy + n0 * rows * g.o, g.o, T(1),
           out, g.o, pool);
    }
  };
  const int64_t parts = std::min<int64_t>(ctx.num_threads(), g.n);
  if (parts <= 1 || g.n * rows * kkc * g.o < (int64_t{1} << 20)) {
    images(0, g.n, pdw, ctx.thread_pool());
    return;
  }
  // One partial gradient per share of the batch (share 0 writes dw), summed in share order.
  std::vector<T> partials(static_cast<size_t>((parts - 1) * size));
  ctx.parallel_for(parts, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p)
      images(ThreadPool::chunk_begin(g.n, parts, p), ThreadPool::chunk_begin(g.n, parts, p + 1),
             p == 0 ? pdw : partials.data() + (p - 1) * size, nullptr);
  });
  ctx.parallel_for(size, 1 << 14, [&](int64_t i0, int64_t i1) {
    for (int64_t p = 1; p < parts; ++p) {
      const T* src = partials.data() + (p - 1) * size;
      for (int64_t i = i0; i < i1; ++i) pdw[i] += src[i];
    }
  });
}

template <typename T>
void conv2d_backprop_filter_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& like = ctx.input(1);
  const Tensor& dy = ctx.input(2);
  ConvGeom g = conv_geom(kernels::conv_backprop_geometry(ctx));
  Tensor& dw = ctx.allocate_output(0, like.shape());
  const T* px = x.data<T>();
  const T* pdy = dy.data<T>();
  run_conv_algorithm<T>(ctx, ConvPass::kFilterGradient, g, candidates<T>(g, direct_shape(g), false), dw.data<T>(),
                        dw.num_elements(), [&](ConvAlgorithm algo, T* pdw) {
    if (algo == ConvAlgorithm::kDirect) return direct_conv2d_filter_grad(direct_shape(g), px, pdy, pdw, ctx.thread_pool());
    filter_grad_gemm(ctx, g, px, pdy, pdw, dw.num_elements());
  });
}

}  // namespace

SPIRE_REGISTER_KERNEL("Conv2D", DeviceType::CPU, (conv2d_kernel<float, false>), DType::F32);
SPIRE_REGISTER_KERNEL("Conv2D", DeviceType::CPU, (conv2d_kernel<double, false>), DType::F64);
SPIRE_REGISTER_KERNEL("FusedConv2D", DeviceType::CPU, (conv2d_kernel<float, true>), DType::F32);
SPIRE_REGISTER_KERNEL("FusedConv2D", DeviceType::CPU, (conv2d_kernel<double, true>), DType::F64);

namespace {
// Conv2D's epilogue op (core/fusion.h): what the fusion pass may make of a Conv2D.
struct EpilogueRegistrar {
  EpilogueRegistrar() {
    for (DType t : {DType::F32, DType::F64}) register_epilogue(DeviceType::CPU, "Conv2D", t, "FusedConv2D");
  }
} epilogue_registrar;
}  // namespace
SPIRE_REGISTER_KERNEL("Conv2DBackpropInput", DeviceType::CPU, conv2d_backprop_input_kernel<float>,
                      DType::F32);
SPIRE_REGISTER_KERNEL("Conv2DBackpropInput", DeviceType::CPU,
                      conv2d_backprop_input_kernel<double>, DType::F64);
SPIRE_REGISTER_KERNEL("Conv2DBackpropFilter", DeviceType::CPU,
                      conv2d_backprop_filter_kernel<float>, DType::F32);
SPIRE_REGISTER_KERNEL("Conv2DBackpropFilter", DeviceType::CPU,
                      conv2d_backprop_filter_kernel<double>, DType::F64);

}  // namespace spire::cpu
