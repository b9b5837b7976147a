#include "kernels/batch_norm_attrs.h"

namespace spire::kernels {

BatchNormView batch_norm_view(KernelContext& ctx, int x_index, int first_param, int num_params) {
  const Shape& s = ctx.input(x_index).shape();
  const int rank = s.rank();
  const int64_t axis_arg = ctx.attr<int64_t>("axis");
  if (rank < 1 || axis_arg < -rank || axis_arg >= rank)
    ctx.fail("axis ", axis_arg, " is out of range for x of shape ", s.to_string());
  const int axis = static_cast<int>(axis_arg < 0 ? axis_arg + rank : axis_arg);
  BatchNormView v;
  v.channels = s[axis];
  for (int i = 0; i < axis; ++i) v.outer *= s[i];
  for (int i = axis + 1; i < rank; ++i) v.inner *= s[i];
  for (int i = first_param; i < first_param + num_params; ++i) {
    const Shape& p = ctx.input(i).shape();
    if (p.rank() != 1 || p[0] != v.channels)
      ctx.fail("input ", i, " must have shape [", v.channels, "], got ", p.to_string());
  }
  if (x_index > 0 && ctx.input(0).shape() != s)
    ctx.fail("dy ", ctx.input(0).shape().to_string(), " and x ", s.to_string(), " differ");
  return v;
}

}  // namespace spire::kernels
