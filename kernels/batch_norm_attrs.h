// Host-side input checks of the fused batch-norm kernels (FusedBatchNorm and
// FusedBatchNormGrad, core/ops/batch_norm_ops.h), shared by the CPU kernels
// (kernels/cpu/batch_norm_kernels.cc) and the CUDA kernels
// (kernels/cuda/batch_norm_kernels.cu): the run-time shapes are checked
// (ctx.fail, same messages on every device) and the [outer, C, inner] view
// computed once. Plain C++; compiled from kernels/batch_norm_attrs.cc.
#pragma once

#include "core/kernel_registry.h"
#include "kernels/batch_norm_math.h"

namespace spire::kernels {

/// The view of input `x_index` around the "axis" attr; inputs
/// [first_param, first_param + num_params) must be [C] vectors.
BatchNormView batch_norm_view(KernelContext& ctx, int x_index, int first_param, int num_params);

}  // namespace spire::kernels
