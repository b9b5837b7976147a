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
// Shapes and attrs are checked on the host by the code the CPU kernels use
// (kernels/array_attrs.h, which also holds the view kernels);
// index values live on the device and are never read back, so the CPU
// kernels' index-range errors become the GPU behaviors above.
#include <cstring>
#include <string>
#include <vector>

#include "core/kernel_registry.h"
#include "kernels/array_attrs.h"
#include "kernels/array_index.h"
#include "kernels/cuda/launch.h"

namespace spire::cuda {
namespace {

using Ints = std::vector<int64_t>;
using kernels::BoxMap;
using kernels::dims_prod;
using kernels::GatherDims;
using kernels::StridedMap;
using kernels::TileMap;
using kernels::Tiled2D;
using kernels::TransposePlan;

// ---- helpers -------------------------------------------------------------------------

// Calls f(E{}) with E an unsigned integer type of `esize` bytes.
template <typename F>
void with_elem(size_t esize, F&& f) {
  kernels::with_elem(esize, "CUDA array kernels", std::forward<F>(f));
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

// ---- transpose -------------------------------------------------------------------------

void transpose_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int r = x.rank();
  Shape out_shape;
  const Ints perm = kernels::transpose_perm(ctx, x, &out_shape);
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
  const kernels::ConcatArgs c = kernels::concat_args(ctx);
  const int axis = c.axis;
  const Ints& dims = c.dims;
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
  const kernels::SplitArgs a = kernels::split_args(ctx);
  split_parts(ctx, ctx.input(0), a.axis, a.sizes);
}

void split_like_kernel(KernelContext& ctx) {
  const kernels::SplitArgs a = kernels::split_like_args(ctx);
  split_parts(ctx, ctx.input(0), a.axis, a.sizes);
}

// ---- slice and pad ---------------------------------------------------------------------

void slice_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const kernels::SliceArgs a = kernels::slice_args(ctx);
  Tensor& y = ctx.allocate_output(0, Shape(a.box));
  if (y.num_elements() == 0) return;
  launch_box_gather(ctx, box_map_or_fail(ctx, x.shape().dims(), a.begin, a.box), x, y);
}

void slice_grad_kernel(KernelContext& ctx) {
  const Tensor& g = ctx.input(0);
  const Shape& like = ctx.input(1).shape();
  const kernels::SliceArgs a = kernels::slice_grad_args(ctx);
  Tensor& y = ctx.allocate_output(0, like);
  if (y.num_elements() == 0) return;
  const uint64_t zero = 0;  // all-zero bytes: 0 in every dtype
  launch_box_pad(ctx, box_map_or_fail(ctx, like.dims(), a.begin, a.box), g, &zero, y);
}

void pad_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const kernels::PadArgs a = kernels::pad_args(ctx);
  Tensor& y = ctx.allocate_output(0, Shape(a.dims));
  if (y.num_elements() == 0) return;
  const double value = ctx.attr<double>("value");
  uint64_t fill = 0;  // the value in the dtype, as raw bytes
  visit_dtype(y.dtype(), "Pad", [&](auto zero) {
    using T = decltype(zero);
    const T v = static_cast<T>(value);
    std::memcpy(&fill, &v, sizeof(T));
  });
  launch_box_pad(ctx, box_map_or_fail(ctx, a.dims, a.before, x.shape().dims()), x, &fill, y);
}

void pad_grad_kernel(KernelContext& ctx) {
  const Tensor& g = ctx.input(0);
  const kernels::PadArgs a = kernels::pad_grad_args(ctx);
  Tensor& y = ctx.allocate_output(0, ctx.input(1).shape());
  if (y.num_elements() == 0) return;
  launch_box_gather(ctx, box_map_or_fail(ctx, g.shape().dims(), a.before, a.dims), g, y);
}

// ---- gather and one-hot ------------------------------------------------------------------

// [outer, n, inner] of `pd` around `axis`, with ni indices.
GatherDims gather_dims(const Ints& pd, int axis, int64_t ni) {
  GatherDims g;
  g.outer = dims_prod(pd, 0, static_cast<size_t>(axis));
  g.n = pd[static_cast<size_t>(axis)];
  g.inner = dims_prod(pd, static_cast<size_t>(axis) + 1, pd.size());
  g.ni = ni;
  return g;
}

// An index outside [0, dim) gives zeros for its slice (TensorFlow's GPU
// behavior); the CPU kernel reports it as an error.
void gather_kernel_fn(KernelContext& ctx) {
  const Tensor& params = ctx.input(0);
  const Tensor& indices = ctx.input(1);
  const int axis = kernels::gather_axis(ctx, params.shape(), "params");
  const Ints& pd = params.shape().dims();
  const Ints dims = kernels::gather_dims(pd, axis, indices.shape());
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
  const int axis = kernels::gather_grad_axis(ctx);
  const Ints& pd = like.dims();
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
  const Ints dims = kernels::one_hot_dims(ctx);
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

TileMap tile_map_or_fail(KernelContext& ctx, const Ints& in, const Ints& mult) {
  TileMap m;
  if (!kernels::make_tile_map(in, mult, &m)) fail_rank(ctx, static_cast<int>(in.size()));
  return m;
}

void tile_kernel_fn(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Ints m;
  const Ints dims = kernels::tile_dims(ctx, &m);
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
  const Ints m = kernels::tile_grad_multiples(ctx);
  Tensor& y = ctx.allocate_output(0, like);
  const int64_t n = y.num_elements();
  if (n == 0) return;
  auto& cc = context(ctx);
  const int64_t copies = dims_prod(m, 0, m.size());
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

}  // namespace

SPIRE_STATIC_INIT(cuda_array_kernels) {
  kernels::register_view_kernels(DeviceType::CUDA);
  kernels::register_any_dtype(DeviceType::CUDA, {
      {"Transpose", transpose_kernel},    {"Concat", concat_kernel},
      {"Split", split_kernel},            {"SplitLike", split_like_kernel},
      {"Slice", slice_kernel},            {"SliceGrad", slice_grad_kernel},
      {"Pad", pad_kernel},                {"PadGrad", pad_grad_kernel},
      {"Gather", gather_kernel_fn},       {"Tile", tile_kernel_fn},
  });
  kernels::register_numeric<GatherGradK>("GatherGrad", DeviceType::CUDA);
  kernels::register_numeric<TileGradK>("TileGrad", DeviceType::CUDA);
  for (DType dt : {DType::I32, DType::I64})
    KernelRegistry::global().add("OneHot", DeviceType::CUDA, dt, one_hot_kernel_fn);
}

}  // namespace spire::cuda
