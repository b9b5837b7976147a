// CUDA kernels for the reductions Sum, Mean, Max, Min, Prod, ArgMax and
// L2Loss (ops in core/ops/reduction_ops.cc) and SumToLike (core/ops/op_util.cc), with
// the dtypes and semantics of the CPU kernels (kernels/cpu/reduction_kernels.cc,
// kernels/cpu/elementwise.cc).
//
// A reduction is canonicalized (kernels/reduce_index.h) into passes over
// [outer, len, inner] blocks, innermost reduced group first, so reductions
// over non-adjacent axes take one pass per reduced group and no transposes.
// Each pass runs one of three kernels:
//   - rows (inner == 1, len > 16): one warp per row for rows up to 512
//     elements, else one 256-thread block per row (or per chunk of a row),
//     with 16-byte vector loads when the row chunk is aligned; warp-shuffle
//     tree (__shfl_down_sync), then a shared-memory step across warps;
//   - columns (inner > 1) and very short rows: one thread per output (per
//     chunk), looping over len; neighbouring threads read neighbouring
//     addresses, so loads are coalesced;
// When a pass has too few outputs to fill the device, len is split into
// chunks (plan_split) reduced into a partial block by the first kernel, and
// the partials are reduced by the next pass. A full reduction is the row
// case with outer = 1: per-chunk block partials, then one more small pass.
// No atomics, so results are deterministic for a given device. Sum, Mean,
// Prod and L2Loss of f32 accumulate in double (f64 and integers in their own type):
// on an H200 the f32 tree of a product of 1,000,003 factors in [0.999, 1.001]
// was 7e-4 off (the CPU kernel's eight serial f32 accumulators 2e-5), and the
// double accumulator costs nothing in these memory-bound kernels. Mean divides
// the final sums by the count (integer division for integers). Attrs are
// resolved by the code the CPU kernels use (kernels/reduce_attrs.h,
// kernels/elementwise_attrs.h).
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "core/kernel_registry.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/launch.h"
#include "kernels/array_attrs.h"
#include "kernels/elementwise_attrs.h"
#include "kernels/reduce_attrs.h"
#include "kernels/reduce_index.h"

namespace spire::cuda {
namespace {

using kernels::ArgBest;
using kernels::ReduceBlock;
using kernels::ReduceItem;
using kernels::ReduceSplit;

constexpr unsigned kFullMask = 0xffffffffu;
// Threads of the row kernels (a multiple of 32).
constexpr int kRowThreads = 256;
// Rows up to this length take one warp per row; longer ones a block.
constexpr int64_t kWarpRowMax = 512;
// Rows up to this length take one thread per row (the column kernel).
constexpr int64_t kThreadRowMax = 16;
// Minimum chunk when splitting a row (elements) or a column (rows).
constexpr int64_t kRowMinChunk = 2048;
constexpr int64_t kColumnMinChunk = 32;

// ---- reduction policies ------------------------------------------------------
//
// A policy gives the accumulator type Acc, its identity and combine rule,
// lift(v, r) turning an input element at position r along len into an Acc
// (first pass: the element type; later passes: Acc itself), and finish(a)
// turning the final accumulator into the output element.

// The accumulator of reducer R over T: double for the sums and products of
// f32 (see the top), else T itself (Max and Min are exact in any type).
template <typename T, template <typename> class R>
using PlainAcc = std::conditional_t<std::is_same_v<T, float> &&
                                        (std::is_same_v<R<T>, kernels::SumReducer<T>> ||
                                         std::is_same_v<R<T>, kernels::ProdReducer<T>>),
                                    double, T>;

// Sum, Prod, Max, Min (and Mean with the division epilogue).
template <typename T, template <typename> class R>
struct PlainPolicy {
  using Acc = PlainAcc<T, R>;
  using Final = T;
  bool divide = false;
  Acc divisor = Acc(1);
  __device__ Acc identity() const { return R<Acc>::identity(); }
  __device__ Acc combine(Acc a, Acc b) const { return typename R<Acc>::Fn()(a, b); }
  // An input element (T) in the first pass, a partial (Acc) in later ones.
  template <typename V>
  __device__ Acc lift(V v, int64_t) const { return static_cast<Acc>(v); }
  __device__ Final finish(Acc a) const { return static_cast<T>(divide ? a / divisor : a); }
};

// L2Loss's first pass: each element is squared (in Acc) as it is read. The
// passes over its partials take PlainPolicy, which does not square; both
// halve in finish.
template <typename T>
struct SquarePolicy : PlainPolicy<T, kernels::SumReducer> {
  using Acc = typename PlainPolicy<T, kernels::SumReducer>::Acc;
  __device__ Acc lift(T v, int64_t) const { return static_cast<Acc>(v) * static_cast<Acc>(v); }
};

// ArgMax: (value, index) pairs; the output is the index as I.
template <typename T, typename I>
struct ArgMaxPolicy {
  using Acc = ArgBest<T>;
  using Final = I;
  __device__ Acc identity() const { return kernels::argmax_identity<T>(); }
  __device__ Acc combine(Acc a, Acc b) const { return kernels::argmax_combine(a, b); }
  __device__ Acc lift(T v, int64_t r) const { return Acc{v, r}; }
  __device__ Acc lift(Acc a, int64_t) const { return a; }
  __device__ Final finish(Acc a) const { return static_cast<I>(a.i); }
};

template <typename T>
__device__ T shfl_down(T v, int delta) {
  return __shfl_down_sync(kFullMask, v, delta);
}
template <typename T>
__device__ ArgBest<T> shfl_down(ArgBest<T> a, int delta) {
  a.v = __shfl_down_sync(kFullMask, a.v, delta);
  a.i = static_cast<int64_t>(
      __shfl_down_sync(kFullMask, static_cast<long long>(a.i), delta));
  return a;
}

// Tree reduction of a full warp; lane 0 holds the result.
template <typename P, typename Acc>
__device__ Acc warp_reduce(const P& p, Acc a) {
  for (int d = 16; d > 0; d >>= 1) a = p.combine(a, shfl_down(a, d));
  return a;
}

// Reduction of a whole block (blockDim.x a multiple of 32, every thread
// calls it); thread 0 holds the result. `smem` holds 32 accumulators and
// may be reused right after the call.
template <typename P, typename Acc>
__device__ Acc block_reduce(const P& p, Acc a, Acc* smem) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  a = warp_reduce(p, a);
  if (lane == 0) smem[warp] = a;
  __syncthreads();
  if (warp == 0) {
    const int nwarps = static_cast<int>(blockDim.x >> 5);
    a = lane < nwarps ? smem[lane] : p.identity();
    a = warp_reduce(p, a);
  }
  __syncthreads();
  return a;
}

// Writes an accumulator: the finished value in the last pass, else the
// accumulator itself into a partial block.
template <bool kFinal, typename P, typename Out>
__device__ void store(const P& p, Out* out, int64_t idx, typename P::Acc a) {
  if constexpr (kFinal) out[idx] = p.finish(a);
  else out[idx] = a;
}

template <typename In>
struct alignas(16) Vec16 {
  In v[16 / sizeof(In)];
};

// Rows: one block per (row, chunk) item, items grid-strided over blocks.
// Output slot of item (row, c) is row * splits + c.
template <bool kFinal, typename P, typename In, typename Out>
__global__ void __launch_bounds__(kRowThreads)
    row_block_kernel(P p, const In* __restrict__ in, Out* __restrict__ out, int64_t rows,
                     int64_t len, int64_t splits, int64_t chunk) {
  using Acc = typename P::Acc;
  __shared__ Acc smem[32];
  const int64_t items = rows * splits;
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const int64_t row = item / splits, c = item % splits;
    int64_t r0, r1;
    kernels::chunk_range(len, chunk, c, &r0, &r1);
    const In* src = in + row * len;
    Acc acc = p.identity();
    int64_t r_scalar = r0 + threadIdx.x;
    if constexpr (std::is_arithmetic_v<In>) {
      constexpr int kVec = static_cast<int>(16 / sizeof(In));
      if (reinterpret_cast<uintptr_t>(src + r0) % 16 == 0) {
        const Vec16<In>* vsrc = reinterpret_cast<const Vec16<In>*>(src + r0);
        const int64_t nvec = (r1 - r0) / kVec;
        for (int64_t k = threadIdx.x; k < nvec; k += blockDim.x) {
          const Vec16<In> v = vsrc[k];
#pragma unroll
          for (int j = 0; j < kVec; ++j) acc = p.combine(acc, p.lift(v.v[j], r0 + k * kVec + j));
        }
        r_scalar = r0 + nvec * kVec + threadIdx.x;
      }
    }
    for (int64_t r = r_scalar; r < r1; r += blockDim.x) acc = p.combine(acc, p.lift(src[r], r));
    acc = block_reduce(p, acc, smem);
    if (threadIdx.x == 0) store<kFinal>(p, out, item, acc);
  }
}

// Rows up to kWarpRowMax elements: one warp per row, rows grid-strided over warps.
template <bool kFinal, typename P, typename In, typename Out>
__global__ void row_warp_kernel(P p, const In* __restrict__ in, Out* __restrict__ out,
                                int64_t rows, int64_t len) {
  using Acc = typename P::Acc;
  const int lane = threadIdx.x & 31;
  const int64_t warps_per_block = blockDim.x >> 5;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * warps_per_block;
  for (int64_t row = blockIdx.x * warps_per_block + (threadIdx.x >> 5); row < rows; row += stride) {
    const In* src = in + row * len;
    Acc acc = p.identity();
    for (int64_t r = lane; r < len; r += 32) acc = p.combine(acc, p.lift(src[r], r));
    acc = warp_reduce(p, acc);
    if (lane == 0) store<kFinal>(p, out, row, acc);
  }
}

// Columns (and very short rows): one thread per work item (q, c, i) of the
// [outer, splits, inner] result, looping over its chunk of len.
template <bool kFinal, typename P, typename In, typename Out>
__global__ void column_kernel(P p, const In* __restrict__ in, Out* __restrict__ out,
                              ReduceBlock b, int64_t splits, int64_t chunk) {
  using Acc = typename P::Acc;
  const int64_t n = b.outer * splits * b.inner;
  SPIRE_GRID_STRIDE_LOOP(t, n) {
    const ReduceItem it = kernels::reduce_item(t, splits, b.inner);
    int64_t r0, r1;
    kernels::chunk_range(b.len, chunk, it.c, &r0, &r1);
    Acc acc = p.identity();
    for (int64_t r = r0; r < r1; ++r)
      acc = p.combine(acc, p.lift(in[kernels::reduce_offset(b, it.q, r, it.i)], r));
    store<kFinal>(p, out, t, acc);
  }
}

// Launches one kernel reducing `in` (block b, split as given) into `out`.
template <bool kFinal, typename P, typename In, typename Out>
void launch_pass(CudaContext& cc, const P& p, const ReduceBlock& b, const ReduceSplit& s,
                 const In* in, Out* out) {
  if (b.inner == 1 && !(s.splits == 1 && b.len <= kThreadRowMax)) {
    if (s.splits == 1 && b.len <= kWarpRowMax) {
      row_warp_kernel<kFinal><<<blocks_for(cc, b.outer * 32, kRowThreads), kRowThreads, 0,
                                cc.stream()>>>(p, in, out, b.outer, b.len);
    } else {
      const int64_t items = b.outer * s.splits;
      const int64_t cap = static_cast<int64_t>(std::max(cc.sm_count(), 1)) * 32;
      const int blocks = static_cast<int>(std::max<int64_t>(1, std::min(items, cap)));
      row_block_kernel<kFinal><<<blocks, kRowThreads, 0, cc.stream()>>>(p, in, out, b.outer, b.len,
                                                                       s.splits, s.chunk);
    }
  } else {
    column_kernel<kFinal><<<blocks_for(cc, b.outer * s.splits * b.inner), kThreads, 0,
                            cc.stream()>>>(p, in, out, b, s.splits, s.chunk);
  }
  SPIRE_CUDA_LAUNCH_CHECK();
}

// Reduces `in` (a [outer, len, inner] block, b.outer * b.inner > 0) into
// `out` ([outer, inner]), splitting len first when there are too few outputs
// to keep the device busy.
template <bool kFinal, typename P, typename In, typename Out>
void reduce_block(CudaContext& cc, const P& p, const ReduceBlock& b, const In* in, Out* out) {
  const int64_t sms = std::max(cc.sm_count(), 1);
  // Rows: about 8 blocks per SM; columns: about 2048 threads per SM.
  const ReduceSplit s = b.inner == 1 ? kernels::plan_split(b, sms * 8, kRowMinChunk)
                                     : kernels::plan_split(b, sms * 2048, kColumnMinChunk);
  if (s.splits == 1) {
    launch_pass<kFinal>(cc, p, b, s, in, out);
    return;
  }
  using Acc = typename P::Acc;
  Scratch partial(cc, sizeof(Acc) * static_cast<size_t>(b.outer * s.splits * b.inner));
  launch_pass<false>(cc, p, b, s, in, partial.as<Acc>());
  // The partials form a [outer, splits, inner] block; the scratch may be
  // released once the consuming kernel is queued (stream-ordered reuse).
  reduce_block<kFinal>(cc, p, ReduceBlock{b.outer, s.splits, b.inner},
                       static_cast<const Acc*>(partial.as<Acc>()), out);
}

template <typename T>
__global__ void fill_kernel(T* out, int64_t n, T v) {
  SPIRE_GRID_STRIDE_LOOP(i, n) out[i] = v;
}

// Reduces x (shape `in`) over the dims with is_reduced into out (out_elems
// elements, row-major over the kept dims) with policy P.
template <typename T, template <typename> class R>
void run_reduction(KernelContext& ctx, const Tensor& x, const std::vector<bool>& is_reduced,
                   T* out, int64_t out_elems, bool mean) {
  auto& cc = context(ctx);
  if (out_elems == 0) return;
  const int64_t in_elems = x.num_elements();
  if (in_elems == 0) {
    // Empty reduction: the identity (Mean: NaN for floats, 0 for integers).
    T v = R<T>::identity();
    if (mean) v = std::is_floating_point_v<T> ? std::numeric_limits<T>::quiet_NaN() : T(0);
    fill_kernel<<<blocks_for(cc, out_elems), kThreads, 0, cc.stream()>>>(out, out_elems, v);
    SPIRE_CUDA_LAUNCH_CHECK();
    return;
  }
  PlainPolicy<T, R> p;
  const int64_t count = in_elems / out_elems;
  if (mean && count > 1) {
    p.divide = true;
    p.divisor = static_cast<typename PlainPolicy<T, R>::Acc>(count);
  }
  std::vector<ReduceBlock> passes =
      kernels::reduce_passes(kernels::merge_reduce_dims(x.shape().dims(), is_reduced));
  // Nothing reduced (only size-1 dims): still fold each element into the
  // identity, as the CPU kernel does.
  if (passes.empty()) passes.push_back(ReduceBlock{in_elems, 1, 1});
  const T* cur = x.data<T>();
  std::vector<std::unique_ptr<Scratch>> temps;
  for (size_t k = 0; k < passes.size(); ++k) {
    const ReduceBlock& b = passes[k];
    if (k + 1 == passes.size()) {
      reduce_block<true>(cc, p, b, cur, out);
    } else {
      temps.push_back(
          std::make_unique<Scratch>(cc, sizeof(T) * static_cast<size_t>(b.outer * b.inner)));
      T* next = temps.back()->as<T>();
      reduce_block<false>(cc, p, b, cur, next);
      cur = next;
    }
  }
}

template <typename T, template <typename> class R, bool kMean = false>
void reduce_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const kernels::ReduceAxes axes = kernels::reduce_axes(ctx, x.shape());
  Tensor& y = ctx.allocate_output(0, axes.out_shape);
  run_reduction<T, R>(ctx, x, axes.is_reduced, y.data<T>(), y.num_elements(), kMean);
}

// SumToLike: sums x over the dims along which `like` was broadcast.
template <typename T>
void sum_to_like_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Shape& target = ctx.input(1).shape();
  Tensor* out = kernels::sum_to_like_output(ctx);
  if (!out) return;
  Tensor& z = *out;
  run_reduction<T, kernels::SumReducer>(ctx, x, kernels::sum_to_like_reduced(x.shape().dims(), target.dims()),
                                        z.data<T>(), z.num_elements(), false);
}

// L2Loss: sum(t^2) / 2 over every element, as a full Sum is planned (one
// row of n elements), the squares taken in the first pass only.
template <typename T>
void l2_loss_kernel(KernelContext& ctx) {
  auto& cc = context(ctx);
  const Tensor& t = ctx.input(0);
  T* out = ctx.allocate_output(0, Shape{}).data<T>();
  const int64_t n = t.num_elements();
  if (n == 0) {
    fill_kernel<<<1, kThreads, 0, cc.stream()>>>(out, 1, T(0));
    SPIRE_CUDA_LAUNCH_CHECK();
    return;
  }
  SquarePolicy<T> square;
  square.divide = true;
  square.divisor = 2;
  PlainPolicy<T, kernels::SumReducer> half;
  half.divide = true;
  half.divisor = 2;
  const ReduceBlock b{1, n, 1};
  const ReduceSplit s = kernels::plan_split(b, std::max(cc.sm_count(), 1) * 8, kRowMinChunk);
  if (s.splits == 1) {
    launch_pass<true>(cc, square, b, s, t.data<T>(), out);
    return;
  }
  using Acc = typename SquarePolicy<T>::Acc;
  Scratch partial(cc, sizeof(Acc) * static_cast<size_t>(s.splits));
  launch_pass<false>(cc, square, b, s, t.data<T>(), partial.as<Acc>());
  reduce_block<true>(cc, half, ReduceBlock{1, s.splits, 1},
                     static_cast<const Acc*>(partial.as<Acc>()), out);
}

// ArgMax over one axis: a single [outer, n, inner] pass with (value, index)
// accumulators.
template <typename T, typename I>
void argmax_impl(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const kernels::ArgMaxAxis am = kernels::argmax_axis(ctx, x.shape());
  Tensor& y = ctx.allocate_output(0, am.out_shape);
  if (y.num_elements() == 0) return;
  if (am.block.len == 0) ctx.fail("cannot take the argmax over an empty dimension");
  reduce_block<true>(context(ctx), ArgMaxPolicy<T, I>{}, am.block, x.data<T>(), y.data<I>());
}

template <typename T>
void argmax_kernel(KernelContext& ctx) {
  if (ctx.node().output_dtype(0) == DType::I32) argmax_impl<T, int32_t>(ctx);
  else argmax_impl<T, int64_t>(ctx);
}

template <template <typename> class R, bool kMean = false>
void register_reduction(const char* op) {
  kernels::register_numeric(op, DeviceType::CUDA,
                            [](auto zero) { return KernelFn(reduce_kernel<decltype(zero), R, kMean>); });
}

}  // namespace

SPIRE_STATIC_INIT(cuda_reduction_kernels) {
  register_reduction<kernels::SumReducer>("Sum");
  register_reduction<kernels::SumReducer, true>("Mean");
  register_reduction<kernels::MaxReducer>("Max");
  register_reduction<kernels::MinReducer>("Min");
  register_reduction<kernels::ProdReducer>("Prod");
  kernels::register_numeric("ArgMax", DeviceType::CUDA,
                            [](auto zero) { return KernelFn(argmax_kernel<decltype(zero)>); });
  KernelRegistry::global().add("L2Loss", DeviceType::CUDA, DType::F32, l2_loss_kernel<float>);
  KernelRegistry::global().add("L2Loss", DeviceType::CUDA, DType::F64, l2_loss_kernel<double>);
  kernels::register_numeric("SumToLike", DeviceType::CUDA,
                            [](auto zero) { return KernelFn(sum_to_like_kernel<decltype(zero)>); });
}

}  // namespace spire::cuda
