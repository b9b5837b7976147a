// Geometry of a 2-D convolution (see conv_geometry.h).
#include "kernels/conv_geometry.h"

#include <cstdint>
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

std::string cudnn_limit_violation(const ConvGeometry& g, int64_t extra_h, int64_t extra_w) {
  constexpr int64_t kMax = INT32_MAX;
  const struct {
    const char* what;
    int64_t value;
  } scalars[] = {{"batch", g.n},        {"input height", g.h + extra_h}, {"input width", g.w + extra_w},
                 {"channels", g.c},     {"filter height", g.kh},         {"filter width", g.kw},
                 {"filters", g.o},      {"output height", g.oh},         {"output width", g.ow},
                 {"stride", g.sh},      {"stride", g.sw},                {"dilation", g.dh},
                 {"dilation", g.dw},    {"padding", g.pt},               {"padding", g.pl}};
  for (const auto& s : scalars)
    if (s.value > kMax)
      return str_cat("cuDNN takes 32-bit sizes: the ", s.what, " ", s.value, " does not fit");
  auto elements = [](std::initializer_list<int64_t> dims) {
    int64_t n = 1;
    for (int64_t d : dims)
      if (__builtin_mul_overflow(n, d, &n)) return INT64_MAX;
    return n;
  };
  const struct {
    const char* what;
    int64_t n;
  } tensors[] = {{"input", elements({g.n, g.h + extra_h, g.w + extra_w, g.c})},
                 {"filter", elements({g.kh, g.kw, g.c, g.o})},
                 {"output", elements({g.n, g.oh, g.ow, g.o})}};
  for (const auto& t : tensors)
    if (t.n > kMax)
      return str_cat("cuDNN addresses each tensor with 32-bit offsets: the ", t.what, " has ",
                     t.n, " elements (at most ", kMax, ")");
  return {};
}

}  // namespace spire::kernels
