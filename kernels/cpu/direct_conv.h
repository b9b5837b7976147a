// Direct ("implicit GEMM") convolution for the CPU kernels of Conv2D and its two gradients
// (kernels/cpu/conv_kernels.cc), for stride-1, undilated NHWC convolutions: the ResNets'
// 3x3 layers. Instead of writing an im2col matrix (kh*kw copies of the input) and packing it
// again for the GEMM, each thread copies the input rows it needs once into a zero-padded
// strip and a register-tiled micro-kernel reads the taps straight from it:
//   y[n, oy, ox, o]   = sum_{ky, kx, c} P[oy + ky, ox + kx, c] * w[ky, kx, c, o]
//   dw[ky, kx, c, o] += sum_{n, oy, ox} P[oy + ky, ox + kx, c] * dy[n, oy, ox, o]
// where P is the input with pt rows and pl columns of zeros before it (any padding, also
// TF's asymmetric SAME). The input gradient of a stride-1 convolution is the same forward
// pass over dy with the filter rotated by 180 degrees and its channels swapped, padded by
// kh-1-pt / kw-1-pl. Written once with vector extensions; compiled per instruction set
// (AVX-512, AVX2+FMA) like kernels/cpu/gemm.cc and picked at run time. Threads split the
// output rows; the forward result does not depend on the thread count, the filter gradient
// sums per-thread partials in a fixed order. SPIRE_CPU_DIRECT_CONV=0 in the environment turns
// the direct path off (every convolution then lowers to im2col + GEMM), for A/B measurements.
// Few input channels (an image model's first layer) suit it too: im2col's GEMM then has a
// depth of kh*kw*c (9 for MNIST's first layer) and spends its time packing.
#pragma once

#include <cstdint>

#include "kernels/cpu/gemm.h"

namespace spire {
class ThreadPool;
}

namespace spire::cpu {

/// A stride-1, undilated convolution of x [n, h, w, c] with a filter [kh, kw, c, o] into
/// [n, oh, ow, o]: output (oy, ox) reads input rows oy - pt .. oy - pt + kh - 1 and columns
/// ox - pl .. ox - pl + kw - 1 (zero outside the input).
struct DirectConvShape {
  int64_t n, h, w, c;
  int64_t kh, kw, o;
  int64_t oh, ow;
  int64_t pt, pl;
};

/// Whether the direct kernels take this problem on this CPU for element type T (f32 or f64):
/// an AVX2 or AVX-512 CPU, o a whole number of vectors, at most 1024 filter rows
/// (kh * kw * c; deeper filters suit the blocked GEMM), and not turned off by
/// SPIRE_CPU_DIRECT_CONV=0.
template <class T>
bool direct_conv_applies(const DirectConvShape& s);

/// y = the convolution of x with w; y is [n, oh, ow, o] and overwritten. Requires
/// direct_conv_applies<T>(s). `pool` may be null.
/// With an `epilogue`, tells it of each band of finished output rows (rows of y as a
/// [n*oh*ow, o] matrix, all columns) while the band is in the computing core's cache.
void direct_conv2d(const DirectConvShape& s, const float* x, const float* w, float* y,
                   ThreadPool* pool, const GemmEpilogue& epilogue = {});
void direct_conv2d(const DirectConvShape& s, const double* x, const double* w, double* y,
                   ThreadPool* pool, const GemmEpilogue& epilogue = {});

/// dw [kh, kw, c, o] = the filter gradient of that convolution for output gradient dy
/// (overwritten). Requires direct_conv_applies<T>(s).
void direct_conv2d_filter_grad(const DirectConvShape& s, const float* x, const float* dy, float* dw,
                               ThreadPool* pool);
void direct_conv2d_filter_grad(const DirectConvShape& s, const double* x, const double* dy,
                               double* dw, ThreadPool* pool);

namespace detail {
/// The kernels above forced onto one instruction set (tests run every variant this CPU has);
/// `isa` must be kAvx2 or kAvx512 and supported.
void direct_conv2d_with_isa(GemmIsa isa, const DirectConvShape& s, const float* x, const float* w,
                            float* y, ThreadPool* pool);
void direct_conv2d_with_isa(GemmIsa isa, const DirectConvShape& s, const double* x, const double* w,
                            double* y, ThreadPool* pool);
void direct_conv2d_filter_grad_with_isa(GemmIsa isa, const DirectConvShape& s, const float* x,
                                        const float* dy, float* dw, ThreadPool* pool);
void direct_conv2d_filter_grad_with_isa(GemmIsa isa, const DirectConvShape& s, const double* x,
                                        const double* dy, double* dw, ThreadPool* pool);
/// Turns the direct path on or off for the whole process (tests compare it with im2col on
/// the same shapes); returns the previous setting. The default comes from
/// SPIRE_CPU_DIRECT_CONV.
bool set_direct_conv_enabled(bool enabled);
/// The vector width (elements of T) of `isa`'s kernels: o must be a multiple of it.
template <class T>
int direct_conv_lanes(GemmIsa isa);
}  // namespace detail

}  // namespace spire::cpu
