// CPU kernels for the shape and indexing ops of core/ops/array_ops.cc.
// Reshape, ReshapeLike, ExpandDims and Squeeze return views of their input
// (no copy). The data-moving ops work on raw elements of the dtype's size,
// so every dtype (bool included) is supported: Concat/Split/Slice/Pad and
// their gradients copy contiguous rows of a box (copy_box), Transpose drops
// size-1 dims, merges dims that stay adjacent and copies in cache-friendly
// tiles. Only the accumulating ops (GatherGrad, TileGrad) and OneHot are
// typed.
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/kernel_registry.h"
#include "kernels/cpu/broadcast.h"

namespace spire::cpu {
namespace {

using Ints = std::vector<int64_t>;

// Calls f(E{}) with E an unsigned integer type of `esize` bytes.
template <typename F>
void with_elem(size_t esize, F&& f) {
  switch (esize) {
    case 1: f(uint8_t{}); return;
    case 2: f(uint16_t{}); return;
    case 4: f(uint32_t{}); return;
    case 8: f(uint64_t{}); return;
    default: throw_error("array kernels: unsupported element size ", esize);
  }
}

int axis_or_fail(KernelContext& ctx, int64_t axis, int rank) {
  if (axis < -rank || axis >= rank) ctx.fail("axis ", axis, " is out of range for rank ", rank);
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

int64_t prod(const Ints& d, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to; ++i) p *= d[i];
  return p;
}

std::string ints_str(const Ints& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// Copies the box of extent `box` at `sb` in src (shape ss) to `db` in dst
// (shape ds), as contiguous rows (trailing dims taken whole in both are merged).
void copy_box(size_t es, const void* src_v, const Shape& ss, const Ints& sb, void* dst_v,
              const Shape& ds, const Ints& db, const Ints& box) {
  const char* src = static_cast<const char*>(src_v);
  char* dst = static_cast<char*>(dst_v);
  const int r = ss.rank();
  for (int64_t b : box)
    if (b == 0) return;
  if (r == 0) {
    std::memcpy(dst, src, es);
    return;
  }
  Ints sst = row_major_strides(ss), dstr = row_major_strides(ds);
  int t = r - 1;
  int64_t row = box[static_cast<size_t>(t)];
  while (t > 0 && box[static_cast<size_t>(t)] == ss[t] && box[static_cast<size_t>(t)] == ds[t]) {
    --t;
    row *= box[static_cast<size_t>(t)];
  }
  int64_t so = 0, doff = 0;
  for (int i = 0; i < r; ++i) {
    so += sb[static_cast<size_t>(i)] * sst[static_cast<size_t>(i)];
    doff += db[static_cast<size_t>(i)] * dstr[static_cast<size_t>(i)];
  }
  const size_t row_bytes = static_cast<size_t>(row) * es;
  const int64_t nrows = prod(box, 0, static_cast<size_t>(t));
  Ints idx(static_cast<size_t>(t), 0);
  for (int64_t k = 0; k < nrows; ++k) {
    std::memcpy(dst + doff * static_cast<int64_t>(es), src + so * static_cast<int64_t>(es), row_bytes);
    for (int d = t - 1; d >= 0; --d) {
      auto du = static_cast<size_t>(d);
      so += sst[du];
      doff += dstr[du];
      if (++idx[du] < box[du]) break;
      so -= sst[du] * box[du];
      doff -= dstr[du] * box[du];
      idx[du] = 0;
    }
  }
}

// ---- views -------------------------------------------------------------------

void reshape_kernel(KernelContext& ctx) {
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

void reshape_like_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Shape& s = ctx.input(1).shape();
  if (s.num_elements() != x.num_elements())
    ctx.fail("cannot reshape ", x.shape().to_string(), " like ", s.to_string(), ": element counts differ");
  ctx.set_output(0, x.reshaped(s));
}

void expand_dims_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t a = ctx.attr<int64_t>("axis");
  if (a < -(x.rank() + 1) || a > x.rank())
    ctx.fail("axis ", a, " is out of range for inserting into rank ", x.rank());
  Ints dims = x.shape().dims();
  dims.insert(dims.begin() + (a < 0 ? a + x.rank() + 1 : a), 1);
  ctx.set_output(0, x.reshaped(Shape(dims)));
}

void squeeze_kernel(KernelContext& ctx) {
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

// ---- transpose -----------------------------------------------------------------

// Copies `in` to `out` where out has dims `od` (row-major) and out dim j
// reads the input with stride is[j]; tiles the two dims that are innermost
// in the input and in the output.
template <typename E>
void permute_copy(const E* in, E* out, const Ints& od, const Ints& is) {
  const int k = static_cast<int>(od.size());
  Ints os(static_cast<size_t>(k));
  int64_t acc = 1;
  for (int j = k - 1; j >= 0; --j) os[static_cast<size_t>(j)] = acc, acc *= od[static_cast<size_t>(j)];
  const int last = k - 1;
  int q = last;
  for (int j = 0; j < k; ++j)
    if (is[static_cast<size_t>(j)] == 1) q = j;
  // The dims walked by the odometer: all but `last` (and `q` when tiling).
  std::vector<int> outer;
  for (int j = 0; j < last; ++j)
    if (j != q) outer.push_back(j);
  Ints idx(outer.size(), 0);
  int64_t count = 1;
  for (int j : outer) count *= od[static_cast<size_t>(j)];
  int64_t io = 0, oo = 0;
  const int64_t nl = od[static_cast<size_t>(last)], sl = is[static_cast<size_t>(last)];
  const int64_t nq = od[static_cast<size_t>(q)], osq = os[static_cast<size_t>(q)];
  constexpr int64_t B = 32;
  for (int64_t c = 0; c < count; ++c) {
    const E* src = in + io;
    E* dst = out + oo;
    if (q == last) {
      std::memcpy(dst, src, static_cast<size_t>(nl) * sizeof(E));
    } else {
      // dst[a * osq + b] = src[a + b * sl]
      for (int64_t a0 = 0; a0 < nq; a0 += B)
        for (int64_t b0 = 0; b0 < nl; b0 += B) {
          const int64_t a1 = std::min(nq, a0 + B), b1 = std::min(nl, b0 + B);
          for (int64_t a = a0; a < a1; ++a)
            for (int64_t b = b0; b < b1; ++b) dst[a * osq + b] = src[a + b * sl];
        }
    }
    for (int t = static_cast<int>(outer.size()) - 1; t >= 0; --t) {
      const auto j = static_cast<size_t>(outer[static_cast<size_t>(t)]);
      io += is[j];
      oo += os[j];
      if (++idx[static_cast<size_t>(t)] < od[j]) break;
      io -= is[j] * od[j];
      oo -= os[j] * od[j];
      idx[static_cast<size_t>(t)] = 0;
    }
  }
}

void transpose_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int r = x.rank();
  Ints perm = ctx.attr<Ints>("perm");
  if (perm.empty())
    for (int i = r - 1; i >= 0; --i) perm.push_back(i);
  if (static_cast<int>(perm.size()) != r) ctx.fail("perm ", ints_str(perm), " does not match rank ", r);
  Ints out_dims;
  for (int64_t p : perm) {
    if (p < 0 || p >= r) ctx.fail("perm ", ints_str(perm), " is not a permutation");
    out_dims.push_back(x.dim(static_cast<int>(p)));
  }
  Shape out_shape(out_dims);
  if (x.num_elements() == 0) {
    ctx.allocate_output(0, out_shape);
    return;
  }
  // Runs of input dims (size > 1) that stay adjacent and in order in the output.
  // Input dims of size 1 are dropped first (compact numbering of the others).
  std::vector<int64_t> compact(static_cast<size_t>(r), -1);
  int64_t kept = 0;
  for (int i = 0; i < r; ++i)
    if (x.dim(i) != 1) compact[static_cast<size_t>(i)] = kept++;
  std::vector<std::pair<int64_t, int64_t>> runs;  // (first input dim, merged size), output order
  int64_t prev = -2;
  for (int64_t p : perm) {
    const int64_t c = compact[static_cast<size_t>(p)];
    if (c < 0) continue;
    const int64_t d = x.dim(static_cast<int>(p));
    if (!runs.empty() && c == prev + 1) runs.back().second *= d;
    else runs.push_back({c, d});
    prev = c;
  }
  if (runs.size() <= 1) {  // no data movement: a view
    ctx.set_output(0, x.reshaped(out_shape));
    return;
  }
  // Merged input dims in input order and their strides.
  std::vector<size_t> order(runs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return runs[a].first < runs[b].first; });
  Ints in_stride(runs.size());
  int64_t acc = 1;
  for (size_t k = order.size(); k-- > 0;) {
    in_stride[order[k]] = acc;
    acc *= runs[order[k]].second;
  }
  Ints od, is;
  for (size_t j = 0; j < runs.size(); ++j) od.push_back(runs[j].second), is.push_back(in_stride[j]);
  Tensor& y = ctx.allocate_output(0, out_shape);
  with_elem(dtype_size(x.dtype()), [&](auto e) {
    using E = decltype(e);
    permute_copy<E>(static_cast<const E*>(x.raw_data()), static_cast<E*>(y.raw_data()), od, is);
  });
}

// ---- concat and split ------------------------------------------------------------

void concat_kernel(KernelContext& ctx) {
  const Tensor& x0 = ctx.input(0);
  const int r = x0.rank();
  if (r == 0) ctx.fail("cannot concatenate scalars");
  const int axis = axis_or_fail(ctx, ctx.attr<int64_t>("axis"), r);
  Ints dims = x0.shape().dims();
  dims[static_cast<size_t>(axis)] = 0;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    const Shape& s = ctx.input(i).shape();
    bool ok = s.rank() == r;
    for (int d = 0; ok && d < r; ++d) ok = d == axis || s[d] == x0.dim(d);
    if (!ok)
      ctx.fail("input ", i, " has shape ", s.to_string(), ", which differs from ", x0.shape().to_string(),
               " outside axis ", axis);
    dims[static_cast<size_t>(axis)] += s[axis];
  }
  Tensor& y = ctx.allocate_output(0, Shape(dims));
  if (y.num_elements() == 0) return;
  const size_t es = dtype_size(x0.dtype());
  const int64_t outer = prod(dims, 0, static_cast<size_t>(axis));
  const int64_t inner = prod(dims, static_cast<size_t>(axis) + 1, dims.size());
  char* dst = static_cast<char*>(y.raw_data());
  for (int64_t o = 0; o < outer; ++o)
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      const Tensor& t = ctx.input(i);
      const size_t bytes = static_cast<size_t>(t.dim(axis) * inner) * es;
      if (bytes == 0) continue;
      std::memcpy(dst, static_cast<const char*>(t.raw_data()) + static_cast<size_t>(o) * bytes, bytes);
      dst += bytes;
    }
}

// Splits x along `axis` into outputs of the given (resolved) sizes.
void split_parts(KernelContext& ctx, const Tensor& x, int axis, const Ints& sizes) {
  const Ints& dims = x.shape().dims();
  const size_t es = dtype_size(x.dtype());
  const int64_t outer = prod(dims, 0, static_cast<size_t>(axis));
  const int64_t inner = prod(dims, static_cast<size_t>(axis) + 1, dims.size());
  const size_t in_row = static_cast<size_t>(dims[static_cast<size_t>(axis)] * inner) * es;
  size_t offset = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    Ints od = dims;
    od[static_cast<size_t>(axis)] = sizes[i];
    Tensor& y = ctx.allocate_output(static_cast<int>(i), Shape(od));
    const size_t bytes = static_cast<size_t>(sizes[i] * inner) * es;
    if (bytes > 0) {
      const char* src = static_cast<const char*>(x.raw_data()) + offset;
      char* dst = static_cast<char*>(y.raw_data());
      for (int64_t o = 0; o < outer; ++o) std::memcpy(dst + o * bytes, src + o * in_row, bytes);
    }
    offset += bytes;
  }
}

void split_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int axis = axis_or_fail(ctx, ctx.attr<int64_t>("axis"), x.rank());
  const int64_t d = x.dim(axis);
  const int64_t num = ctx.attr<int64_t>("num");
  Ints sizes = ctx.attr<Ints>("sizes");
  if (num > 0) {
    if (d % num != 0) ctx.fail("dimension ", axis, " of size ", d, " cannot be split into ", num, " equal parts");
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
  split_parts(ctx, x, axis, sizes);
}

void split_like_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int axis = axis_or_fail(ctx, ctx.attr<int64_t>("axis"), x.rank());
  Ints sizes;
  int64_t total = 0;
  for (int i = 1; i < ctx.num_inputs(); ++i) {
    const Tensor& l = ctx.input(i);
    if (l.rank() != x.rank()) ctx.fail("input ", i, " has rank ", l.rank(), ", expected ", x.rank());
    sizes.push_back(l.dim(axis));
    total += l.dim(axis);
  }
  if (total != x.dim(axis))
    ctx.fail("the parts have ", total, " entries along axis ", axis, " but x has ", x.dim(axis));
  split_parts(ctx, x, axis, sizes);
}

// ---- slice and pad ---------------------------------------------------------------

// Resolves Slice's size (-1 = to the end) against shape s; fails when out of bounds.
Ints resolve_slice(KernelContext& ctx, const Shape& s, const Ints& begin, const Ints& size) {
  if (static_cast<int>(begin.size()) != s.rank() || static_cast<int>(size.size()) != s.rank())
    ctx.fail("begin ", ints_str(begin), " and size ", ints_str(size), " do not match rank ", s.rank());
  Ints box(size);
  for (int i = 0; i < s.rank(); ++i) {
    const auto iu = static_cast<size_t>(i);
    if (box[iu] < 0) box[iu] = s[i] - begin[iu];
    if (begin[iu] < 0 || box[iu] < 0 || begin[iu] + box[iu] > s[i])
      ctx.fail("slice begin ", ints_str(begin), " size ", ints_str(size), " is out of bounds for shape ",
               s.to_string());
  }
  return box;
}

void slice_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Ints begin = ctx.attr<Ints>("begin");
  Ints box = resolve_slice(ctx, x.shape(), begin, ctx.attr<Ints>("size"));
  Tensor& y = ctx.allocate_output(0, Shape(box));
  copy_box(dtype_size(x.dtype()), x.raw_data(), x.shape(), begin, y.raw_data(), y.shape(),
           Ints(box.size(), 0), box);
}

void slice_grad_kernel(KernelContext& ctx) {
  const Tensor& g = ctx.input(0);
  const Shape& like = ctx.input(1).shape();
  Ints begin = ctx.attr<Ints>("begin");
  Ints box = resolve_slice(ctx, like, begin, ctx.attr<Ints>("size"));
  if (g.shape() != Shape(box))
    ctx.fail("grad shape ", g.shape().to_string(), " does not match the slice shape ", Shape(box).to_string());
  Tensor& y = ctx.allocate_output(0, like);
  if (y.nbytes()) std::memset(y.raw_data(), 0, y.nbytes());
  copy_box(dtype_size(g.dtype()), g.raw_data(), g.shape(), Ints(box.size(), 0), y.raw_data(), like,
           begin, box);
}

Ints check_paddings(KernelContext& ctx, int rank) {
  Ints p = ctx.attr<Ints>("paddings");
  if (static_cast<int>(p.size()) != 2 * rank) ctx.fail("paddings ", ints_str(p), " do not match rank ", rank);
  return p;
}

void pad_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Ints p = check_paddings(ctx, x.rank());
  Ints dims, before;
  for (int i = 0; i < x.rank(); ++i) {
    before.push_back(p[static_cast<size_t>(2 * i)]);
    dims.push_back(x.dim(i) + p[static_cast<size_t>(2 * i)] + p[static_cast<size_t>(2 * i + 1)]);
  }
  Tensor& y = ctx.allocate_output(0, Shape(dims));
  const double value = ctx.attr<double>("value");
  visit_dtype(y.dtype(), "Pad", [&](auto zero) {
    using T = decltype(zero);
    T* py = y.data<T>();
    std::fill(py, py + y.num_elements(), static_cast<T>(value));
  });
  copy_box(dtype_size(x.dtype()), x.raw_data(), x.shape(), Ints(before.size(), 0), y.raw_data(),
           y.shape(), before, x.shape().dims());
}

void pad_grad_kernel(KernelContext& ctx) {
  const Tensor& g = ctx.input(0);
  const Shape& like = ctx.input(1).shape();
  Ints p = check_paddings(ctx, g.rank());
  Ints dims, before;
  for (int i = 0; i < g.rank(); ++i) {
    before.push_back(p[static_cast<size_t>(2 * i)]);
    dims.push_back(g.dim(i) - p[static_cast<size_t>(2 * i)] - p[static_cast<size_t>(2 * i + 1)]);
  }
  if (Shape(dims) != like)
    ctx.fail("grad shape ", g.shape().to_string(), " is not like shape ", like.to_string(), " padded by ",
             ints_str(p));
  Tensor& y = ctx.allocate_output(0, like);
  copy_box(dtype_size(g.dtype()), g.raw_data(), g.shape(), before, y.raw_data(), like,
           Ints(before.size(), 0), dims);
}

// ---- gather ----------------------------------------------------------------------

// The indices as int64, checked against [0, n).
Ints checked_indices(KernelContext& ctx, const Tensor& indices, int64_t n, int axis, const char* what) {
  Ints out(static_cast<size_t>(indices.num_elements()));
  visit_dtype(indices.dtype(), "Gather", [&](auto zero) {
    using I = decltype(zero);
    if constexpr (std::is_same_v<I, int32_t> || std::is_same_v<I, int64_t>) {
      const I* p = indices.data<I>();
      for (size_t j = 0; j < out.size(); ++j) {
        const int64_t v = static_cast<int64_t>(p[j]);
        if (v < 0 || v >= n)
          ctx.fail("index ", v, " (element ", j, " of indices) is out of range [0, ", n, ") for axis ",
                   axis, " of ", what);
        out[j] = v;
      }
    } else {
      ctx.fail("indices must be i32 or i64, got ", dtype_name(indices.dtype()));
    }
  });
  return out;
}

void gather_kernel(KernelContext& ctx) {
  const Tensor& params = ctx.input(0);
  const Tensor& indices = ctx.input(1);
  if (params.rank() == 0) ctx.fail("params must have rank >= 1");
  const int axis = axis_or_fail(ctx, ctx.attr<int64_t>("axis"), params.rank());
  const Ints& pd = params.shape().dims();
  const int64_t outer = prod(pd, 0, static_cast<size_t>(axis));
  const int64_t n = pd[static_cast<size_t>(axis)];
  const int64_t inner = prod(pd, static_cast<size_t>(axis) + 1, pd.size());
  Ints idx = checked_indices(ctx, indices, n, axis, "params");
  Ints dims(pd.begin(), pd.begin() + axis);
  for (int64_t d : indices.shape().dims()) dims.push_back(d);
  dims.insert(dims.end(), pd.begin() + axis + 1, pd.end());
  Tensor& y = ctx.allocate_output(0, Shape(dims));
  if (y.num_elements() == 0) return;
  const int64_t ni = static_cast<int64_t>(idx.size());
  with_elem(dtype_size(params.dtype()), [&](auto e) {
    using E = decltype(e);
    const E* src = static_cast<const E*>(params.raw_data());
    E* dst = static_cast<E*>(y.raw_data());
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < ni; ++j) {
        const E* s = src + (o * n + idx[static_cast<size_t>(j)]) * inner;
        E* d = dst + (o * ni + j) * inner;
        if (inner == 1) *d = *s;
        else std::memcpy(d, s, static_cast<size_t>(inner) * sizeof(E));
      }
  });
}

template <typename T>
void gather_grad_kernel(KernelContext& ctx) {
  const Tensor& g = ctx.input(0);
  const Tensor& indices = ctx.input(1);
  const Shape& like = ctx.input(2).shape();
  if (like.rank() == 0) ctx.fail("like must have rank >= 1");
  const int axis = axis_or_fail(ctx, ctx.attr<int64_t>("axis"), like.rank());
  const Ints& pd = like.dims();
  const int64_t outer = prod(pd, 0, static_cast<size_t>(axis));
  const int64_t n = pd[static_cast<size_t>(axis)];
  const int64_t inner = prod(pd, static_cast<size_t>(axis) + 1, pd.size());
  Ints want(pd.begin(), pd.begin() + axis);
  for (int64_t d : indices.shape().dims()) want.push_back(d);
  want.insert(want.end(), pd.begin() + axis + 1, pd.end());
  if (g.shape() != Shape(want))
    ctx.fail("grad shape ", g.shape().to_string(), " does not match the gather shape ", Shape(want).to_string());
  Ints idx = checked_indices(ctx, indices, n, axis, "like");
  Tensor& y = ctx.allocate_output(0, like);
  T* out = y.data<T>();
  std::fill(out, out + y.num_elements(), T(0));
  const T* pg = g.data<T>();
  const int64_t ni = static_cast<int64_t>(idx.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < ni; ++j) {
      T* d = out + (o * n + idx[static_cast<size_t>(j)]) * inner;
      const T* s = pg + (o * ni + j) * inner;
      for (int64_t i = 0; i < inner; ++i) d[i] += s[i];
    }
}

void one_hot_kernel(KernelContext& ctx) {
  const Tensor& indices = ctx.input(0);
  const int64_t depth = ctx.attr<int64_t>("depth");
  const double on = ctx.attr<double>("on_value"), off = ctx.attr<double>("off_value");
  Ints dims = indices.shape().dims();
  dims.push_back(depth);
  Tensor& y = ctx.allocate_output(0, Shape(dims));
  visit_dtype(y.dtype(), "OneHot", [&](auto zero) {
    using T = decltype(zero);
    T* py = y.data<T>();
    std::fill(py, py + y.num_elements(), static_cast<T>(off));
    const T on_v = static_cast<T>(on);
    visit_dtype(indices.dtype(), "OneHot", [&](auto izero) {
      using I = decltype(izero);
      if constexpr (std::is_same_v<I, int32_t> || std::is_same_v<I, int64_t>) {
        const I* pi = indices.data<I>();
        for (int64_t j = 0; j < indices.num_elements(); ++j) {
          const int64_t v = static_cast<int64_t>(pi[j]);
          if (v >= 0 && v < depth) py[j * depth + v] = on_v;
        }
      } else {
        ctx.fail("indices must be i32 or i64");
      }
    });
  });
}

// ---- tile and broadcast_to -----------------------------------------------------------

Ints check_multiples(KernelContext& ctx, int rank) {
  Ints m = ctx.attr<Ints>("multiples");
  if (static_cast<int>(m.size()) != rank) ctx.fail("multiples ", ints_str(m), " do not match rank ", rank);
  for (int64_t v : m)
    if (v < 0) ctx.fail("multiples must be non-negative, got ", ints_str(m));
  return m;
}

// Calls f(big_row_offset, small_row_offset) for each row (last dim) of a
// tensor of dims `big` tiled from `small` (big[i] a multiple of small[i]).
template <typename F>
void for_each_tiled_row(const Ints& big, const Ints& small, F&& f) {
  const int r = static_cast<int>(big.size());
  Ints sst(static_cast<size_t>(r));
  int64_t acc = 1;
  for (int i = r - 1; i >= 0; --i) sst[static_cast<size_t>(i)] = acc, acc *= small[static_cast<size_t>(i)];
  const int64_t rows = prod(big, 0, static_cast<size_t>(r - 1));
  const int64_t row_len = big[static_cast<size_t>(r - 1)];
  Ints idx(static_cast<size_t>(r), 0), sidx(static_cast<size_t>(r), 0);
  int64_t so = 0;
  for (int64_t k = 0; k < rows; ++k) {
    f(k * row_len, so);
    for (int d = r - 2; d >= 0; --d) {
      auto du = static_cast<size_t>(d);
      ++idx[du];
      if (++sidx[du] == small[du]) sidx[du] = 0;
      if (idx[du] < big[du]) break;
      idx[du] = 0;
      sidx[du] = 0;
    }
    so = 0;
    for (int e = 0; e + 1 < r; ++e) so += sidx[static_cast<size_t>(e)] * sst[static_cast<size_t>(e)];
  }
}

void tile_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Ints m = check_multiples(ctx, x.rank());
  Ints dims;
  for (int i = 0; i < x.rank(); ++i) dims.push_back(x.dim(i) * m[static_cast<size_t>(i)]);
  Tensor& y = ctx.allocate_output(0, Shape(dims));
  if (y.num_elements() == 0) return;
  const size_t es = dtype_size(x.dtype());
  const char* src = static_cast<const char*>(x.raw_data());
  char* dst = static_cast<char*>(y.raw_data());
  if (x.rank() == 0) {
    std::memcpy(dst, src, es);
    return;
  }
  const int64_t xl = x.dim(x.rank() - 1), ml = m.back();
  const size_t row_bytes = static_cast<size_t>(xl) * es;
  for_each_tiled_row(dims, x.shape().dims(), [&](int64_t yo, int64_t xo) {
    char* d = dst + yo * static_cast<int64_t>(es);
    const char* s = src + xo * static_cast<int64_t>(es);
    for (int64_t c = 0; c < ml; ++c) std::memcpy(d + c * static_cast<int64_t>(row_bytes), s, row_bytes);
  });
}

template <typename T>
void tile_grad_kernel(KernelContext& ctx) {
  const Tensor& g = ctx.input(0);
  const Shape& like = ctx.input(1).shape();
  Ints m = check_multiples(ctx, like.rank());
  bool ok = g.rank() == like.rank();
  for (int i = 0; ok && i < g.rank(); ++i) ok = g.dim(i) == like[i] * m[static_cast<size_t>(i)];
  if (!ok) ctx.fail("grad shape ", g.shape().to_string(), " is not like shape ", like.to_string(), " tiled ", ints_str(m));
  Tensor& y = ctx.allocate_output(0, like);
  T* out = y.data<T>();
  std::fill(out, out + y.num_elements(), T(0));
  if (g.num_elements() == 0) return;
  const T* pg = g.data<T>();
  if (g.rank() == 0) {
    out[0] = pg[0];
    return;
  }
  const int64_t xl = like[like.rank() - 1], ml = m.back();
  for_each_tiled_row(g.shape().dims(), like.dims(), [&](int64_t go, int64_t xo) {
    T* d = out + xo;
    const T* s = pg + go;
    for (int64_t c = 0; c < ml; ++c, s += xl)
      for (int64_t i = 0; i < xl; ++i) d[i] += s[i];
  });
}

void broadcast_to_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Shape target = ctx.attr<Shape>("shape");
  Shape check;
  if (!target.is_fully_defined() || !broadcast_shapes(x.shape(), target, &check) || check != target)
    ctx.fail("cannot broadcast ", x.shape().to_string(), " to ", target.to_string());
  if (x.shape() == target) {
    ctx.set_output(0, x);
    return;
  }
  Tensor& y = ctx.allocate_output(0, target);
  with_elem(dtype_size(x.dtype()), [&](auto e) {
    using E = decltype(e);
    const E* px = static_cast<const E*>(x.raw_data());
    E* py = static_cast<E*>(y.raw_data());
    std::array<std::vector<int64_t>, 1> st{broadcast_strides(x.shape(), target)};
    for_each_broadcast_row<1>(target, st, [&](int64_t o, const auto& off, const auto& inner, int64_t n) {
      if (inner[0] == 0) std::fill(py + o, py + o + n, px[off[0]]);
      else std::memcpy(py + o, px + off[0], static_cast<size_t>(n) * sizeof(E));
    });
  });
}

template <template <typename> class K>
void register_numeric(const char* op) {
  auto& reg = KernelRegistry::global();
  reg.add(op, DeviceType::CPU, DType::F32, K<float>::run);
  reg.add(op, DeviceType::CPU, DType::F64, K<double>::run);
  reg.add(op, DeviceType::CPU, DType::I32, K<int32_t>::run);
  reg.add(op, DeviceType::CPU, DType::I64, K<int64_t>::run);
}
template <typename T> struct GatherGradK { static void run(KernelContext& c) { gather_grad_kernel<T>(c); } };
template <typename T> struct TileGradK { static void run(KernelContext& c) { tile_grad_kernel<T>(c); } };

}  // namespace

SPIRE_STATIC_INIT(cpu_array_kernels) {
  const std::pair<const char*, KernelFn> any_dtype[] = {
      {"Reshape", reshape_kernel},       {"ReshapeLike", reshape_like_kernel},
      {"ExpandDims", expand_dims_kernel}, {"Squeeze", squeeze_kernel},
      {"Transpose", transpose_kernel},   {"Concat", concat_kernel},
      {"Split", split_kernel},           {"SplitLike", split_like_kernel},
      {"Slice", slice_kernel},           {"SliceGrad", slice_grad_kernel},
      {"Pad", pad_kernel},               {"PadGrad", pad_grad_kernel},
      {"Gather", gather_kernel},         {"Tile", tile_kernel},
      {"BroadcastTo", broadcast_to_kernel},
  };
  for (const auto& [op, fn] : any_dtype)
    for (DType dt : {DType::F32, DType::F64, DType::I32, DType::I64, DType::Bool})
      KernelRegistry::global().add(op, DeviceType::CPU, dt, fn);
  register_numeric<GatherGradK>("GatherGrad");
  register_numeric<TileGradK>("TileGrad");
  for (DType dt : {DType::I32, DType::I64}) KernelRegistry::global().add("OneHot", DeviceType::CPU, dt, one_hot_kernel);
}

}  // namespace spire::cpu
