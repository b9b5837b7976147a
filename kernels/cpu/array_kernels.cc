// CPU kernels for the shape and indexing ops of core/ops/array_ops.cc.
// Reshape, ReshapeLike, ExpandDims and Squeeze return views of their input
// (no copy). The data-moving ops work on raw elements of the dtype's size,
// so every dtype (bool included) is supported: Concat/Split/Slice/Pad and
// their gradients copy contiguous rows of a box (copy_box), Transpose drops
// size-1 dims, merges dims that stay adjacent and copies in cache-friendly
// tiles. Only the accumulating ops (GatherGrad, TileGrad) and OneHot are
// typed. Attrs, shape checks and output shapes (and the view kernels) are
// shared with the CUDA kernels: kernels/array_attrs.h.
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/kernel_registry.h"
#include "kernels/array_attrs.h"
#include "kernels/cpu/broadcast.h"
#include "kernels/elementwise_attrs.h"

namespace spire::cpu {
namespace {

using Ints = std::vector<int64_t>;
using kernels::dims_prod;

// Calls f(E{}) with E an unsigned integer type of `esize` bytes.
template <typename F>
void with_elem(size_t esize, F&& f) {
  kernels::with_elem(esize, "array kernels", std::forward<F>(f));
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
  const int64_t nrows = dims_prod(box, 0, static_cast<size_t>(t));
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
  Shape out_shape;
  const Ints perm = kernels::transpose_perm(ctx, x, &out_shape);
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

// Rows of `row_bytes` each to copy per parallel chunk: about 64 KiB.
int64_t copy_grain(size_t row_bytes) {
  return std::max<int64_t>(1, static_cast<int64_t>((size_t{1} << 16) / std::max<size_t>(row_bytes, 1)));
}

void concat_kernel(KernelContext& ctx) {
  const Tensor& x0 = ctx.input(0);
  const auto [concat_axis, dims] = kernels::concat_args(ctx);
  const int axis = concat_axis;  // a plain variable: C++17 lambdas cannot capture a binding
  Tensor& y = ctx.allocate_output(0, Shape(dims));
  if (y.num_elements() == 0) return;
  const size_t es = dtype_size(x0.dtype());
  const int64_t outer = dims_prod(dims, 0, static_cast<size_t>(axis));
  const int64_t inner = dims_prod(dims, static_cast<size_t>(axis) + 1, dims.size());
  const size_t out_row = static_cast<size_t>(dims[static_cast<size_t>(axis)] * inner) * es;
  char* dst = static_cast<char*>(y.raw_data());
  // Output row o is the inputs' rows o, one after another.
  ctx.parallel_for(outer, copy_grain(out_row), [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
      char* d = dst + static_cast<size_t>(o) * out_row;
      for (int i = 0; i < ctx.num_inputs(); ++i) {
        const Tensor& t = ctx.input(i);
        const size_t bytes = static_cast<size_t>(t.dim(axis) * inner) * es;
        if (bytes == 0) continue;
        std::memcpy(d, static_cast<const char*>(t.raw_data()) + static_cast<size_t>(o) * bytes, bytes);
        d += bytes;
      }
    }
  });
}

// Splits x along `axis` into outputs of the given (resolved) sizes.
void split_parts(KernelContext& ctx, const Tensor& x, int axis, const Ints& sizes) {
  const Ints& dims = x.shape().dims();
  const size_t es = dtype_size(x.dtype());
  const int64_t outer = dims_prod(dims, 0, static_cast<size_t>(axis));
  const int64_t inner = dims_prod(dims, static_cast<size_t>(axis) + 1, dims.size());
  const size_t in_row = static_cast<size_t>(dims[static_cast<size_t>(axis)] * inner) * es;
  std::vector<char*> dst(sizes.size());
  std::vector<size_t> bytes(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    Ints od = dims;
    od[static_cast<size_t>(axis)] = sizes[i];
    dst[i] = static_cast<char*>(ctx.allocate_output(static_cast<int>(i), Shape(od)).raw_data());
    bytes[i] = static_cast<size_t>(sizes[i] * inner) * es;
  }
  if (outer == 0 || in_row == 0) return;
  const char* src = static_cast<const char*>(x.raw_data());
  // Input row o is the outputs' rows o, one after another.
  ctx.parallel_for(outer, copy_grain(in_row), [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
      const char* s = src + static_cast<size_t>(o) * in_row;
      for (size_t i = 0; i < sizes.size(); ++i) {
        if (bytes[i] > 0) std::memcpy(dst[i] + static_cast<size_t>(o) * bytes[i], s, bytes[i]);
        s += bytes[i];
      }
    }
  });
}

void split_kernel(KernelContext& ctx) {
  const kernels::SplitArgs a = kernels::split_args(ctx);
  split_parts(ctx, ctx.input(0), a.axis, a.sizes);
}

void split_like_kernel(KernelContext& ctx) {
  const kernels::SplitArgs a = kernels::split_like_args(ctx);
  split_parts(ctx, ctx.input(0), a.axis, a.sizes);
}

// ---- slice and pad ---------------------------------------------------------------

void slice_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const auto [begin, box] = kernels::slice_args(ctx);
  Tensor& y = ctx.allocate_output(0, Shape(box));
  copy_box(dtype_size(x.dtype()), x.raw_data(), x.shape(), begin, y.raw_data(), y.shape(),
           Ints(box.size(), 0), box);
}

void slice_grad_kernel(KernelContext& ctx) {
  const Tensor& g = ctx.input(0);
  const Shape& like = ctx.input(1).shape();
  const auto [begin, box] = kernels::slice_grad_args(ctx);
  Tensor& y = ctx.allocate_output(0, like);
  if (y.nbytes()) std::memset(y.raw_data(), 0, y.nbytes());
  copy_box(dtype_size(g.dtype()), g.raw_data(), g.shape(), Ints(box.size(), 0), y.raw_data(), like,
           begin, box);
}

void pad_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const auto [before, dims] = kernels::pad_args(ctx);
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
  const auto [before, dims] = kernels::pad_grad_args(ctx);
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
  const int axis = kernels::gather_axis(ctx, params.shape(), "params");
  const Ints& pd = params.shape().dims();
  const int64_t outer = dims_prod(pd, 0, static_cast<size_t>(axis));
  const int64_t n = pd[static_cast<size_t>(axis)];
  const int64_t inner = dims_prod(pd, static_cast<size_t>(axis) + 1, pd.size());
  Ints idx = checked_indices(ctx, indices, n, axis, "params");
  Tensor& y = ctx.allocate_output(0, Shape(kernels::gather_dims(pd, axis, indices.shape())));
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
  const int axis = kernels::gather_grad_axis(ctx);
  const Ints& pd = like.dims();
  const int64_t outer = dims_prod(pd, 0, static_cast<size_t>(axis));
  const int64_t n = pd[static_cast<size_t>(axis)];
  const int64_t inner = dims_prod(pd, static_cast<size_t>(axis) + 1, pd.size());
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
  Tensor& y = ctx.allocate_output(0, Shape(kernels::one_hot_dims(ctx)));
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

// Calls f(big_row_offset, small_row_offset) for each row (last dim) of a
// tensor of dims `big` tiled from `small` (big[i] a multiple of small[i]).
template <typename F>
void for_each_tiled_row(const Ints& big, const Ints& small, F&& f) {
  const int r = static_cast<int>(big.size());
  Ints sst(static_cast<size_t>(r));
  int64_t acc = 1;
  for (int i = r - 1; i >= 0; --i) sst[static_cast<size_t>(i)] = acc, acc *= small[static_cast<size_t>(i)];
  const int64_t rows = dims_prod(big, 0, static_cast<size_t>(r - 1));
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
  Ints m;
  const Ints dims = kernels::tile_dims(ctx, &m);
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
  const Ints m = kernels::tile_grad_multiples(ctx);
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
  Tensor* out = kernels::broadcast_output(ctx, target);
  if (!out) return;
  Tensor& y = *out;
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

template <typename T> struct GatherGradK { static void run(KernelContext& c) { gather_grad_kernel<T>(c); } };
template <typename T> struct TileGradK { static void run(KernelContext& c) { tile_grad_kernel<T>(c); } };

}  // namespace

SPIRE_STATIC_INIT(cpu_array_kernels) {
  kernels::register_view_kernels(DeviceType::CPU);
  kernels::register_any_dtype(DeviceType::CPU, {
      {"Transpose", transpose_kernel},   {"Concat", concat_kernel},
      {"Split", split_kernel},           {"SplitLike", split_like_kernel},
      {"Slice", slice_kernel},           {"SliceGrad", slice_grad_kernel},
      {"Pad", pad_kernel},               {"PadGrad", pad_grad_kernel},
      {"Gather", gather_kernel},         {"Tile", tile_kernel},
      {"BroadcastTo", broadcast_to_kernel},
  });
  kernels::register_numeric<GatherGradK>("GatherGrad", DeviceType::CPU);
  kernels::register_numeric<TileGradK>("TileGrad", DeviceType::CPU);
  for (DType dt : {DType::I32, DType::I64}) KernelRegistry::global().add("OneHot", DeviceType::CPU, dt, one_hot_kernel);
}

}  // namespace spire::cpu
