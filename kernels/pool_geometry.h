// Host-side planning of the NHWC pooling ops (MaxPool, MaxPoolGrad, MaxPoolGradGrad,
// AvgPool, AvgPoolGrad), shared by the CPU kernels (kernels/cpu/pool_kernels.cc) and the
// CUDA kernels (kernels/cuda/pool_kernels.cu): the attr and shape checks and TF's SAME/VALID
// window geometry (ops::window_dim) into the kernels::PoolGeometry of kernels/pool_index.h,
// so both devices accept the same problems and raise the same errors. Host code only.
#pragma once

#include "core/kernel_registry.h"
#include "kernels/pool_index.h"

namespace spire::kernels {

/// Checks a pooling node's input shape `in` (NHWC) and its ksize / strides / padding attrs
/// and returns the geometry; fails through ctx.
PoolGeometry pool_geometry(KernelContext& ctx, const Shape& in);

/// The input shape [n, h, w, c] of g.
inline Shape pool_in_shape(const PoolGeometry& g) { return Shape{g.n, g.h, g.w, g.c}; }
/// The output shape [n, oh, ow, c] of g.
inline Shape pool_out_shape(const PoolGeometry& g) { return Shape{g.n, g.oh, g.ow, g.c}; }

/// Fails through ctx ("<what> has shape ..., expected ...") unless t has shape `want`.
void expect_pool_shape(KernelContext& ctx, const char* what, const Tensor& t, const Shape& want);

}  // namespace spire::kernels
