// CPU kernels for the reductions Sum, Mean, Max, Min, Prod, ArgMax and
// L2Loss (ops in core/ops/reduction_ops.cc). The input shape is first simplified:
// size-1 dims are dropped and adjacent dims that are all reduced or all kept
// are merged, so a reduction becomes a walk over contiguous rows of the
// innermost group: a reduced inner group folds each row to one value (eight
// partial accumulators), a kept inner group combines whole rows elementwise
// into the output (a vectorizable loop). Outer groups are iterated with an
// odometer over the output offsets.
// With the session's thread pool, the outermost group is split across
// threads: when it is kept, each thread writes its own slab of the output
// (same result as one thread); when it is reduced, each thread folds its
// share into a private partial output and the partials are combined in
// share order (deterministic for a given thread count). The axes attrs and
// the dim merging are shared with the CUDA kernels (kernels/reduce_attrs.h,
// kernels/reduce_index.h). L2Loss folds squares in 32 fixed lanes through
// run_vec (this file is compiled with -ffp-contract=off, so every
// instruction set rounds alike).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/kernel_registry.h"
#include "kernels/array_attrs.h"
#include "kernels/cpu/vector_loops.h"
#include "kernels/reduce_attrs.h"

namespace spire::cpu {
namespace {

// A simplified reduction: dims[i] with reduced[i]; adjacent groups alternate.
struct ReducePlan {
  std::vector<int64_t> dims;
  std::vector<bool> reduced;
  Shape out_shape;        // the node's output shape (keepdims applied)
  int64_t out_elems = 1;  // elements of the output
  int64_t in_elems = 1;
};

ReducePlan make_plan(KernelContext& ctx, const Shape& in) {
  kernels::ReduceAxes axes = kernels::reduce_axes(ctx, in);
  kernels::ReduceGroups groups = kernels::merge_reduce_dims(in.dims(), axes.is_reduced);
  ReducePlan p;
  p.dims = std::move(groups.dims);
  p.reduced = std::move(groups.reduced);
  p.out_shape = std::move(axes.out_shape);
  p.out_elems = p.out_shape.num_elements();
  p.in_elems = in.num_elements();
  return p;
}

// Combines values: `fold` merges one element into an accumulator.
template <typename T>
struct SumOp {
  static T init() { return T(0); }
  static T fold(T acc, T v) { return acc + v; }
};
template <typename T>
struct ProdOp {
  static T init() { return T(1); }
  static T fold(T acc, T v) { return acc * v; }
};
template <typename T>
struct MaxOp {
  static T init() {
    if constexpr (std::is_floating_point_v<T>) return -std::numeric_limits<T>::infinity();
    else return std::numeric_limits<T>::lowest();
  }
  static T fold(T acc, T v) {
    // Bitwise | (not ||) keeps the NaN-propagating select vectorizable.
    if constexpr (std::is_floating_point_v<T>) return ((v > acc) | (v != v)) ? v : acc;
    else return v > acc ? v : acc;
  }
};
template <typename T>
struct MinOp {
  static T init() {
    if constexpr (std::is_floating_point_v<T>) return std::numeric_limits<T>::infinity();
    else return std::numeric_limits<T>::max();
  }
  static T fold(T acc, T v) {
    if constexpr (std::is_floating_point_v<T>) return ((v < acc) | (v != v)) ? v : acc;
    else return v < acc ? v : acc;
  }
};

// Folds a contiguous row with eight independent accumulators (better
// pipelining and, for sums, smaller rounding error than one running sum).
template <typename T, typename Op>
T fold_row(const T* p, int64_t n) {
  T acc[8];
  for (T& a : acc) a = Op::init();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] = Op::fold(acc[k], p[i + k]);
  for (; i < n; ++i) acc[0] = Op::fold(acc[0], p[i]);
  T r = acc[0];
  for (int k = 1; k < 8; ++k) r = Op::fold(r, acc[k]);
  return r;
}

// Folds the input rows whose outermost-group index lies in [i0, i1) into
// `out` (already initialized). With a single group, [i0, i1) are elements.
template <typename T, typename Op>
void reduce_range(const ReducePlan& p, const T* in, T* out, int64_t i0, int64_t i1) {
  const int g = static_cast<int>(p.dims.size());
  const int64_t n = p.dims.back();
  const bool inner_reduced = p.reduced.back();
  if (g == 1) {
    if (inner_reduced) {
      out[0] = Op::fold(out[0], fold_row<T, Op>(in + i0, i1 - i0));
    } else {
      for (int64_t i = i0; i < i1; ++i) out[i] = Op::fold(out[i], in[i]);
    }
    return;
  }
  // Output strides of the groups (0 for reduced groups).
  std::vector<int64_t> ostride(static_cast<size_t>(g), 0);
  int64_t acc = 1;
  for (int i = g - 1; i >= 0; --i) {
    if (!p.reduced[static_cast<size_t>(i)]) {
      ostride[static_cast<size_t>(i)] = acc;
      acc *= p.dims[static_cast<size_t>(i)];
    }
  }
  const int64_t rows_per_outer = p.in_elems / n / p.dims[0];
  std::vector<int64_t> idx(static_cast<size_t>(g), 0);
  idx[0] = i0;
  int64_t o = i0 * ostride[0];
  for (int64_t r = i0 * rows_per_outer, r_end = i1 * rows_per_outer; r < r_end; ++r) {
    const T* row = in + r * n;
    if (inner_reduced) {
      out[o] = Op::fold(out[o], fold_row<T, Op>(row, n));
    } else {
      T* dst = out + o;
      for (int64_t i = 0; i < n; ++i) dst[i] = Op::fold(dst[i], row[i]);
    }
    for (int d = g - 2; d >= 0; --d) {
      auto du = static_cast<size_t>(d);
      o += ostride[du];
      if (++idx[du] < p.dims[du] || d == 0) break;
      o -= ostride[du] * p.dims[du];
      idx[du] = 0;
    }
  }
}

// Elements per thread below which a reduction stays on one thread.
constexpr int64_t kReduceGrain = int64_t{1} << 15;

template <typename T, typename Op>
void reduce_into(const KernelContext& ctx, const ReducePlan& p, const T* in, T* out) {
  std::fill(out, out + p.out_elems, Op::init());
  if (p.in_elems == 0) return;
  if (p.dims.empty()) {  // every dim has size 1
    out[0] = Op::fold(out[0], in[0]);
    return;
  }
  const int64_t outer = p.dims[0];
  const int64_t per_outer = p.in_elems / outer;
  const int64_t grain = std::max<int64_t>(1, kReduceGrain / per_outer);
  const int64_t parts = ctx.thread_pool() ? ctx.thread_pool()->num_chunks(outer, grain) : 1;
  if (parts <= 1) {
    reduce_range<T, Op>(p, in, out, 0, outer);
    return;
  }
  if (!p.reduced[0]) {  // disjoint output slabs
    ctx.parallel_for(outer, grain, [&](int64_t b, int64_t e) { reduce_range<T, Op>(p, in, out, b, e); });
    return;
  }
  // Private partials for shares 1.., combined into share 0's `out` in order.
  std::vector<T> partials(static_cast<size_t>((parts - 1) * p.out_elems), Op::init());
  ctx.parallel_for(parts, 1, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s)
      reduce_range<T, Op>(p, in, s == 0 ? out : partials.data() + (s - 1) * p.out_elems,
                          ThreadPool::chunk_begin(outer, parts, s),
                          ThreadPool::chunk_begin(outer, parts, s + 1));
  });
  for (int64_t s = 1; s < parts; ++s) {
    const T* src = partials.data() + (s - 1) * p.out_elems;
    for (int64_t i = 0; i < p.out_elems; ++i) out[i] = Op::fold(out[i], src[i]);
  }
}

template <typename T, template <typename> class Op, bool kMean = false>
void reduce_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ReducePlan p = make_plan(ctx, x.shape());
  Tensor& y = ctx.allocate_output(0, p.out_shape);
  T* out = y.data<T>();
  reduce_into<T, Op<T>>(ctx, p, x.data<T>(), out);
  if constexpr (kMean) {
    const int64_t count = p.out_elems == 0 ? 0 : p.in_elems / p.out_elems;
    if (p.out_elems > 0 && p.in_elems == 0) {
      const T v = std::is_floating_point_v<T> ? std::numeric_limits<T>::quiet_NaN() : T(0);
      std::fill(out, out + p.out_elems, v);
    } else if (count > 1) {
      for (int64_t i = 0; i < p.out_elems; ++i) out[i] = static_cast<T>(out[i] / static_cast<T>(count));
    }
  }
}

// ArgMax over one axis: the input is seen as [outer, n, inner]; the inner
// dimension is contiguous, so the best values of a whole inner row are
// updated at once.
template <typename T, typename I>
void argmax_impl(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const kernels::ArgMaxAxis am = kernels::argmax_axis(ctx, x.shape());
  const int64_t outer = am.block.outer, n = am.block.len, inner = am.block.inner;
  Tensor& y = ctx.allocate_output(0, am.out_shape);
  if (y.num_elements() == 0) return;
  if (n == 0) ctx.fail("cannot take the argmax over an empty dimension");
  const T* px = x.data<T>();
  I* py = y.data<I>();
  if (inner == 1) {
    // Reduction along contiguous rows: the max by a vectorized fold, then
    // the first index holding it (NaN counts as the largest).
    for (int64_t o = 0; o < outer; ++o) {
      const T* row = px + o * n;
      const T m = fold_row<T, MaxOp<T>>(row, n);
      int64_t k = 0;
      if (m != m) {
        while (row[k] == row[k]) ++k;
      } else {
        while (row[k] != m) ++k;
      }
      py[o] = static_cast<I>(k);
    }
    return;
  }
  std::vector<T> best(static_cast<size_t>(inner));
  for (int64_t o = 0; o < outer; ++o) {
    const T* base = px + o * n * inner;
    I* dst = py + o * inner;
    std::copy(base, base + inner, best.begin());
    std::fill(dst, dst + inner, I(0));
    for (int64_t k = 1; k < n; ++k) {
      const T* row = base + k * inner;
      for (int64_t i = 0; i < inner; ++i) {
        const T v = row[i];
        const T b = best[static_cast<size_t>(i)];
        bool better = v > b;
        if constexpr (std::is_floating_point_v<T>) better = better | ((v != v) & (b == b));
        if (better) {
          best[static_cast<size_t>(i)] = v;
          dst[i] = static_cast<I>(k);
        }
      }
    }
  }
}

void argmax_kernel(KernelContext& ctx) {
  visit_dtype(ctx.input(0).dtype(), "ArgMax", [&](auto zero) {
    using T = decltype(zero);
    if constexpr (std::is_same_v<T, bool>) {
      ctx.fail("bool input is not supported");
    } else {
      if (ctx.node().output_dtype(0) == DType::I32) argmax_impl<T, int32_t>(ctx);
      else argmax_impl<T, int64_t>(ctx);
    }
  });
}

// sum(p[i]^2) for i < n: element i goes to lane i % kLanes, the last n % kLanes to lane 0
// (a varying lane index would keep the lanes in memory), and the lanes join in a fixed
// pairwise tree: for a given n, one order on every instruction set. Accumulates in T (the
// CUDA kernel accumulates f32 in double; their parity tolerance covers it).
template <typename T>
T sum_of_squares(const T* __restrict p, int64_t n) {
  constexpr int kLanes = 32;
  T acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int k = 0; k < kLanes; ++k) acc[k] += p[i + k] * p[i + k];
  for (; i < n; ++i) acc[0] += p[i] * p[i];
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int k = 0; k < w; ++k) acc[k] += acc[k + w];
  return acc[0];
}

// L2Loss: the elements are cut into shares (as a full Sum is), each share folded by
// sum_of_squares, the shares added in order (deterministic for a given thread count), then
// halved (exact unless the sum is subnormal).
template <typename T>
void l2_loss_kernel(KernelContext& ctx) {
  const Tensor& t = ctx.input(0);
  const T* p = t.data<T>();
  const int64_t n = t.num_elements();
  T* out = ctx.allocate_output(0, Shape{}).data<T>();
  const int64_t parts = std::max<int64_t>(
      1, ctx.thread_pool() ? ctx.thread_pool()->num_chunks(n, kReduceGrain) : 1);
  if (parts == 1) {
    run_vec([&] { out[0] = sum_of_squares(p, n) * T(0.5); });
    return;
  }
  std::vector<T> partial(static_cast<size_t>(parts), T(0));
  ctx.parallel_for(parts, 1, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      const int64_t b = ThreadPool::chunk_begin(n, parts, s), e = ThreadPool::chunk_begin(n, parts, s + 1);
      T r{};
      run_vec([&] { r = sum_of_squares(p + b, e - b); });
      partial[static_cast<size_t>(s)] = r;
    }
  });
  T total = partial[0];
  for (int64_t s = 1; s < parts; ++s) total += partial[static_cast<size_t>(s)];
  out[0] = total * T(0.5);
}

template <template <typename> class Op, bool kMean = false>
void register_reduction(const char* op) {
  kernels::register_numeric(op, DeviceType::CPU,
                            [](auto zero) { return KernelFn(reduce_kernel<decltype(zero), Op, kMean>); });
}

}  // namespace

SPIRE_STATIC_INIT(cpu_reduction_kernels) {
  register_reduction<SumOp>("Sum");
  register_reduction<SumOp, true>("Mean");
  register_reduction<MaxOp>("Max");
  register_reduction<MinOp>("Min");
  register_reduction<ProdOp>("Prod");
  for (DType dt : {DType::F32, DType::F64, DType::I32, DType::I64})
    KernelRegistry::global().add("ArgMax", DeviceType::CPU, dt, argmax_kernel);
  KernelRegistry::global().add("L2Loss", DeviceType::CPU, DType::F32, l2_loss_kernel<float>);
  KernelRegistry::global().add("L2Loss", DeviceType::CPU, DType::F64, l2_loss_kernel<double>);
}

}  // namespace spire::cpu
