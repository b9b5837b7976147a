// Shape checks of the elementwise kernels, shared by the CPU and CUDA
// kernels (see kernels/elementwise_attrs.h).
#include "kernels/elementwise_attrs.h"

namespace spire::kernels {

Shape broadcast_or_fail(KernelContext& ctx, const Shape& a, const Shape& b) {
  Shape out;
  if (!broadcast_shapes(a, b, &out) || !out.is_fully_defined())
    ctx.fail("shapes ", a.to_string(), " and ", b.to_string(), " cannot be broadcast together");
  return out;
}

Shape select_shape(KernelContext& ctx) {
  return broadcast_or_fail(ctx, broadcast_or_fail(ctx, ctx.input(0).shape(), ctx.input(1).shape()),
                           ctx.input(2).shape());
}

void check_same_shapes(KernelContext& ctx) {
  const Tensor& x0 = ctx.input(0);
  for (int i = 1; i < ctx.num_inputs(); ++i)
    if (ctx.input(i).shape() != x0.shape()) ctx.fail("all inputs must have the same shape");
}

bool broadcast_or_forward(KernelContext& ctx, const Shape& target) {
  const Tensor& x = ctx.input(0);
  Shape check;
  if (!target.is_fully_defined() || !broadcast_shapes(x.shape(), target, &check) || check != target)
    ctx.fail("cannot broadcast ", x.shape().to_string(), " to ", target.to_string());
  if (x.shape() != target) return false;
  ctx.set_output(0, x);
  return true;
}

Tensor* sum_to_like_output(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Shape& target = ctx.input(1).shape();
  if (x.shape() == target) {
    ctx.set_output(0, x);
    return nullptr;
  }
  Shape check;
  if (!broadcast_shapes(x.shape(), target, &check) || check != x.shape())
    ctx.fail("cannot sum ", x.shape().to_string(), " down to ", target.to_string());
  return &ctx.allocate_output(0, target);
}

Tensor* broadcast_output(KernelContext& ctx, const Shape& target) {
  if (broadcast_or_forward(ctx, target)) return nullptr;
  return &ctx.allocate_output(0, target);
}

}  // namespace spire::kernels
