// Host-side checks of the LayerNorm and LayerNormGrad kernels (ops in
// core/ops/norm_ops.cc), shared by the CPU kernels
// (kernels/cpu/layer_norm_kernels.cc) and the CUDA kernels
// (kernels/cuda/layer_norm_kernels.cu): the run-time shapes are checked with
// ctx.fail (the same messages on every device) and the input seen as
// [rows, C]. Plain C++ (no CUDA); compiled from kernels/layer_norm_attrs.cc.
#pragma once

#include <cstdint>

#include "core/kernel_registry.h"

namespace spire::kernels {

/// x seen as [rows, c] (c = the last dim, rows = the product of the others).
struct LayerNormDims {
  int64_t rows = 0;
  int64_t c = 0;
  /// The shape of mean and rstd: x's shape without its last dim.
  Shape stats_shape;
};

/// LayerNorm(x, gamma[, beta]): checks x has rank >= 1 and a last dim >= 1,
/// gamma (and beta when given) shape [C], and returns the dims.
LayerNormDims layer_norm_dims(KernelContext& ctx);

/// LayerNormGrad(dy, x, gamma, mean, rstd): checks dy has x's shape, gamma
/// shape [C] and mean/rstd x's shape without the last dim.
LayerNormDims layer_norm_grad_dims(KernelContext& ctx);

}  // namespace spire::kernels
