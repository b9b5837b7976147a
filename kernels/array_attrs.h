// Host-side attribute resolution and shape checks of the shape and indexing
// ops (core/ops/array_ops.cc), shared by the CPU kernels
// (kernels/cpu/array_kernels.cc) and the CUDA kernels
// (kernels/cuda/array_kernels.cu): each op's attrs are parsed, checked (with
// ctx.fail and the same messages on every device) and turned into output
// shapes here, once. The view ops (Reshape, ReshapeLike, ExpandDims,
// Squeeze) move no data, so their whole kernels live here and both devices
// register them. Plain C++ (no CUDA), compiled into the library from
// kernels/array_attrs.cc.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "core/kernel_registry.h"

namespace spire::kernels {

using Ints = std::vector<int64_t>;

/// Calls f(E{}) with E an unsigned integer type of `esize` bytes (the data
/// movers work on raw elements); throws "<who>: unsupported element size".
template <typename F>
void with_elem(size_t esize, const char* who, F&& f) {
  switch (esize) {
    case 1: f(uint8_t{}); return;
    case 2: f(uint16_t{}); return;
    case 4: f(uint32_t{}); return;
    case 8: f(uint64_t{}); return;
    default: throw_error(who, ": unsupported element size ", esize);
  }
}

/// Registers kernel_for(T{}) (a KernelFn) for op on `device` for T in f32,
/// f64, i32 and i64.
template <typename F>
void register_numeric(const char* op, DeviceType device, F kernel_for) {
  auto& reg = KernelRegistry::global();
  reg.add(op, device, DType::F32, kernel_for(float{}));
  reg.add(op, device, DType::F64, kernel_for(double{}));
  reg.add(op, device, DType::I32, kernel_for(int32_t{}));
  reg.add(op, device, DType::I64, kernel_for(int64_t{}));
}

/// Registers K<T>::run for op on `device` for f32, f64, i32 and i64.
template <template <typename> class K>
void register_numeric(const char* op, DeviceType device) {
  register_numeric(op, device, [](auto zero) { return KernelFn(K<decltype(zero)>::run); });
}

/// Registers each (op, kernel) for `device` and every dtype (f32, f64, i32,
/// i64, bool): for the ops that move raw elements.
void register_any_dtype(DeviceType device,
                        std::initializer_list<std::pair<const char*, KernelFn>> kernels);

/// Registers the view kernels below (Reshape, ReshapeLike, ExpandDims,
/// Squeeze) for `device` and every dtype.
void register_view_kernels(DeviceType device);

/// `axis` in [-rank, rank) made non-negative; fails when out of range.
int axis_or_fail(KernelContext& ctx, int64_t axis, int rank);
/// The product of d[from, to).
int64_t dims_prod(const Ints& d, size_t from, size_t to);
/// "[a, b, c]".
std::string ints_str(const Ints& v);

// ---- views (whole kernels: no data moves, any device) ------------------------

void reshape_view_kernel(KernelContext& ctx);
void reshape_like_view_kernel(KernelContext& ctx);
void expand_dims_view_kernel(KernelContext& ctx);
void squeeze_view_kernel(KernelContext& ctx);

// ---- attrs and output shapes of the data-moving ops ------------------------------

/// Transpose's perm attr of input x (empty = reversed dims), checked to be a
/// permutation of x's dims; `out_shape` gets the output shape.
Ints transpose_perm(KernelContext& ctx, const Tensor& x, Shape* out_shape);

/// Concat: the resolved axis and the output dims, every input checked to
/// match input 0 outside the axis.
struct ConcatArgs {
  int axis = 0;
  Ints dims;
};
ConcatArgs concat_args(KernelContext& ctx);

/// Split / SplitLike: the resolved axis and the sizes of the parts along it.
struct SplitArgs {
  int axis = 0;
  Ints sizes;
};
/// Split of input 0 by the num / sizes attrs (-1 in sizes = the rest).
SplitArgs split_args(KernelContext& ctx);
/// SplitLike of input 0 into the sizes of inputs 1.. along the axis attr.
SplitArgs split_like_args(KernelContext& ctx);

/// Slice / SliceGrad: the begin attr and the resolved box (size attr with
/// -1 = to the end) inside shape `big`.
struct SliceArgs {
  Ints begin, box;
};
/// Slice of input 0.
SliceArgs slice_args(KernelContext& ctx);
/// SliceGrad: input 0 (grad, checked to have the box's shape) into the shape
/// of input 1.
SliceArgs slice_grad_args(KernelContext& ctx);

/// Pad / PadGrad: the leading padding per dim and the dims of the padded
/// (Pad) or unpadded (PadGrad) tensor.
struct PadArgs {
  Ints before, dims;
};
/// Pad of input 0: dims are the padded output dims.
PadArgs pad_args(KernelContext& ctx);
/// PadGrad of input 0 (grad) like input 1: dims are input 1's dims (checked).
PadArgs pad_grad_args(KernelContext& ctx);

/// Gather / GatherGrad: the axis attr resolved against `params` (which must
/// have rank >= 1; `what` names it in the error).
int gather_axis(KernelContext& ctx, const Shape& params, const char* what);
/// The gather output dims: params dims with dim `axis` replaced by the
/// indices' dims.
Ints gather_dims(const Ints& params, int axis, const Shape& indices);
/// GatherGrad: the axis of input 2 (like); input 0 (grad) is checked to have
/// the gather shape of like and input 1 (indices).
int gather_grad_axis(KernelContext& ctx);

/// OneHot: the output dims (the indices' dims, then depth).
Ints one_hot_dims(KernelContext& ctx);

/// Tile of input 0: the multiples and the output dims.
Ints tile_dims(KernelContext& ctx, Ints* multiples);
/// TileGrad: the multiples, input 0 (grad) checked to be input 1 (like) tiled.
Ints tile_grad_multiples(KernelContext& ctx);

}  // namespace spire::kernels
