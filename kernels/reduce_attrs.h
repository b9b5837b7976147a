// Host-side attribute resolution of the reductions (core/ops/reduction_ops.cc)
// and the softmax ops (core/ops/nn_ops.cc), shared by the CPU kernels
// (kernels/cpu/reduction_kernels.cc, kernels/cpu/softmax_kernels.cc) and the
// CUDA kernels (kernels/cuda/reduction_kernels.cu,
// kernels/cuda/softmax_kernels.cu): axes are resolved and checked (ctx.fail,
// same messages on every device) and output shapes computed here, once.
// Plain C++ (no CUDA); compiled from kernels/reduce_attrs.cc.
#pragma once

#include <vector>

#include "core/kernel_registry.h"
#include "kernels/reduce_index.h"

namespace spire::kernels {

/// The axes / keepdims attrs of Sum, Mean, Max, Min and Prod resolved
/// against the input shape.
struct ReduceAxes {
  std::vector<bool> is_reduced;  // per input dim (all when axes is empty)
  Shape out_shape;               // the kept dims (reduced ones as 1 with keepdims)
};
ReduceAxes reduce_axes(KernelContext& ctx, const Shape& in);

/// ArgMax's axis attr resolved against the input shape: the input seen as
/// [outer, len, inner] around the axis, and the output shape (the input's
/// without the axis).
struct ArgMaxAxis {
  ReduceBlock block;
  Shape out_shape;
};
ArgMaxAxis argmax_axis(KernelContext& ctx, const Shape& in);

/// Softmax / LogSoftmax: the input seen as [outer, len, inner] around the
/// axis attr (rank >= 1).
ReduceBlock softmax_axis_block(KernelContext& ctx, const Shape& in);

/// SparseSoftmaxCrossEntropyWithLogits and InTopK: checks logits (input 0) [N, C] and
/// labels (input 1) [N], then calls f(L{}) with L the label type (i32 or i64).
template <typename F>
void with_sparse_xent_labels(KernelContext& ctx, F&& f) {
  const Tensor& logits = ctx.input(0);
  const Tensor& labels = ctx.input(1);
  if (logits.rank() != 2 || labels.rank() != 1 || labels.dim(0) != logits.dim(0))
    ctx.fail("expected logits [N, C] and labels [N]");
  if (labels.dtype() == DType::I32) f(int32_t{});
  else if (labels.dtype() == DType::I64) f(int64_t{});
  else ctx.fail("labels must be i32 or i64");
}

}  // namespace spire::kernels
