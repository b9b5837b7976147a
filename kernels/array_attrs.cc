// Attribute resolution and shape checks of the shape and indexing ops,
// shared by the CPU and CUDA kernels (see kernels/array_attrs.h).
#include "kernels/array_attrs.h"

namespace spire::kernels {

int axis_or_fail(KernelContext& ctx, int64_t axis, int rank) {
  if (axis < -rank || axis >= rank) ctx.fail("axis ", axis, " is out of range for rank ", rank);
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

int64_t dims_prod(const Ints& d, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to; ++i) p *= d[i];
  return p;
}

std::string ints_str(const Ints& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

void register_any_dtype(DeviceType device,
                        std::initializer_list<std::pair<const char*, KernelFn>> kernels) {
  for (const auto& [op, fn] : kernels)
    for (DType dt : {DType::F32, DType::F64, DType::I32, DType::I64, DType::Bool})
      KernelRegistry::global().add(op, device, dt, fn);
}

void register_view_kernels(DeviceType device) {
  register_any_dtype(device, {{"Reshape", reshape_view_kernel},
                              {"ReshapeLike", reshape_like_view_kernel},
                              {"ExpandDims", expand_dims_view_kernel},
                              {"Squeeze", squeeze_view_kernel}});
}

// ---- views ---------------------------------------------------------------------

void reshape_view_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Shape target = ctx.attr<Shape>("shape");
  int unknown = -1;
  int64_t known = 1;
  for (int i = 0; i < target.rank(); ++i) {
    if (target[i] < 0) unknown = i;
    else known *= target[i];
  }
  const int64_t n = x.num_elements();
  if (unknown >= 0) {
    if (known == 0 || n % known != 0)
      ctx.fail("cannot reshape a tensor of ", n, " elements into shape ", target.to_string());
    target.set_dim(unknown, n / known);
  } else if (known != n) {
    ctx.fail("cannot reshape a tensor of ", n, " elements into shape ", target.to_string(), " (",
             known, " elements)");
  }
  ctx.set_output(0, x.reshaped(target));
}

void reshape_like_view_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Shape& s = ctx.input(1).shape();
  if (s.num_elements() != x.num_elements())
    ctx.fail("cannot reshape ", x.shape().to_string(), " like ", s.to_string(),
             ": element counts differ");
  ctx.set_output(0, x.reshaped(s));
}

void expand_dims_view_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t a = ctx.attr<int64_t>("axis");
  if (a < -(x.rank() + 1) || a > x.rank())
    ctx.fail("axis ", a, " is out of range for inserting into rank ", x.rank());
  Ints dims = x.shape().dims();
  dims.insert(dims.begin() + (a < 0 ? a + x.rank() + 1 : a), 1);
  ctx.set_output(0, x.reshaped(Shape(dims)));
}

void squeeze_view_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Shape& static_shape = ctx.node().input(0).shape();
  Ints axes = ctx.attr<Ints>("axes");
  std::vector<bool> drop(static_cast<size_t>(x.rank()), false);
  if (axes.empty())  // the dims known to be 1 when the graph was built (see the op doc)
    for (int i = 0; i < x.rank(); ++i) drop[static_cast<size_t>(i)] = static_shape[i] == 1;
  for (int64_t a : axes) {
    const int i = axis_or_fail(ctx, a, x.rank());
    if (x.dim(i) != 1) ctx.fail("cannot squeeze axis ", a, " of size ", x.dim(i));
    drop[static_cast<size_t>(i)] = true;
  }
  Ints dims;
  for (int i = 0; i < x.rank(); ++i)
    if (!drop[static_cast<size_t>(i)]) dims.push_back(x.dim(i));
  ctx.set_output(0, x.reshaped(Shape(dims)));
}

// ---- transpose -------------------------------------------------------------------

Ints transpose_perm(KernelContext& ctx, const Tensor& x, Shape* out_shape) {
  const int r = x.rank();
  Ints perm = ctx.attr<Ints>("perm");
  if (perm.empty())
    for (int i = r - 1; i >= 0; --i) perm.push_back(i);
  if (static_cast<int>(perm.size()) != r) ctx.fail("perm ", ints_str(perm), " does not match rank ", r);
  Ints out_dims;
  std::vector<bool> seen(static_cast<size_t>(r), false);
  for (int64_t p : perm) {
    if (p < 0 || p >= r || seen[static_cast<size_t>(p)])
      ctx.fail("perm ", ints_str(perm), " is not a permutation");
    seen[static_cast<size_t>(p)] = true;
    out_dims.push_back(x.dim(static_cast<int>(p)));
  }
  *out_shape = Shape(out_dims);
  return perm;
}

// ---- concat and split --------------------------------------------------------------

ConcatArgs concat_args(KernelContext& ctx) {
  const Tensor& x0 = ctx.input(0);
  const int r = x0.rank();
  if (r == 0) ctx.fail("cannot concatenate scalars");
  ConcatArgs c;
  c.axis = axis_or_fail(ctx, ctx.attr<int64_t>("axis"), r);
  const int axis = c.axis;
  c.dims = x0.shape().dims();
  c.dims[static_cast<size_t>(axis)] = 0;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    const Shape& s = ctx.input(i).shape();
    bool ok = s.rank() == r;
    for (int d = 0; ok && d < r; ++d) ok = d == axis || s[d] == x0.dim(d);
    if (!ok)
      ctx.fail("input ", i, " has shape ", s.to_string(), ", which differs from ",
               x0.shape().to_string(), " outside axis ", axis);
    c.dims[static_cast<size_t>(axis)] += s[axis];
  }
  return c;
}

namespace {

// The split of input 0 along the axis attr, sizes still empty.
SplitArgs split_axis(KernelContext& ctx) {
  SplitArgs a;
  a.axis = axis_or_fail(ctx, ctx.attr<int64_t>("axis"), ctx.input(0).rank());
  return a;
}

}  // namespace

SplitArgs split_args(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  SplitArgs a = split_axis(ctx);
  const int axis = a.axis;
  const int64_t d = x.dim(axis);
  const int64_t num = ctx.attr<int64_t>("num");
  Ints& sizes = a.sizes;
  sizes = ctx.attr<Ints>("sizes");
  if (num > 0) {
    if (d % num != 0)
      ctx.fail("dimension ", axis, " of size ", d, " cannot be split into ", num, " equal parts");
    sizes.assign(static_cast<size_t>(num), d / num);
  } else {
    int64_t known = 0;
    int unknown = -1;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (sizes[i] < 0) unknown = static_cast<int>(i);
      else known += sizes[i];
    }
    if (unknown >= 0 ? known > d : known != d)
      ctx.fail("sizes ", ints_str(sizes), " do not add up to dimension ", axis, " of size ", d);
    if (unknown >= 0) sizes[static_cast<size_t>(unknown)] = d - known;
  }
  return a;
}

SplitArgs split_like_args(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  SplitArgs a = split_axis(ctx);
  const int axis = a.axis;
  int64_t total = 0;
  for (int i = 1; i < ctx.num_inputs(); ++i) {
    const Tensor& l = ctx.input(i);
    if (l.rank() != x.rank()) ctx.fail("input ", i, " has rank ", l.rank(), ", expected ", x.rank());
    a.sizes.push_back(l.dim(axis));
    total += l.dim(axis);
  }
  if (total != x.dim(axis))
    ctx.fail("the parts have ", total, " entries along axis ", axis, " but x has ", x.dim(axis));
  return a;
}

// ---- slice and pad -------------------------------------------------------------------

namespace {

// Resolves Slice's size (-1 = to the end) against shape s; fails when out of bounds.
Ints resolve_slice(KernelContext& ctx, const Shape& s, const Ints& begin, const Ints& size) {
  if (static_cast<int>(begin.size()) != s.rank() || static_cast<int>(size.size()) != s.rank())
    ctx.fail("begin ", ints_str(begin), " and size ", ints_str(size), " do not match rank ", s.rank());
  Ints box(size);
  for (int i = 0; i < s.rank(); ++i) {
    const auto iu = static_cast<size_t>(i);
    if (box[iu] < 0) box[iu] = s[i] - begin[iu];
    if (begin[iu] < 0 || box[iu] < 0 || begin[iu] + box[iu] > s[i])
      ctx.fail("slice begin ", ints_str(begin), " size ", ints_str(size),
               " is out of bounds for shape ", s.to_string());
  }
  return box;
}

SliceArgs slice_args_in(KernelContext& ctx, const Shape& big) {
  SliceArgs a;
  a.begin = ctx.attr<Ints>("begin");
  a.box = resolve_slice(ctx, big, a.begin, ctx.attr<Ints>("size"));
  return a;
}

Ints check_paddings(KernelContext& ctx, int rank) {
  Ints p = ctx.attr<Ints>("paddings");
  if (static_cast<int>(p.size()) != 2 * rank)
    ctx.fail("paddings ", ints_str(p), " do not match rank ", rank);
  return p;
}

// sign +1: the dims of `s` padded; sign -1: unpadded.
PadArgs pad_args_of(const Shape& s, const Ints& p, int sign) {
  PadArgs a;
  for (int i = 0; i < s.rank(); ++i) {
    a.before.push_back(p[static_cast<size_t>(2 * i)]);
    a.dims.push_back(s[i] + sign * (p[static_cast<size_t>(2 * i)] + p[static_cast<size_t>(2 * i + 1)]));
  }
  return a;
}

}  // namespace

SliceArgs slice_args(KernelContext& ctx) { return slice_args_in(ctx, ctx.input(0).shape()); }

SliceArgs slice_grad_args(KernelContext& ctx) {
  const Tensor& g = ctx.input(0);
  SliceArgs a = slice_args_in(ctx, ctx.input(1).shape());
  if (g.shape() != Shape(a.box))
    ctx.fail("grad shape ", g.shape().to_string(), " does not match the slice shape ",
             Shape(a.box).to_string());
  return a;
}

PadArgs pad_args(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  return pad_args_of(x.shape(), check_paddings(ctx, x.rank()), 1);
}

PadArgs pad_grad_args(KernelContext& ctx) {
  const Tensor& g = ctx.input(0);
  const Shape& like = ctx.input(1).shape();
  const Ints p = check_paddings(ctx, g.rank());
  PadArgs a = pad_args_of(g.shape(), p, -1);
  if (Shape(a.dims) != like)
    ctx.fail("grad shape ", g.shape().to_string(), " is not like shape ", like.to_string(),
             " padded by ", ints_str(p));
  return a;
}

// ---- gather and one-hot -----------------------------------------------------------------

int gather_axis(KernelContext& ctx, const Shape& params, const char* what) {
  if (params.rank() == 0) ctx.fail(what, " must have rank >= 1");
  return axis_or_fail(ctx, ctx.attr<int64_t>("axis"), params.rank());
}

Ints gather_dims(const Ints& pd, int axis, const Shape& indices) {
  Ints dims(pd.begin(), pd.begin() + axis);
  for (int64_t d : indices.dims()) dims.push_back(d);
  dims.insert(dims.end(), pd.begin() + axis + 1, pd.end());
  return dims;
}

int gather_grad_axis(KernelContext& ctx) {
  const Tensor& g = ctx.input(0);
  const Shape& like = ctx.input(2).shape();
  const int axis = gather_axis(ctx, like, "like");
  const Shape want(gather_dims(like.dims(), axis, ctx.input(1).shape()));
  if (g.shape() != want)
    ctx.fail("grad shape ", g.shape().to_string(), " does not match the gather shape ",
             want.to_string());
  return axis;
}

Ints one_hot_dims(KernelContext& ctx) {
  Ints dims = ctx.input(0).shape().dims();
  dims.push_back(ctx.attr<int64_t>("depth"));
  return dims;
}

// ---- tile ----------------------------------------------------------------------------------

namespace {

Ints check_multiples(KernelContext& ctx, int rank) {
  Ints m = ctx.attr<Ints>("multiples");
  if (static_cast<int>(m.size()) != rank)
    ctx.fail("multiples ", ints_str(m), " do not match rank ", rank);
  for (int64_t v : m)
    if (v < 0) ctx.fail("multiples must be non-negative, got ", ints_str(m));
  return m;
}

}  // namespace

Ints tile_dims(KernelContext& ctx, Ints* multiples) {
  const Tensor& x = ctx.input(0);
  *multiples = check_multiples(ctx, x.rank());
  Ints dims;
  for (int i = 0; i < x.rank(); ++i) dims.push_back(x.dim(i) * (*multiples)[static_cast<size_t>(i)]);
  return dims;
}

Ints tile_grad_multiples(KernelContext& ctx) {
  const Tensor& g = ctx.input(0);
  const Shape& like = ctx.input(1).shape();
  Ints m = check_multiples(ctx, like.rank());
  bool ok = g.rank() == like.rank();
  for (int i = 0; ok && i < g.rank(); ++i) ok = g.dim(i) == like[i] * m[static_cast<size_t>(i)];
  if (!ok)
    ctx.fail("grad shape ", g.shape().to_string(), " is not like shape ", like.to_string(),
             " tiled ", ints_str(m));
  return m;
}

}  // namespace spire::kernels
