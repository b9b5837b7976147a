// Run-time shape checks of the LayerNorm kernels, shared by the CPU and CUDA
// kernels (see kernels/layer_norm_attrs.h).
#include "kernels/layer_norm_attrs.h"

#include <vector>

namespace spire::kernels {

namespace {

LayerNormDims dims_of(KernelContext& ctx, const Shape& x) {
  if (x.rank() < 1) ctx.fail("x must have rank >= 1 (the normalized axis is the last)");
  LayerNormDims d;
  d.c = x[x.rank() - 1];
  if (d.c < 1) ctx.fail("the normalized (last) dim of x must be >= 1, x has shape ", x.to_string());
  d.stats_shape = Shape(std::vector<int64_t>(x.dims().begin(), x.dims().end() - 1));
  d.rows = d.stats_shape.num_elements();
  return d;
}

void expect_vector(KernelContext& ctx, int i, const char* what, const LayerNormDims& d,
                   const Shape& x) {
  const Shape& s = ctx.input(i).shape();
  if (s.rank() != 1 || s[0] != d.c)
    ctx.fail(what, " must have shape [", d.c, "] (the last dim of x ", x.to_string(), "), got ",
             s.to_string());
}

}  // namespace

LayerNormDims layer_norm_dims(KernelContext& ctx) {
  const Shape& x = ctx.input(0).shape();
  LayerNormDims d = dims_of(ctx, x);
  expect_vector(ctx, 1, "gamma", d, x);
  if (ctx.num_inputs() > 2) expect_vector(ctx, 2, "beta", d, x);
  return d;
}

LayerNormDims layer_norm_grad_dims(KernelContext& ctx) {
  const Shape& x = ctx.input(1).shape();
  LayerNormDims d = dims_of(ctx, x);
  if (ctx.input(0).shape() != x)
    ctx.fail("dy has shape ", ctx.input(0).shape().to_string(), ", x ", x.to_string());
  expect_vector(ctx, 2, "gamma", d, x);
  for (int i : {3, 4})
    if (ctx.input(i).shape() != d.stats_shape)
      ctx.fail(i == 3 ? "mean" : "rstd", " must have shape ", d.stats_shape.to_string(),
               " (x's without its last dim), got ", ctx.input(i).shape().to_string());
  return d;
}

}  // namespace spire::kernels
