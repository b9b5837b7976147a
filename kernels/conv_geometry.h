// Geometry of an NHWC/HWIO 2-D convolution (Conv2D and its two gradients), shared by the CPU
// kernels (kernels/cpu/conv_kernels.cc) and the CUDA kernels (kernels/cuda/conv_kernels.cu):
// the attr and shape checks, TF's SAME/VALID output size and padding (ops::window_dim), and
// the dy shape check of the gradients, so both devices accept the same problems and raise
// the same errors. Host code only; no device code.
#pragma once

#include <cstdint>
#include <string>

#include "core/kernel_registry.h"

namespace spire::kernels {

/// A convolution of input [n, h, w, c] with filter [kh, kw, c, o] into output
/// [n, oh, ow, o]; window (oy, ox) starts at input row oy * sh - pt and column ox * sw - pl
/// and its taps are dh / dw apart (pt, pl: the padding before, TF's pad_total / 2).
struct ConvGeometry {
  int64_t n, h, w, c;      // input
  int64_t kh, kw, o;       // filter
  int64_t oh, ow;          // output
  int64_t sh, sw, dh, dw;  // strides, dilations
  int64_t pt, pl;          // padding before (top, left)
};

/// Checks the input shape `in` (NHWC) and filter shape `f` (HWIO) of a convolution node
/// against each other and its strides / dilations / padding attrs, and returns the
/// geometry; fails through ctx.
ConvGeometry conv_geometry(KernelContext& ctx, const Shape& in, const Shape& f);

/// Conv2DBackpropInput / Conv2DBackpropFilter: the geometry of input 0's shape (the input
/// or a tensor shaped like it) and input 1's shape (the filter or one shaped like it), after
/// checking that input 2 (dy) has its output shape [n, oh, ow, o]; fails through ctx.
ConvGeometry conv_backprop_geometry(KernelContext& ctx);

/// cuDNN's legacy descriptors take int dimensions and address each tensor with int
/// offsets: the reason `g` (with `extra_h` / `extra_w` zero rows / columns appended to the
/// input, as the CUDA kernels pad asymmetric SAME) exceeds them, or "" when it fits. The
/// CUDA kernels fail with this message instead of truncating sizes to int.
std::string cudnn_limit_violation(const ConvGeometry& g, int64_t extra_h, int64_t extra_w);

}  // namespace spire::kernels
