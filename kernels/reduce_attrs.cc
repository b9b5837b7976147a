// Attribute resolution of the reductions and softmax ops, shared by the CPU
// and CUDA kernels (see kernels/reduce_attrs.h).
#include "kernels/reduce_attrs.h"

#include <utility>

namespace spire::kernels {

ReduceAxes reduce_axes(KernelContext& ctx, const Shape& in) {
  const int rank = in.rank();
  const auto axes = ctx.attr<std::vector<int64_t>>("axes");
  const bool keep = ctx.attr<bool>("keepdims");
  ReduceAxes r;
  r.is_reduced.assign(static_cast<size_t>(rank), axes.empty());
  for (int64_t a : axes) {
    if (a < -rank || a >= rank) ctx.fail("axis ", a, " is out of range for rank ", rank);
    r.is_reduced[static_cast<size_t>(a < 0 ? a + rank : a)] = true;
  }
  std::vector<int64_t> out_dims;
  for (int d = 0; d < rank; ++d) {
    if (!r.is_reduced[static_cast<size_t>(d)]) out_dims.push_back(in[d]);
    else if (keep) out_dims.push_back(1);
  }
  r.out_shape = Shape(std::move(out_dims));
  return r;
}

ArgMaxAxis argmax_axis(KernelContext& ctx, const Shape& in) {
  const int rank = in.rank();
  const int64_t a = ctx.attr<int64_t>("axis");
  if (rank == 0 || a < -rank || a >= rank) ctx.fail("axis ", a, " is out of range for rank ", rank);
  const int axis = static_cast<int>(a < 0 ? a + rank : a);
  ArgMaxAxis r;
  r.block.len = in[axis];
  std::vector<int64_t> out_dims;
  for (int i = 0; i < rank; ++i) {
    if (i < axis) r.block.outer *= in[i];
    if (i > axis) r.block.inner *= in[i];
    if (i != axis) out_dims.push_back(in[i]);
  }
  r.out_shape = Shape(std::move(out_dims));
  return r;
}

ReduceBlock softmax_axis_block(KernelContext& ctx, const Shape& s) {
  const int r = s.rank();
  int64_t axis = ctx.attr<int64_t>("axis");
  if (r < 1 || axis < -r || axis >= r) ctx.fail("axis ", axis, " is out of range for rank ", r);
  if (axis < 0) axis += r;
  ReduceBlock b;
  for (int i = 0; i < r; ++i) {
    if (i < axis) b.outer *= s[i];
    else if (i == axis) b.len = s[i];
    else b.inner *= s[i];
  }
  return b;
}

}  // namespace spire::kernels
