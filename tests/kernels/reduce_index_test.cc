// Host runs of the index math and combine rules of the CUDA reductions and
// softmax kernels (kernels/reduce_index.h): the reductions are computed with
// plain loops that follow the CUDA kernels' plan step by step (merged dims,
// one pass per reduced group, chunk splits and their partial blocks, work
// item decomposition, input offsets), ArgMax with its (value, index)
// combine rule, and Softmax / LogSoftmax / sparse cross-entropy with the
// online max-sum states merged in the kernels' warp and block orders. Each
// result is compared with the CPU kernel run through a Session, for odd
// shapes, non-adjacent axes, size-1 and empty dims, ties, NaN and infinities,
// and several split settings (the device-dependent targets of plan_split).
// This is the only executed check of the GPU index math on machines
// without a GPU.
#include "kernels/reduce_index.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "core/ops/op_util.h"
#include "spire.h"
#include "tests/support/op_test_util.h"

namespace spire::kernels {
namespace {

using Dims = std::vector<int64_t>;

// plan_split settings: never split, split a little, split as much as
// allowed, and a mid setting with a larger minimum chunk.
struct SplitParams {
  int64_t target, min_chunk;
};
const SplitParams kSplitParams[] = {{1, 4}, {64, 4}, {int64_t{1} << 40, 4}, {300, 8}};

std::string split_name(const SplitParams& sp) {
  return "split(target " + std::to_string(sp.target) + ", min_chunk " +
         std::to_string(sp.min_chunk) + ")";
}

int64_t product(const Dims& d) {
  int64_t n = 1;
  for (int64_t v : d) n *= v;
  return n;
}

std::vector<bool> flags_for(const Dims& shape, const Dims& axes) {
  const int rank = static_cast<int>(shape.size());
  std::vector<bool> r(shape.size(), axes.empty());
  for (int64_t a : axes) r[static_cast<size_t>(a < 0 ? a + rank : a)] = true;
  return r;
}

// Later passes read accumulators as they are.
struct KeepAcc {
  template <typename A>
  A operator()(A a, int64_t) const {
    return a;
  }
};

// One pass as reduce_block runs it: plan_split, then one work item per slot
// of the [outer, splits, inner] result (the column kernel's decomposition;
// the row kernels use the same slots with inner == 1), then the partials
// reduced as a pass of their own.
template <typename Acc, typename In, typename Lift, typename Combine>
std::vector<Acc> sim_block(const ReduceBlock& b, const std::vector<In>& in, Acc identity,
                           Lift lift, Combine combine, const SplitParams& sp) {
  const ReduceSplit s = plan_split(b, sp.target, sp.min_chunk);
  EXPECT_GE(s.splits, 1);
  if (s.splits > 1) {
    EXPECT_LT(s.splits, b.len);
    EXPECT_EQ(s.chunk % 4, 0);
    EXPECT_GE(s.chunk, sp.min_chunk / 2);
    EXPECT_LT(s.chunk * (s.splits - 1), b.len);  // no empty chunk
    EXPECT_GE(s.chunk * s.splits, b.len);        // len covered
  } else {
    EXPECT_EQ(s.chunk, b.len);
  }
  EXPECT_EQ(static_cast<int64_t>(in.size()), b.outer * b.len * b.inner);
  const int64_t n = b.outer * s.splits * b.inner;
  std::vector<Acc> out(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) {
    const ReduceItem it = reduce_item(t, s.splits, b.inner);
    int64_t r0, r1;
    chunk_range(b.len, s.chunk, it.c, &r0, &r1);
    Acc acc = identity;
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t off = reduce_offset(b, it.q, r, it.i);
      EXPECT_TRUE(off >= 0 && off < static_cast<int64_t>(in.size()));
      acc = combine(acc, lift(in[static_cast<size_t>(off)], r));
    }
    out[static_cast<size_t>(t)] = acc;
  }
  if (s.splits == 1) return out;
  return sim_block<Acc, Acc>(ReduceBlock{b.outer, s.splits, b.inner}, out, identity, KeepAcc{},
                             combine, sp);
}

// A reduction as run_reduction in kernels/cuda/reduction_kernels.cu runs it.
template <typename T, template <typename> class R>
std::vector<T> sim_reduce(const Dims& shape, const std::vector<bool>& is_red,
                          const std::vector<T>& x, bool mean, const SplitParams& sp) {
  int64_t out_elems = 1;
  for (size_t d = 0; d < shape.size(); ++d)
    if (!is_red[d]) out_elems *= shape[d];
  const int64_t in_elems = product(shape);
  if (out_elems == 0) return {};
  if (in_elems == 0) {
    T v = R<T>::identity();
    if (mean) v = std::is_floating_point_v<T> ? std::numeric_limits<T>::quiet_NaN() : T(0);
    return std::vector<T>(static_cast<size_t>(out_elems), v);
  }
  std::vector<ReduceBlock> passes = reduce_passes(merge_reduce_dims(shape, is_red));
  if (passes.empty()) passes.push_back(ReduceBlock{in_elems, 1, 1});
  auto combine = [](T a, T b) { return typename R<T>::Fn()(a, b); };
  std::vector<T> cur = x;
  for (const ReduceBlock& b : passes)
    cur = sim_block<T, T>(b, cur, R<T>::identity(), KeepAcc{}, combine, sp);
  EXPECT_EQ(static_cast<int64_t>(cur.size()), out_elems);
  const int64_t count = in_elems / out_elems;
  if (mean && count > 1)
    for (T& v : cur) v = static_cast<T>(v / static_cast<T>(count));
  return cur;
}

template <typename T>
Tensor make_tensor(const Dims& shape, const std::vector<T>& v) {
  return Tensor::from_vector<T>(Shape(shape), v);
}

template <typename T>
std::vector<T> random_values(int64_t n, std::mt19937_64& rng, double lo, double hi) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<T> v(static_cast<size_t>(n));
  for (T& e : v) e = static_cast<T>(std::is_integral_v<T> ? std::round(u(rng)) : u(rng));
  return v;
}

template <typename T>
void expect_close(const std::vector<T>& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(static_cast<int64_t>(got.size()), want.num_elements()) << what;
  const T* w = want.data<T>();
  for (size_t i = 0; i < got.size(); ++i) {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(w[i]) || std::isnan(got[i])) {
        ASSERT_EQ(std::isnan(w[i]), std::isnan(got[i])) << what << " at " << i << ": " << got[i]
                                                        << " vs CPU " << w[i];
        continue;
      }
      if (std::isinf(w[i]) || std::isinf(got[i])) {
        ASSERT_EQ(got[i], w[i]) << what << " at " << i;
        continue;
      }
      ASSERT_NEAR(got[i], w[i], tol * (1 + std::abs(static_cast<double>(w[i]))))
          << what << " at " << i;
    } else {
      ASSERT_EQ(got[i], w[i]) << what << " at " << i;
    }
  }
}

// ---- plans -----------------------------------------------------------------

TEST(ReduceIndex, MergeAndPasses) {
  // {2,3,4,5} over {0,2}: groups R2 K3 R4 K5; the inner reduced group first
  // ([6, 4, 5]), then the leading one over the merged kept dims ([1, 2, 15]).
  ReduceGroups g = merge_reduce_dims({2, 3, 4, 5}, {true, false, true, false});
  EXPECT_EQ(g.dims, (Dims{2, 3, 4, 5}));
  std::vector<ReduceBlock> p = reduce_passes(g);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].outer, 6);
  EXPECT_EQ(p[0].len, 4);
  EXPECT_EQ(p[0].inner, 5);
  EXPECT_EQ(p[1].outer, 1);
  EXPECT_EQ(p[1].len, 2);
  EXPECT_EQ(p[1].inner, 15);
  // Size-1 dims vanish and adjacent reduced dims merge: {3,1,4,5,1,2} over
  // {1,2,3} is K3 R20 K2.
  g = merge_reduce_dims({3, 1, 4, 5, 1, 2}, {false, true, true, true, false, false});
  EXPECT_EQ(g.dims, (Dims{3, 20, 2}));
  p = reduce_passes(g);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].outer, 3);
  EXPECT_EQ(p[0].len, 20);
  EXPECT_EQ(p[0].inner, 2);
  // Only size-1 dims reduced: no pass.
  EXPECT_TRUE(reduce_passes(merge_reduce_dims({4, 1, 3}, {false, true, false})).empty());
  // SumToLike {2,3,4} -> {3,1}: the leading dim and the last.
  EXPECT_EQ(sum_to_like_reduced({2, 3, 4}, {3, 1}), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(sum_to_like_reduced({2, 1, 4}, {1, 4}), (std::vector<bool>{true, false, false}));
}

TEST(ReduceIndex, PlanSplit) {
  // Enough outputs: no split.
  ReduceSplit s = plan_split(ReduceBlock{1000, 100000, 1}, 1000, 2048);
  EXPECT_EQ(s.splits, 1);
  // A full reduction of 1000003 elements with 2048-element chunks.
  s = plan_split(ReduceBlock{1, 1000003, 1}, 1056, 2048);
  EXPECT_EQ(s.chunk, 2048);
  EXPECT_EQ(s.splits, 489);
  // A column reduction [4099, 33] over axis 0.
  s = plan_split(ReduceBlock{1, 4099, 33}, 270336, 32);
  EXPECT_EQ(s.chunk, 32);
  EXPECT_EQ(s.splits, 129);
  // Lengths up to min_chunk are never split; a chunk is at least min_chunk.
  EXPECT_EQ(plan_split(ReduceBlock{1, 4, 1}, 1 << 20, 4).splits, 1);
  s = plan_split(ReduceBlock{1, 7, 1}, 1 << 20, 4);
  EXPECT_EQ(s.splits, 2);
  EXPECT_EQ(s.chunk, 4);
}

// ---- reductions --------------------------------------------------------------

struct AxisCase {
  Dims shape;
  std::vector<Dims> axes;
};

const AxisCase kAxisCases[] = {
    {{}, {{}}},
    {{1}, {{}, {0}}},
    {{7}, {{}, {0}, {-1}}},
    {{3, 1, 2}, {{}, {0, 2}, {1}, {0}, {-1}}},
    {{5, 7, 3}, {{}, {0}, {1}, {2}, {0, 2}, {0, 1}, {1, 2}, {2, 0, 2}}},
    {{2, 3, 4, 5}, {{0, 2}, {1, 3}, {0, 3}, {0, 1, 3}, {3}}},
    {{6, 1, 5, 1, 4}, {{1, 3}, {0, 4}, {2}, {0, 2, 4}}},
    {{4099, 3}, {{0}, {1}}},
    {{2, 3000}, {{1}, {}, {0}}},
    {{3, 700, 2}, {{1}, {0, 2}}},
    {{0, 3}, {{0}, {1}, {}}},
    {{2, 0, 3}, {{1}, {0, 2}}},
};

Output reduce_op(const std::string& op, const Output& x, const Dims& axes) {
  if (op == "Sum") return ops::sum(x, axes);
  if (op == "Mean") return ops::mean(x, axes);
  if (op == "Max") return ops::max(x, axes);
  if (op == "Min") return ops::min(x, axes);
  return ops::prod(x, axes);
}

template <typename T, template <typename> class R>
void check_reduction(const std::string& op, bool mean, double lo, double hi, double tol,
                     bool with_nan) {
  std::mt19937_64 rng(1234);
  for (const AxisCase& ac : kAxisCases) {
    std::vector<T> x = random_values<T>(product(ac.shape), rng, lo, hi);
    if constexpr (std::is_floating_point_v<T>) {
      if (with_nan && x.size() > 20) x[x.size() / 3] = std::numeric_limits<T>::quiet_NaN();
    }
    for (const Dims& axes : ac.axes) {
      Graph g;
      DefaultGraphGuard guard(g);
      Tensor want = testing::run1(reduce_op(op, ops::constant(make_tensor(ac.shape, x)), axes));
      for (const SplitParams& sp : kSplitParams) {
        std::vector<T> got = sim_reduce<T, R>(ac.shape, flags_for(ac.shape, axes), x, mean, sp);
        std::string what = op + " " + dtype_name(dtype_of<T>) + " of " +
                           Shape(ac.shape).to_string() + " over " + Shape(axes).to_string() +
                           " " + split_name(sp);
        expect_close(got, want, tol, what);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

TEST(ReduceIndex, SumMatchesCpu) {
  check_reduction<double, SumReducer>("Sum", false, -2, 2, 1e-12, false);
  check_reduction<float, SumReducer>("Sum", false, -2, 2, 1e-5, false);
  check_reduction<int32_t, SumReducer>("Sum", false, -5, 5, 0, false);
  check_reduction<int64_t, SumReducer>("Sum", false, -5, 5, 0, false);
}

TEST(ReduceIndex, MeanMatchesCpu) {
  check_reduction<double, SumReducer>("Mean", true, -2, 2, 1e-12, false);
  check_reduction<float, SumReducer>("Mean", true, -2, 2, 1e-5, false);
  check_reduction<int32_t, SumReducer>("Mean", true, -9, 9, 0, false);
  check_reduction<int64_t, SumReducer>("Mean", true, -9, 9, 0, false);
}

TEST(ReduceIndex, MaxMinMatchCpu) {
  check_reduction<double, MaxReducer>("Max", false, -2, 2, 0, false);
  check_reduction<double, MaxReducer>("Max", false, -2, 2, 0, true);
  check_reduction<float, MinReducer>("Min", false, -2, 2, 0, true);
  check_reduction<int32_t, MaxReducer>("Max", false, -50, 50, 0, false);
  check_reduction<int64_t, MinReducer>("Min", false, -50, 50, 0, false);
}

TEST(ReduceIndex, ProdMatchesCpu) {
  check_reduction<double, ProdReducer>("Prod", false, 0.99, 1.01, 1e-12, false);
  check_reduction<int32_t, ProdReducer>("Prod", false, -1, 1, 0, false);
  check_reduction<int64_t, ProdReducer>("Prod", false, -1, 1, 0, false);
}

TEST(ReduceIndex, SumToLikeMatchesCpu) {
  const std::pair<Dims, Dims> cases[] = {
      {{3, 4}, {4}},       {{3, 4}, {3, 1}},          {{2, 3, 4}, {3, 1}},
      {{2, 1, 4}, {1, 4}}, {{5, 1, 6}, {1, 1, 1}},    {{5, 6}, {}},
      {{4099, 33}, {33}},  {{2, 3, 4, 5}, {3, 1, 5}}, {{2, 3, 4, 5}, {2, 1, 4, 1}},
      {{0, 3}, {3}},
  };
  std::mt19937_64 rng(7);
  for (const auto& [xs, ls] : cases) {
    std::vector<double> x = random_values<double>(product(xs), rng, -2, 2);
    Graph g;
    DefaultGraphGuard guard(g);
    Output like = ops::constant(Tensor::zeros(DType::F64, Shape(ls)));
    Tensor want = testing::run1(ops::sum_to_like(ops::constant(make_tensor(xs, x)), like));
    for (const SplitParams& sp : kSplitParams) {
      std::vector<double> got =
          sim_reduce<double, SumReducer>(xs, sum_to_like_reduced(xs, ls), x, false, sp);
      expect_close(got, want, 1e-12,
                   "SumToLike " + Shape(xs).to_string() + " -> " + Shape(ls).to_string() + " " +
                       split_name(sp));
    }
  }
}

// ---- argmax ------------------------------------------------------------------

template <typename T>
void check_argmax(const std::vector<T>& x, const Dims& shape) {
  const int rank = static_cast<int>(shape.size());
  for (int axis = 0; axis < rank; ++axis) {
    if (shape[static_cast<size_t>(axis)] == 0) continue;
    ReduceBlock b;
    for (int i = 0; i < rank; ++i) {
      if (i < axis) b.outer *= shape[static_cast<size_t>(i)];
      if (i == axis) b.len = shape[static_cast<size_t>(i)];
      if (i > axis) b.inner *= shape[static_cast<size_t>(i)];
    }
    Graph g;
    DefaultGraphGuard guard(g);
    Tensor want = testing::run1(ops::argmax(ops::constant(make_tensor(shape, x)), axis));
    for (const SplitParams& sp : kSplitParams) {
      auto lift = [](T v, int64_t r) { return ArgBest<T>{v, r}; };
      auto combine = [](ArgBest<T> a, ArgBest<T> c) { return argmax_combine(a, c); };
      std::vector<ArgBest<T>> acc =
          sim_block<ArgBest<T>, T>(b, x, argmax_identity<T>(), lift, combine, sp);
      std::vector<int64_t> got;
      for (const auto& a : acc) got.push_back(a.i);
      expect_close(got, want, 0,
                   std::string("ArgMax ") + dtype_name(dtype_of<T>) + " of " +
                       Shape(shape).to_string() + " axis " + std::to_string(axis) + " " +
                       split_name(sp));
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(ReduceIndex, ArgMaxMatchesCpu) {
  const Dims shapes[] = {{7}, {1}, {5, 7, 3}, {3, 1, 2}, {4099, 3}, {2, 3000}, {3, 700, 2}, {0, 4}};
  std::mt19937_64 rng(99);
  for (const Dims& s : shapes) {
    const int64_t n = product(s);
    // Integers from a small range: many ties, the first index wins.
    check_argmax(random_values<int32_t>(n, rng, -3, 3), s);
    check_argmax(random_values<int64_t>(n, rng, -3, 3), s);
    // Floats on a coarse grid (ties), with signed zeros, NaNs and -inf.
    std::vector<double> x = random_values<double>(n, rng, -4, 4);
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = std::round(x[i] * 2) / 2;
      if (x[i] == 0 && (i & 1)) x[i] = -0.0;
      if (i % 37 == 5) x[i] = std::numeric_limits<double>::quiet_NaN();
      if (i % 11 == 3) x[i] = -std::numeric_limits<double>::infinity();
    }
    check_argmax(x, s);
    check_argmax(random_values<float>(n, rng, -1, 1), s);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// ---- softmax -------------------------------------------------------------------

using State = SoftmaxState<double>;

// __shfl_xor_sync butterfly over 32 lanes: lane l merges with lane l ^ d.
void butterfly(std::vector<State>& lanes) {
  for (int d = 16; d > 0; d >>= 1) {
    std::vector<State> next(32);
    for (int l = 0; l < 32; ++l) next[static_cast<size_t>(l)] = softmax_merge(lanes[static_cast<size_t>(l)], lanes[static_cast<size_t>(l ^ d)]);
    lanes = next;
  }
}

// The state of a row of `len` elements (stride `stride`) as the kernels
// compute it: `threads` = 1 (column kernel), 32 (warp) or 256 (block).
State row_state(const double* xs, int64_t len, int64_t stride, int threads) {
  std::vector<State> t(static_cast<size_t>(threads), softmax_identity<double>());
  for (int64_t j = 0; j < len; ++j) softmax_add(t[static_cast<size_t>(j % threads)], xs[j * stride]);
  if (threads == 1) return t[0];
  std::vector<State> warp0;
  for (int w = 0; w < threads / 32; ++w) {
    std::vector<State> lanes(t.begin() + w * 32, t.begin() + (w + 1) * 32);
    butterfly(lanes);
    for (const State& s : lanes) {  // every lane agrees
      EXPECT_TRUE(s.m == lanes[0].m || (std::isnan(s.m) && std::isnan(lanes[0].m)));
      EXPECT_TRUE(s.s == lanes[0].s || (std::isnan(s.s) && std::isnan(lanes[0].s)));
    }
    warp0.push_back(lanes[0]);
  }
  if (threads == 32) return warp0[0];
  warp0.resize(32, softmax_identity<double>());
  butterfly(warp0);
  return warp0[0];
}

int threads_for(int64_t len, int64_t inner) { return inner > 1 ? 1 : (len <= 1024 ? 32 : 256); }

std::vector<double> sim_softmax(const std::vector<double>& x, const Dims& shape, int axis, bool log_sm) {
  int64_t outer = 1, len = 1, inner = 1;
  for (int i = 0; i < static_cast<int>(shape.size()); ++i) {
    if (i < axis) outer *= shape[static_cast<size_t>(i)];
    else if (i == axis) len = shape[static_cast<size_t>(i)];
    else inner *= shape[static_cast<size_t>(i)];
  }
  std::vector<double> y(x.size());
  for (int64_t q = 0; q < outer; ++q) {
    for (int64_t i = 0; i < inner; ++i) {
      const int64_t base = q * len * inner + i;
      State st = softmax_finish(row_state(x.data() + base, len, inner, threads_for(len, inner)));
      const double inv = 1.0 / st.s, ls = std::log(st.s);
      for (int64_t j = 0; j < len; ++j) {
        const double v = x[static_cast<size_t>(base + j * inner)];
        y[static_cast<size_t>(base + j * inner)] =
            log_sm ? log_softmax_value(v, st.m, ls) : softmax_value(v, st.m, inv);
      }
    }
  }
  return y;
}

// Rows of random logits with a few special rows: a -inf entry, all -inf, a
// NaN (first or later), a +inf entry.
std::vector<double> softmax_input(const Dims& shape, int axis, std::mt19937_64& rng) {
  std::vector<double> x = random_values<double>(product(shape), rng, -20, 20);
  if (axis != static_cast<int>(shape.size()) - 1 || shape.back() < 3 || static_cast<int64_t>(x.size()) < 7 * shape.back())
    return x;
  const int64_t len = shape.back();
  const double inf = std::numeric_limits<double>::infinity();
  x[static_cast<size_t>(0 * len + 0)] = -inf;  // row 0: -inf first, then finite
  for (int64_t j = 0; j < len; ++j) x[static_cast<size_t>(1 * len + j)] = -inf;  // row 1
  x[static_cast<size_t>(2 * len + 0)] = std::nan("");                           // row 2
  x[static_cast<size_t>(3 * len + len / 2)] = std::nan("");                     // row 3
  x[static_cast<size_t>(4 * len + 1)] = inf;                                    // row 4
  x[static_cast<size_t>(5 * len + 2)] = -inf;                                   // row 5
  x[static_cast<size_t>(5 * len + 1)] = inf;
  x[static_cast<size_t>(6 * len + 1)] = 700;  // row 6: large logits
  x[static_cast<size_t>(6 * len + 2)] = 710;
  return x;
}

TEST(ReduceIndex, SoftmaxMatchesCpu) {
  struct C {
    Dims shape;
    int axis;
  };
  const C cases[] = {{{3, 1}, 1},    {{8, 10}, 1},   {{8, 1000}, 1}, {{7, 5000}, 1},
                     {{4, 3, 2}, 0}, {{2, 4, 3}, 1}, {{5, 33}, 0},   {{2, 1025}, 1}};
  std::mt19937_64 rng(5);
  for (const C& c : cases) {
    std::vector<double> x = softmax_input(c.shape, c.axis, rng);
    for (bool log_sm : {false, true}) {
      Graph g;
      DefaultGraphGuard guard(g);
      Output in = ops::constant(make_tensor(c.shape, x));
      Tensor want = testing::run1(log_sm ? ops::log_softmax(in, c.axis) : ops::softmax(in, c.axis));
      expect_close(sim_softmax(x, c.shape, c.axis, log_sm), want, 1e-12,
                   std::string(log_sm ? "LogSoftmax " : "Softmax ") + Shape(c.shape).to_string() +
                       " axis " + std::to_string(c.axis));
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(ReduceIndex, SparseXentMatchesCpu) {
  std::mt19937_64 rng(11);
  for (int64_t classes : {1, 10, 1000, 5000}) {
    const int64_t n = 9;
    std::vector<double> x = softmax_input({n, classes}, 1, rng);
    std::vector<int64_t> labels = random_values<int64_t>(n, rng, 0, static_cast<double>(classes - 1));
    Graph g;
    DefaultGraphGuard guard(g);
    Tensor want = testing::run1(ops::sparse_softmax_cross_entropy_with_logits(
        ops::constant(make_tensor({n, classes}, x)), ops::constant(make_tensor({n}, labels))));
    std::vector<double> got;
    for (int64_t r = 0; r < n; ++r) {
      const double* row = x.data() + r * classes;
      State st = softmax_finish(row_state(row, classes, 1, classes <= 1024 ? 32 : 256));
      got.push_back(sparse_xent_loss(st, row, labels[static_cast<size_t>(r)], classes));
    }
    expect_close(got, want, 1e-12, "SparseXent classes " + std::to_string(classes));
    // Out-of-range labels give NaN (the CPU kernel raises an error instead).
    State st = softmax_finish(row_state(x.data() + 8 * classes, classes, 1, 32));
    EXPECT_TRUE(std::isnan(sparse_xent_loss(st, x.data() + 8 * classes, -1, classes)));
    EXPECT_TRUE(std::isnan(sparse_xent_loss(st, x.data() + 8 * classes, classes, classes)));
  }
}

TEST(ReduceIndex, SoftmaxStateMerge) {
  const double inf = std::numeric_limits<double>::infinity();
  // Merging with the identity changes nothing, also for an all -inf set.
  State a{-inf, 3};
  State m = softmax_merge(softmax_identity<double>(), a);
  EXPECT_EQ(m.m, -inf);
  EXPECT_EQ(m.s, 3);
  // Rescaling: {0} and {1} -> m = 1, s = exp(-1) + 1.
  State x = softmax_identity<double>(), y = softmax_identity<double>();
  softmax_add(x, 0.0);
  softmax_add(y, 1.0);
  m = softmax_merge(x, y);
  EXPECT_EQ(m.m, 1.0);
  EXPECT_NEAR(m.s, std::exp(-1.0) + 1, 1e-15);
  // A +inf maximum makes the row NaN.
  softmax_add(x, inf);
  EXPECT_TRUE(std::isnan(softmax_finish(x).s));
}

}  // namespace
}  // namespace spire::kernels
