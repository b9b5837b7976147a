// Geometry of a 2-D convolution (see conv_geometry.h).
#include "kernels/conv_geometry.h"

#include <string>
#include <vector>

#include "core/ops/nn_ops.h"

namespace spire::kernels {

ConvGeometry conv_geometry(KernelContext& ctx, const Shape& in, const Shape& f) {
  if (in.rank() != 4) ctx.fail("input must be NHWC (rank 4)");
  if (f.rank() != 4) ctx.fail("filter must be HWIO (rank 4)");
  if (in[3] != f[2])
    ctx.fail("input channels ", in[3], " do not match the filter's input channels ", f[2]);
  auto strides = ctx.attr<std::vector<int64_t>>("strides");
  auto dil = ctx.attr<std::vector<int64_t>>("dilations");
  const std::string padding = ctx.attr<std::string>("padding");
  if (strides.size() != 2 || dil.size() != 2) ctx.fail("strides and dilations need 2 entries");
  ops::WindowDim hd, wd;
  std::string err = ops::window_dim(in[1], f[0], strides[0], dil[0], padding, &hd);
  if (err.empty()) err = ops::window_dim(in[2], f[1], strides[1], dil[1], padding, &wd);
  if (!err.empty()) ctx.fail(err);
  return ConvGeometry{in[0],      in[1],      in[2],  in[3],         f[0],
                      f[1],       f[3],       hd.out, wd.out,        strides[0],
                      strides[1], dil[0],     dil[1], hd.pad_before, wd.pad_before};
}

ConvGeometry conv_backprop_geometry(KernelContext& ctx) {
  const ConvGeometry g = conv_geometry(ctx, ctx.input(0).shape(), ctx.input(1).shape());
  const Tensor& dy = ctx.input(2);
  Shape want{g.n, g.oh, g.ow, g.o};
  if (dy.shape() != want)
    ctx.fail("dy has shape ", dy.shape().to_string(), ", expected ", want.to_string());
  return g;
}

}  // namespace spire::kernels
