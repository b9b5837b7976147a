// CUDA kernels for the shape and indexing ops of core/ops/array_ops.cc, for
// the same dtypes as the CPU kernels (kernels/cpu/array_kernels.cc).
// Reshape, ReshapeLike, ExpandDims and Squeeze return views (no copy); so
// does a Transpose that moves no data. The data-moving ops are grid-stride
// loops over one tensor whose per-element index math lives in
// kernels/array_index.h (tested on the host by tests/kernels/array_index_test.cc):
//   Slice, Split, SplitLike, PadGrad   gather a box out of the input
//   Concat                             one launch per input, scattering it as a box of the output
//   Pad, SliceGrad                     fill the output from a box, value (zero) outside
//   Tile                               out[i] = in[i mod in dims]
//   TileGrad                           per-output sum over the copies (deterministic), or
//                                      an atomic scatter-add when few outputs gather many copies
//   Transpose                          batched 2-D: 32x32 shared-memory tiles (+1 column of
//                                      padding against bank conflicts); otherwise a strided gather
//   Gather                             out-of-range index -> zeros (TensorFlow's GPU behavior)
//   GatherGrad                         zero fill + atomicAdd scatter; out-of-range indices skipped
//   OneHot                             out-of-range index -> a row of off_value (as on the CPU)
// Data movers work on raw elements of the dtype's size (bool included).
// Atomic float sums are order-nondeterministic (equal up to rounding).
// Shapes and attrs are checked on the host with the CPU kernels' messages;
// index values live on the device and are never read back, so the CPU
// kernels' index-range errors become the GPU behaviors above.
#include <cstring>
#include <string>
#include <vector>

#include "core/kernel_registry.h"
#include "kernels/array_index.h"
#include "kernels/cuda/launch.h"

namespace spire::cuda {
namespace {

using Ints = std::vector<int64_t>;
using kernels::BoxMap;
using kernels::GatherDims;
using kernels::StridedMap;
using kernels::TileMap;
using kernels::Tiled2D;
using kernels::TransposePlan;

// ---- helpers -------------------------------------------------------------------------

// Calls f(E{}) with E an unsigned integer type of `esize` bytes.
template <typename F>
void with_elem(size_t esize, F&& f) {
  switch (esize) {
    case 1: f(uint8_t{}); return;
    case 2: f(uint16_t{}); return;
    case 4: f(uint32_t{}); return;
    case 8: f(uint64_t{}); return;
    default: throw_error("CUDA array kernels: unsupported element size ", esize);
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

[[noreturn]] void fail_rank(KernelContext& ctx, int rank) {
  ctx.fail("the CUDA kernel supports up to ", kernels::kMaxArrayRank,
           " dimensions after merging adjacent ones, got rank ", rank);
}

BoxMap box_map_or_fail(KernelContext& ctx, const Ints& big, const Ints& begin, const Ints& box) {
  BoxMap m;
  if (!kernels::make_box_map(big, begin, box, &m)) fail_rank(ctx, static_cast<int>(big.size()));
  return m;
}

// Adds v to *p atomically (f64 atomicAdd needs sm_60+; i64 goes through the
// unsigned 64-bit atomicAdd, which wraps like two's complement).
struct AtomicAdd {
  __device__ void operator()(float* p, float v) const { atomicAdd(p, v); }
  __device__ void operator()(double* p, double v) const { atomicAdd(p, v); }
  __device__ void operator()(int32_t* p, int32_t v) const {
    atomicAdd(reinterpret_cast<int*>(p), static_cast<int>(v));
  }
  __device__ void operator()(int64_t* p, int64_t v) const {
    static_assert(sizeof(int64_t) == sizeof(unsigned long long), "64-bit atomics");
    atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
  }
};

void zero_fill(CudaContext& cc, Tensor& t) {
  if (t.nbytes() > 0) SPIRE_CUDA_CHECK(cudaMemsetAsync(t.raw_data(), 0, t.nbytes(), cc.stream()));
}

// ---- kernels ---------------------------------------------------------------------------

template <typename E>
__global__ void box_gather_kernel(BoxMap m, int64_t n, const E* in, E* out) {
  SPIRE_GRID_STRIDE_LOOP(i, n) kernels::box_gather_element(m, in, out, i);
}

template <typename E>
__global__ void box_scatter_kernel(BoxMap m, int64_t n, const E* in, E* out) {
  SPIRE_GRID_STRIDE_LOOP(i, n) kernels::box_scatter_element(m, in, out, i);
}

template <typename E>
__global__ void box_pad_kernel(BoxMap m, int64_t n, const E* in, E fill, E* out) {
  SPIRE_GRID_STRIDE_LOOP(i, n) kernels::box_pad_element(m, in, fill, out, i);
}

template <typename E>
__global__ void tile_kernel(TileMap m, int64_t n, const E* in, E* out) {
  SPIRE_GRID_STRIDE_LOOP(i, n) kernels::tile_element(m, in, out, i);
}

template <typename T>
__global__ void tile_grad_sum_kernel(TileMap m, int64_t n, int64_t copies, const T* g, T* out) {
  SPIRE_GRID_STRIDE_LOOP(i, n) kernels::tile_grad_sum_element(m, copies, g, out, i);
}

template <typename T>
__global__ void tile_grad_scatter_kernel(TileMap m, int64_t n, const T* g, T* out) {
  SPIRE_GRID_STRIDE_LOOP(i, n) kernels::tile_grad_scatter_element(m, g, out, i, AtomicAdd{});
}

template <typename E>
__global__ void strided_gather_kernel(StridedMap m, int64_t n, const E* in, E* out) {
  SPIRE_GRID_STRIDE_LOOP(i, n) kernels::strided_gather_element(m, in, out, i);
}

// Blocks of kTransposeTile x kTransposeBlockRows threads loop over the tiles
// (the loop bound is uniform per block, so the barriers are safe). Loads read
// rows of the input, stores write rows of the output, both coalesced; the
// padding column makes the column-wise shared-memory reads conflict-free.
template <typename E>
__global__ void tiled_transpose_kernel(Tiled2D p, const E* in, E* out) {
  constexpr int kT = kernels::kTransposeTile, kR = kernels::kTransposeBlockRows;
  __shared__ E tile[kT][kT + 1];
  const int x = static_cast<int>(threadIdx.x);
  const int64_t count = kernels::tiled_count(p);
  for (int64_t t = blockIdx.x; t < count; t += gridDim.x) {
    for (int k = static_cast<int>(threadIdx.y); k < kT; k += kR) {
      const int64_t off = kernels::tiled_load_offset(p, t, k, x);
      if (off >= 0) tile[k][x] = in[off];
    }
    __syncthreads();
    for (int k = static_cast<int>(threadIdx.y); k < kT; k += kR) {
      const int64_t off = kernels::tiled_store_offset(p, t, k, x);
      if (off >= 0) out[off] = tile[x][k];
    }
    __syncthreads();
  }
}

template <typename E, typename I>
__global__ void gather_kernel(GatherDims g, int64_t n, const E* params, const I* indices, E* out) {
  SPIRE_GRID_STRIDE_LOOP(i, n) kernels::gather_element(g, params, indices, out, i);
}

template <typename T, typename I>
__global__ void gather_grad_kernel(GatherDims g, int64_t n, const T* grad, const I* indices, T* out) {
  SPIRE_GRID_STRIDE_LOOP(i, n) kernels::gather_grad_element(g, grad, indices, out, i, AtomicAdd{});
}

template <typename T, typename I>
__global__ void one_hot_kernel(int64_t depth, int64_t n, const I* indices, T on, T off, T* out) {
  SPIRE_GRID_STRIDE_LOOP(i, n) kernels::one_hot_element(depth, indices, on, off, out, i);
}

// Launches box_gather_kernel: out (the box) from in (the big tensor).
void launch_box_gather(KernelContext& ctx, const BoxMap& m, const Tensor& in, Tensor& out) {
  const int64_t n = out.num_elements();
  if (n == 0) return;
  auto& cc = context(ctx);
  with_elem(dtype_size(in.dtype()), [&](auto e) {
    using E = decltype(e);
    box_gather_kernel<E><<<blocks_for(cc, n), kThreads, 0, cc.stream()>>>(
        m, n, static_cast<const E*>(in.raw_data()), static_cast<E*>(out.raw_data()));
    SPIRE_CUDA_LAUNCH_CHECK();
  });
}

// Launches box_pad_kernel: out (the big tensor) from in (the box), `fill`
// (a value of the dtype, as raw bytes) outside.
void launch_box_pad(KernelContext& ctx, const BoxMap& m, const Tensor& in, const void* fill,
                    Tensor& out) {
  const int64_t n = out.num_elements();
  if (n == 0) return;
  auto& cc = context(ctx);
  with_elem(dtype_size(out.dtype()), [&](auto e) {
    using E = decltype(e);
    E fill_e;
    std::memcpy(&fill_e, fill, sizeof(E));
    box_pad_kernel<E><<<blocks_for(cc, n), kThreads, 0, cc.stream()>>>(
        m, n, static_cast<const E*>(in.raw_data()), fill_e, static_cast<E*>(out.raw_data()));
    SPIRE_CUDA_LAUNCH_CHECK();
  });
}

// Calls f(I{}) for i32 / i64 indices; fails otherwise.
template <typename F>
void with_index_type(KernelContext& ctx, DType dt, F&& f) {
  if (dt == DType::I32) f(int32_t{});
  else if (dt == DType::I64) f(int64_t{});
  else ctx.fail("indices must be i32 or i64, got ", dtype_name(dt));
}

// ---- views -----------------------------------------------------------------------------

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
    ctx.fail("cannot reshape ", x.shape().to_string(), " like ", s.to_string(),
             ": element counts differ");
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

// ---- transpose -------------------------------------------------------------------------

void transpose_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
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
  Shape out_shape(out_dims);
  if (x.num_elements() == 0) {
    ctx.allocate_output(0, out_shape);
    return;
  }
  TransposePlan plan;
  if (!kernels::plan_transpose(x.shape().dims(), perm, &plan)) fail_rank(ctx, r);
  if (plan.kind == TransposePlan::Kind::kView) {
    ctx.set_output(0, x.reshaped(out_shape));
    return;
  }
  Tensor& y = ctx.allocate_output(0, out_shape);
  auto& cc = context(ctx);
  with_elem(dtype_size(x.dtype()), [&](auto e) {
    using E = decltype(e);
    const E* in = static_cast<const E*>(x.raw_data());
    E* out = static_cast<E*>(y.raw_data());
    if (plan.kind == TransposePlan::Kind::kTiled) {
      const int64_t tiles = kernels::tiled_count(plan.tiled);
      const int blocks = blocks_for(cc, tiles, 1);  // one block per tile, capped; blocks loop
      const dim3 threads(kernels::kTransposeTile, kernels::kTransposeBlockRows);
      tiled_transpose_kernel<E><<<blocks, threads, 0, cc.stream()>>>(plan.tiled, in, out);
    } else {
      const int64_t n = y.num_elements();
      strided_gather_kernel<E><<<blocks_for(cc, n), kThreads, 0, cc.stream()>>>(plan.gather, n, in, out);
    }
    SPIRE_CUDA_LAUNCH_CHECK();
  });
}

// ---- concat and split ------------------------------------------------------------------

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
      ctx.fail("input ", i, " has shape ", s.to_string(), ", which differs from ",
               x0.shape().to_string(), " outside axis ", axis);
    dims[static_cast<size_t>(axis)] += s[axis];
  }
  Tensor& y = ctx.allocate_output(0, Shape(dims));
  if (y.num_elements() == 0) return;
  auto& cc = context(ctx);
  int64_t offset = 0;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    const Tensor& t = ctx.input(i);
    const int64_t part = t.dim(axis);
    const int64_t n = t.num_elements();
    if (n > 0) {
      const BoxMap m = kernels::make_axis_box_map(dims, axis, offset, part);
      with_elem(dtype_size(t.dtype()), [&](auto e) {
        using E = decltype(e);
        box_scatter_kernel<E><<<blocks_for(cc, n), kThreads, 0, cc.stream()>>>(
            m, n, static_cast<const E*>(t.raw_data()), static_cast<E*>(y.raw_data()));
        SPIRE_CUDA_LAUNCH_CHECK();
      });
    }
    offset += part;
  }
}

// Splits x along `axis` into outputs of the given (resolved) sizes.
void split_parts(KernelContext& ctx, const Tensor& x, int axis, const Ints& sizes) {
  const Ints& dims = x.shape().dims();
  int64_t offset = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    Ints od = dims;
    od[static_cast<size_t>(axis)] = sizes[i];
    Tensor& y = ctx.allocate_output(static_cast<int>(i), Shape(od));
    launch_box_gather(ctx, kernels::make_axis_box_map(dims, axis, offset, sizes[i]), x, y);
    offset += sizes[i];
  }
}

void split_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int axis = axis_or_fail(ctx, ctx.attr<int64_t>("axis"), x.rank());
  const int64_t d = x.dim(axis);
  const int64_t num = ctx.attr<int64_t>("num");
  Ints sizes = ctx.attr<Ints>("sizes");
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

// ---- slice and pad ---------------------------------------------------------------------

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

void slice_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Ints begin = ctx.attr<Ints>("begin");
  const Ints box = resolve_slice(ctx, x.shape(), begin, ctx.attr<Ints>("size"));
  Tensor& y = ctx.allocate_output(0, Shape(box));
  if (y.num_elements() == 0) return;
  launch_box_gather(ctx, box_map_or_fail(ctx, x.shape().dims(), begin, box), x, y);
}

void slice_grad_kernel(KernelContext& ctx) {
  const Tensor& g = ctx.input(0);
  const Shape& like = ctx.input(1).shape();
  const Ints begin = ctx.attr<Ints>("begin");
  const Ints box = resolve_slice(ctx, like, begin, ctx.attr<Ints>("size"));
  if (g.shape() != Shape(box))
    ctx.fail("grad shape ", g.shape().to_string(), " does not match the slice shape ",
             Shape(box).to_string());
  Tensor& y = ctx.allocate_output(0, like);
  if (y.num_elements() == 0) return;
  const uint64_t zero = 0;  // all-zero bytes: 0 in every dtype
  launch_box_pad(ctx, box_map_or_fail(ctx, like.dims(), begin, box), g, &zero, y);
}

Ints check_paddings(KernelContext& ctx, int rank) {
  Ints p = ctx.attr<Ints>("paddings");
  if (static_cast<int>(p.size()) != 2 * rank)
    ctx.fail("paddings ", ints_str(p), " do not match rank ", rank);
  return p;
}

void pad_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Ints p = check_paddings(ctx, x.rank());
  Ints dims, before;
  for (int i = 0; i < x.rank(); ++i) {
    before.push_back(p[static_cast<size_t>(2 * i)]);
    dims.push_back(x.dim(i) + p[static_cast<size_t>(2 * i)] + p[static_cast<size_t>(2 * i + 1)]);
  }
  Tensor& y = ctx.allocate_output(0, Shape(dims));
  if (y.num_elements() == 0) return;
  const double value = ctx.attr<double>("value");
  uint64_t fill = 0;  // the value in the dtype, as raw bytes
  visit_dtype(y.dtype(), "Pad", [&](auto zero) {
    using T = decltype(zero);
    const T v = static_cast<T>(value);
    std::memcpy(&fill, &v, sizeof(T));
  });
  launch_box_pad(ctx, box_map_or_fail(ctx, dims, before, x.shape().dims()), x, &fill, y);
}

void pad_grad_kernel(KernelContext& ctx) {
  const Tensor& g = ctx.input(0);
  const Shape& like = ctx.input(1).shape();
  const Ints p = check_paddings(ctx, g.rank());
  Ints dims, before;
  for (int i = 0; i < g.rank(); ++i) {
    before.push_back(p[static_cast<size_t>(2 * i)]);
    dims.push_back(g.dim(i) - p[static_cast<size_t>(2 * i)] - p[static_cast<size_t>(2 * i + 1)]);
  }
  if (Shape(dims) != like)
    ctx.fail("grad shape ", g.shape().to_string(), " is not like shape ", like.to_string(),
             " padded by ", ints_str(p));
  Tensor& y = ctx.allocate_output(0, like);
  if (y.num_elements() == 0) return;
  launch_box_gather(ctx, box_map_or_fail(ctx, g.shape().dims(), before, dims), g, y);
}

// ---- gather and one-hot ------------------------------------------------------------------

// [outer, n, inner] of `pd` around `axis`, with ni indices.
GatherDims gather_dims(const Ints& pd, int axis, int64_t ni) {
  GatherDims g;
  g.outer = prod(pd, 0, static_cast<size_t>(axis));
  g.n = pd[static_cast<size_t>(axis)];
  g.inner = prod(pd, static_cast<size_t>(axis) + 1, pd.size());
  g.ni = ni;
  return g;
}

// An index outside [0, dim) gives zeros for its slice (TensorFlow's GPU
// behavior); the CPU kernel reports it as an error.
void gather_kernel_fn(KernelContext& ctx) {
  const Tensor& params = ctx.input(0);
  const Tensor& indices = ctx.input(1);
  if (params.rank() == 0) ctx.fail("params must have rank >= 1");
  const int axis = axis_or_fail(ctx, ctx.attr<int64_t>("axis"), params.rank());
  const Ints& pd = params.shape().dims();
  Ints dims(pd.begin(), pd.begin() + axis);
  for (int64_t d : indices.shape().dims()) dims.push_back(d);
  dims.insert(dims.end(), pd.begin() + axis + 1, pd.end());
  with_index_type(ctx, indices.dtype(), [&](auto izero) {
    using I = decltype(izero);
    Tensor& y = ctx.allocate_output(0, Shape(dims));
    const int64_t n = y.num_elements();
    if (n == 0) return;
    const GatherDims g = gather_dims(pd, axis, indices.num_elements());
    auto& cc = context(ctx);
    with_elem(dtype_size(params.dtype()), [&](auto e) {
      using E = decltype(e);
      gather_kernel<E, I><<<blocks_for(cc, n), kThreads, 0, cc.stream()>>>(
          g, n, static_cast<const E*>(params.raw_data()), indices.data<I>(),
          static_cast<E*>(y.raw_data()));
      SPIRE_CUDA_LAUNCH_CHECK();
    });
  });
}

// Out-of-range indices add nothing (their grad slices are dropped), matching
// the zeros Gather gives them on the GPU.
template <typename T>
void gather_grad_kernel_fn(KernelContext& ctx) {
  const Tensor& g = ctx.input(0);
  const Tensor& indices = ctx.input(1);
  const Shape& like = ctx.input(2).shape();
  if (like.rank() == 0) ctx.fail("like must have rank >= 1");
  const int axis = axis_or_fail(ctx, ctx.attr<int64_t>("axis"), like.rank());
  const Ints& pd = like.dims();
  Ints want(pd.begin(), pd.begin() + axis);
  for (int64_t d : indices.shape().dims()) want.push_back(d);
  want.insert(want.end(), pd.begin() + axis + 1, pd.end());
  if (g.shape() != Shape(want))
    ctx.fail("grad shape ", g.shape().to_string(), " does not match the gather shape ",
             Shape(want).to_string());
  with_index_type(ctx, indices.dtype(), [&](auto izero) {
    using I = decltype(izero);
    Tensor& y = ctx.allocate_output(0, like);
    auto& cc = context(ctx);
    zero_fill(cc, y);
    const int64_t n = g.num_elements();
    if (n == 0) return;
    const GatherDims dims = gather_dims(pd, axis, indices.num_elements());
    gather_grad_kernel<T, I><<<blocks_for(cc, n), kThreads, 0, cc.stream()>>>(
        dims, n, g.data<T>(), indices.data<I>(), y.data<T>());
    SPIRE_CUDA_LAUNCH_CHECK();
  });
}

// An index outside [0, depth) gives a row of off_value, as on the CPU.
void one_hot_kernel_fn(KernelContext& ctx) {
  const Tensor& indices = ctx.input(0);
  const int64_t depth = ctx.attr<int64_t>("depth");
  const double on = ctx.attr<double>("on_value"), off = ctx.attr<double>("off_value");
  Ints dims = indices.shape().dims();
  dims.push_back(depth);
  with_index_type(ctx, indices.dtype(), [&](auto izero) {
    using I = decltype(izero);
    Tensor& y = ctx.allocate_output(0, Shape(dims));
    const int64_t n = y.num_elements();
    if (n == 0) return;
    auto& cc = context(ctx);
    visit_dtype(y.dtype(), "OneHot", [&](auto zero) {
      using T = decltype(zero);
      one_hot_kernel<T, I><<<blocks_for(cc, n), kThreads, 0, cc.stream()>>>(
          depth, n, indices.data<I>(), static_cast<T>(on), static_cast<T>(off), y.data<T>());
      SPIRE_CUDA_LAUNCH_CHECK();
    });
  });
}

// ---- tile --------------------------------------------------------------------------------

Ints check_multiples(KernelContext& ctx, int rank) {
  Ints m = ctx.attr<Ints>("multiples");
  if (static_cast<int>(m.size()) != rank)
    ctx.fail("multiples ", ints_str(m), " do not match rank ", rank);
  for (int64_t v : m)
    if (v < 0) ctx.fail("multiples must be non-negative, got ", ints_str(m));
  return m;
}

TileMap tile_map_or_fail(KernelContext& ctx, const Ints& in, const Ints& mult) {
  TileMap m;
  if (!kernels::make_tile_map(in, mult, &m)) fail_rank(ctx, static_cast<int>(in.size()));
  return m;
}

void tile_kernel_fn(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Ints m = check_multiples(ctx, x.rank());
  Ints dims;
  for (int i = 0; i < x.rank(); ++i) dims.push_back(x.dim(i) * m[static_cast<size_t>(i)]);
  Tensor& y = ctx.allocate_output(0, Shape(dims));
  const int64_t n = y.num_elements();
  if (n == 0) return;
  const TileMap map = tile_map_or_fail(ctx, x.shape().dims(), m);
  auto& cc = context(ctx);
  with_elem(dtype_size(x.dtype()), [&](auto e) {
    using E = decltype(e);
    tile_kernel<E><<<blocks_for(cc, n), kThreads, 0, cc.stream()>>>(
        map, n, static_cast<const E*>(x.raw_data()), static_cast<E*>(y.raw_data()));
    SPIRE_CUDA_LAUNCH_CHECK();
  });
}

// TileGrad sums `copies` copies per output element. Each output's sum runs in
// one thread (deterministic, CPU order) unless there are too few outputs to
// fill the GPU while each would sum many copies; then every grad element is
// added atomically instead.
constexpr int64_t kTileGradFewOutputs = 1 << 16;
constexpr int64_t kTileGradManyCopies = 64;

template <typename T>
void tile_grad_kernel_fn(KernelContext& ctx) {
  const Tensor& g = ctx.input(0);
  const Shape& like = ctx.input(1).shape();
  const Ints m = check_multiples(ctx, like.rank());
  bool ok = g.rank() == like.rank();
  for (int i = 0; ok && i < g.rank(); ++i) ok = g.dim(i) == like[i] * m[static_cast<size_t>(i)];
  if (!ok)
    ctx.fail("grad shape ", g.shape().to_string(), " is not like shape ", like.to_string(),
             " tiled ", ints_str(m));
  Tensor& y = ctx.allocate_output(0, like);
  const int64_t n = y.num_elements();
  if (n == 0) return;
  auto& cc = context(ctx);
  const int64_t copies = prod(m, 0, m.size());
  if (copies == 0) {  // nothing tiled: the gradient is zero
    zero_fill(cc, y);
    return;
  }
  const TileMap map = tile_map_or_fail(ctx, like.dims(), m);
  if (n < kTileGradFewOutputs && copies > kTileGradManyCopies) {
    zero_fill(cc, y);
    const int64_t ng = g.num_elements();
    tile_grad_scatter_kernel<T><<<blocks_for(cc, ng), kThreads, 0, cc.stream()>>>(
        map, ng, g.data<T>(), y.data<T>());
  } else {
    tile_grad_sum_kernel<T><<<blocks_for(cc, n), kThreads, 0, cc.stream()>>>(
        map, n, copies, g.data<T>(), y.data<T>());
  }
  SPIRE_CUDA_LAUNCH_CHECK();
}

template <typename T> struct GatherGradK { static void run(KernelContext& c) { gather_grad_kernel_fn<T>(c); } };
template <typename T> struct TileGradK { static void run(KernelContext& c) { tile_grad_kernel_fn<T>(c); } };

template <template <typename> class K>
void register_numeric(const char* op) {
  auto& reg = KernelRegistry::global();
  reg.add(op, DeviceType::CUDA, DType::F32, K<float>::run);
  reg.add(op, DeviceType::CUDA, DType::F64, K<double>::run);
  reg.add(op, DeviceType::CUDA, DType::I32, K<int32_t>::run);
  reg.add(op, DeviceType::CUDA, DType::I64, K<int64_t>::run);
}

}  // namespace

SPIRE_STATIC_INIT(cuda_array_kernels) {
  const std::pair<const char*, KernelFn> any_dtype[] = {
      {"Reshape", reshape_kernel},        {"ReshapeLike", reshape_like_kernel},
      {"ExpandDims", expand_dims_kernel}, {"Squeeze", squeeze_kernel},
      {"Transpose", transpose_kernel},    {"Concat", concat_kernel},
      {"Split", split_kernel},            {"SplitLike", split_like_kernel},
      {"Slice", slice_kernel},            {"SliceGrad", slice_grad_kernel},
      {"Pad", pad_kernel},                {"PadGrad", pad_grad_kernel},
      {"Gather", gather_kernel_fn},       {"Tile", tile_kernel_fn},
  };
  for (const auto& [op, fn] : any_dtype)
    for (DType dt : {DType::F32, DType::F64, DType::I32, DType::I64, DType::Bool})
      KernelRegistry::global().add(op, DeviceType::CUDA, dt, fn);
  register_numeric<GatherGradK>("GatherGrad");
  register_numeric<TileGradK>("TileGrad");
  for (DType dt : {DType::I32, DType::I64})
    KernelRegistry::global().add("OneHot", DeviceType::CUDA, dt, one_hot_kernel_fn);
}

}  // namespace spire::cuda
