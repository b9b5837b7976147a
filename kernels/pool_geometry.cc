// Host-side planning of the pooling ops (see pool_geometry.h).
#include "kernels/pool_geometry.h"

#include <string>
#include <vector>

#include "core/ops/nn_ops.h"

namespace spire::kernels {

PoolGeometry pool_geometry(KernelContext& ctx, const Shape& in) {
  if (in.rank() != 4) ctx.fail("input must be NHWC (rank 4)");
  auto ksize = ctx.attr<std::vector<int64_t>>("ksize");
  auto strides = ctx.attr<std::vector<int64_t>>("strides");
  const std::string padding = ctx.attr<std::string>("padding");
  if (ksize.size() != 2 || strides.size() != 2) ctx.fail("ksize and strides need 2 entries");
  ops::WindowDim hd, wd;
  std::string err = ops::window_dim(in[1], ksize[0], strides[0], 1, padding, &hd);
  if (err.empty()) err = ops::window_dim(in[2], ksize[1], strides[1], 1, padding, &wd);
  if (!err.empty()) ctx.fail(err);
  PoolGeometry g;
  g.n = in[0], g.h = in[1], g.w = in[2], g.c = in[3];
  g.kh = ksize[0], g.kw = ksize[1], g.sh = strides[0], g.sw = strides[1];
  g.oh = hd.out, g.ow = wd.out, g.pt = hd.pad_before, g.pl = wd.pad_before;
  return g;
}

void expect_pool_shape(KernelContext& ctx, const char* what, const Tensor& t, const Shape& want) {
  if (t.shape() != want)
    ctx.fail(what, " has shape ", t.shape().to_string(), ", expected ", want.to_string());
}

}  // namespace spire::kernels
