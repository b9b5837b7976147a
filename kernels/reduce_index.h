// Index math, plans and combine rules of the CUDA reductions and softmax
// kernels (kernels/cuda/reduction_kernels.cu, kernels/cuda/softmax_kernels.cu).
// Everything here is plain C++ (SPIRE_HD functions and host-only planning
// helpers, no CUDA includes), so tests/kernels/reduce_index_test.cc runs the
// same functions with host loops and compares the results with the CPU
// kernels.
//
// A reduction is canonicalized by dropping size-1 dims and merging adjacent
// dims that are all reduced or all kept (merge_reduce_dims); the remaining
// groups alternate. It then runs as a sequence of passes (reduce_passes),
// each a [outer, len, inner] row-major block reduced over `len` into
// [outer, inner]; a pass removes the innermost reduced group, after which the
// kept groups on both sides of it are adjacent and merge. A pass whose
// outputs are too few to fill the device is split along `len` into chunks
// (plan_split): the first kernel reduces each chunk into a partial
// [outer, splits, inner] block, which is itself reduced as a pass.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/functors.h"

namespace spire::kernels {

// ---- canonical form --------------------------------------------------------

/// One reduction pass: the input seen as [outer, len, inner] (row-major),
/// reduced over len into [outer, inner].
struct ReduceBlock {
  int64_t outer = 1, len = 1, inner = 1;
};

/// A reduction with size-1 dims dropped and adjacent reduced / kept dims
/// merged: dims[k] is reduced when reduced[k]; neighbours always differ.
struct ReduceGroups {
  std::vector<int64_t> dims;
  std::vector<bool> reduced;
};

/// The groups of a tensor of shape `shape` reduced over the dims with
/// is_reduced[d] (same length as shape).
inline ReduceGroups merge_reduce_dims(const std::vector<int64_t>& shape,
                                      const std::vector<bool>& is_reduced) {
  ReduceGroups g;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;  // size-1 dims do not affect the layout
    if (!g.dims.empty() && g.reduced.back() == is_reduced[d]) {
      g.dims.back() *= shape[d];
    } else {
      g.dims.push_back(shape[d]);
      g.reduced.push_back(is_reduced[d]);
    }
  }
  return g;
}

/// The passes of a reduction, innermost reduced group first; the output of
/// each pass is the input of the next, and the last one produces the result
/// (in the row-major order of the kept dims). Empty when nothing is reduced.
inline std::vector<ReduceBlock> reduce_passes(ReduceGroups g) {
  std::vector<ReduceBlock> passes;
  for (;;) {
    int j = static_cast<int>(g.dims.size()) - 1;
    while (j >= 0 && !g.reduced[static_cast<size_t>(j)]) --j;
    if (j < 0) return passes;
    ReduceBlock b;
    for (int k = 0; k < j; ++k) b.outer *= g.dims[static_cast<size_t>(k)];
    b.len = g.dims[static_cast<size_t>(j)];
    for (size_t k = static_cast<size_t>(j) + 1; k < g.dims.size(); ++k) b.inner *= g.dims[k];
    passes.push_back(b);
    // Remove group j; its kept neighbours (if both exist) become adjacent.
    g.dims.erase(g.dims.begin() + j);
    g.reduced.erase(g.reduced.begin() + j);
    if (j > 0 && static_cast<size_t>(j) < g.dims.size()) {
      g.dims[static_cast<size_t>(j - 1)] *= g.dims[static_cast<size_t>(j)];
      g.dims.erase(g.dims.begin() + j);
      g.reduced.erase(g.reduced.begin() + j);
    }
  }
}

/// The dims of x that SumToLike sums over to reach `like` (leading dims
/// missing from like, and dims where like has 1 and x does not). Assumes
/// like broadcasts to x's shape.
inline std::vector<bool> sum_to_like_reduced(const std::vector<int64_t>& x,
                                             const std::vector<int64_t>& like) {
  const size_t lead = x.size() - like.size();
  std::vector<bool> r(x.size(), false);
  for (size_t d = 0; d < x.size(); ++d)
    r[d] = d < lead || (like[d - lead] == 1 && x[d] != 1);
  return r;
}

// ---- splitting a pass ------------------------------------------------------

/// How a pass's reduced length is cut: `splits` chunks of `chunk` elements
/// (the last one may be shorter); splits == 1 means no split (chunk = len).
struct ReduceSplit {
  int64_t splits = 1, chunk = 0;
};

SPIRE_HD inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// Splits b.len so that about `target_items` (outer * inner * splits) work
/// items exist, with chunks of at least `min_chunk` (>= 4) elements rounded
/// up to a multiple of 4 (so aligned rows stay aligned for vector loads).
/// Always splits < len when splits > 1, so repeated splitting terminates.
inline ReduceSplit plan_split(const ReduceBlock& b, int64_t target_items, int64_t min_chunk) {
  ReduceSplit s;
  s.chunk = b.len;
  const int64_t items = b.outer * b.inner;
  if (items <= 0 || items >= target_items || b.len <= min_chunk) return s;
  const int64_t want = std::min(ceil_div(target_items, items), ceil_div(b.len, min_chunk));
  if (want <= 1) return s;
  const int64_t chunk = ceil_div(ceil_div(b.len, want), 4) * 4;
  if (chunk >= b.len) return s;
  s.chunk = chunk;
  s.splits = ceil_div(b.len, chunk);
  return s;
}

/// Work item t of a (possibly split) pass: output slot t of the
/// [outer, splits, inner] result, i.e. (q, c, i) with t = (q * splits + c) * inner + i.
struct ReduceItem {
  int64_t q, c, i;
};

SPIRE_HD inline ReduceItem reduce_item(int64_t t, int64_t splits, int64_t inner) {
  ReduceItem it;
  it.i = t % inner;
  const int64_t qc = t / inner;
  it.c = qc % splits;
  it.q = qc / splits;
  return it;
}

/// Offset in a pass's input of element r (along len) for outer index q and
/// inner index i.
SPIRE_HD inline int64_t reduce_offset(const ReduceBlock& b, int64_t q, int64_t r, int64_t i) {
  return (q * b.len + r) * b.inner + i;
}

/// The range [r0, r1) of len covered by chunk c.
SPIRE_HD inline void chunk_range(int64_t len, int64_t chunk, int64_t c, int64_t* r0, int64_t* r1) {
  *r0 = c * chunk;
  *r1 = *r0 + chunk < len ? *r0 + chunk : len;
}

// ---- combine rules ---------------------------------------------------------

template <typename T>
SPIRE_HD inline T lowest_or_neg_inf() {
  if constexpr (std::is_floating_point_v<T>) return -std::numeric_limits<T>::infinity();
  else return std::numeric_limits<T>::lowest();
}
template <typename T>
SPIRE_HD inline T highest_or_inf() {
  if constexpr (std::is_floating_point_v<T>) return std::numeric_limits<T>::infinity();
  else return std::numeric_limits<T>::max();
}

/// Reducers: a shared functor (kernels/functors.h) and its identity, which
/// is also the result of an empty reduction (as the CPU kernels).
template <typename T>
struct SumReducer {
  using Fn = functors::Add;
  static SPIRE_HD T identity() { return T(0); }
};
template <typename T>
struct ProdReducer {
  using Fn = functors::Mul;
  static SPIRE_HD T identity() { return T(1); }
};
template <typename T>
struct MaxReducer {
  using Fn = functors::Maximum;  // NaN propagates
  static SPIRE_HD T identity() { return lowest_or_neg_inf<T>(); }
};
template <typename T>
struct MinReducer {
  using Fn = functors::Minimum;
  static SPIRE_HD T identity() { return highest_or_inf<T>(); }
};

/// ArgMax accumulator: the best value so far and its index along the axis.
template <typename T>
struct ArgBest {
  T v;
  int64_t i;
};

/// Loses to every element (ties go to the smaller index).
template <typename T>
SPIRE_HD inline ArgBest<T> argmax_identity() {
  return ArgBest<T>{lowest_or_neg_inf<T>(), std::numeric_limits<int64_t>::max()};
}

/// The better of two candidates: NaN counts as the largest value, and among
/// equal values (or NaNs) the smaller index wins. Associative and
/// commutative, so any reduction order gives the CPU's "first largest".
template <typename T>
SPIRE_HD inline ArgBest<T> argmax_combine(ArgBest<T> a, ArgBest<T> b) {
  const bool a_nan = a.v != a.v, b_nan = b.v != b.v;
  bool take_b;
  if (a_nan || b_nan) take_b = b_nan && (!a_nan || b.i < a.i);
  else take_b = b.v > a.v || (b.v == a.v && b.i < a.i);
  return take_b ? b : a;
}

// ---- softmax ---------------------------------------------------------------

/// Online softmax state of a set of values: m is their maximum and
/// s = sum(exp(x - m)). NaN inputs make s NaN (so the row's outputs are NaN,
/// as on the CPU); m never becomes NaN.
template <typename T>
struct SoftmaxState {
  T m, s;
};

template <typename T>
SPIRE_HD inline SoftmaxState<T> softmax_identity() {
  return SoftmaxState<T>{-std::numeric_limits<T>::infinity(), T(0)};
}

/// Adds x: when x raises the maximum, the sum is rescaled by exp(m - x).
/// Elements equal to m add exactly 1 (also for infinite m).
template <typename T>
SPIRE_HD inline void softmax_add(SoftmaxState<T>& st, T x) {
  using std::exp;
  if (x > st.m) {
    st.s = st.s * exp(st.m - x) + T(1);
    st.m = x;
  } else if (x == st.m) {
    st.s += T(1);
  } else {
    st.s += exp(x - st.m);  // x < m, or x is NaN
  }
}

/// The state of the union of two sets (symmetric in a and b).
template <typename T>
SPIRE_HD inline SoftmaxState<T> softmax_merge(SoftmaxState<T> a, SoftmaxState<T> b) {
  using std::exp;
  const T m = a.m > b.m ? a.m : b.m;
  const T sa = a.m == m ? a.s : a.s * exp(a.m - m);
  const T sb = b.m == m ? b.s : b.s * exp(b.m - m);
  return SoftmaxState<T>{m, sa + sb};
}

/// The final state of a row: a +inf maximum makes the sum NaN, as the CPU
/// kernel's exp(inf - inf) does (every output of such a row is NaN).
template <typename T>
SPIRE_HD inline SoftmaxState<T> softmax_finish(SoftmaxState<T> st) {
  if (st.m == std::numeric_limits<T>::infinity()) st.s = std::numeric_limits<T>::quiet_NaN();
  return st;
}

/// softmax(x) given the row's finished state and inv_sum = 1 / s.
template <typename T>
SPIRE_HD inline T softmax_value(T x, T m, T inv_sum) {
  using std::exp;
  return exp(x - m) * inv_sum;
}

/// log_softmax(x) given the row's finished state and log_sum = log(s).
template <typename T>
SPIRE_HD inline T log_softmax_value(T x, T m, T log_sum) {
  return (x - m) - log_sum;
}

/// The sparse cross-entropy loss of a row: log(s) - (x[label] - m), or NaN
/// for a label outside [0, classes) (TensorFlow's GPU semantics; the CPU
/// kernel raises an error instead).
template <typename T>
SPIRE_HD inline T sparse_xent_loss(SoftmaxState<T> st, const T* row, int64_t label,
                                   int64_t classes) {
  using std::log;
  if (label < 0 || label >= classes) return std::numeric_limits<T>::quiet_NaN();
  return log(st.s) - (row[label] - st.m);
}

}  // namespace spire::kernels
