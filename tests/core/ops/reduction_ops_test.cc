// Forward tests of the reductions (Sum, Mean, Max, Min, Prod, ArgMax, L2Loss)
// against hand-computed values: every axis combination on small tensors,
// keepdims, negative axes, empty dims, size-1 dims, integer dtypes, NaN,
// unknown dims fed at run time, and bad-axis errors.
#include <cmath>
#include <limits>

#include "core/ops/op_util.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

using ReduceFn = Output (*)(const Output&, const std::vector<int64_t>&, bool, const std::string&);
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

Tensor vec(const Shape& s, const std::vector<double>& v, DType dt = DType::F32) {
  Tensor t(dt, s);
  for (size_t i = 0; i < v.size(); ++i)
    visit_dtype(dt, "vec", [&](auto z) { t.data<decltype(z)>()[i] = static_cast<decltype(z)>(v[i]); });
  return t;
}

std::vector<double> iota(int n, double start = 1) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = start + i;
  return v;
}

void check(ReduceFn f, const Tensor& x, const std::vector<int64_t>& axes, bool keep, const Shape& out,
           const std::vector<double>& want, double tol = 1e-5) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output y = f(ops::constant(x), axes, keep, "");
  EXPECT_EQ(y.shape(), out);
  EXPECT_EQ(y.dtype(), x.dtype());
  expect_tensor(run1(y), out, want, tol);
}

const Tensor m23() { return vec({2, 3}, {1, 5, 3, 4, 2, 6}); }

SPIRE_FORWARD_TEST(Sum, Axes) {
  check(ops::sum, m23(), {}, false, {}, {21});
  check(ops::sum, m23(), {0}, false, {3}, {5, 7, 9});
  check(ops::sum, m23(), {1}, false, {2}, {9, 12});
  check(ops::sum, m23(), {-1}, true, {2, 1}, {9, 12});
  check(ops::sum, m23(), {0, -1}, true, {1, 1}, {21});
  check(ops::sum, m23(), {1, 1}, false, {2}, {9, 12});  // duplicates are ignored
  // x[i, j, k] = 1 + 6i + 2j + k
  Tensor x = vec({2, 3, 2}, iota(12));
  check(ops::sum, x, {0, 2}, false, {3}, {18, 26, 34});
  check(ops::sum, x, {1}, false, {2, 2}, {9, 12, 27, 30});
  check(ops::sum, x, {0}, true, {1, 3, 2}, {8, 10, 12, 14, 16, 18});
  check(ops::sum, x, {0, 1}, false, {2}, {36, 42});
}
SPIRE_FORWARD_TEST(Sum, SizeOneAndScalar) {
  check(ops::sum, vec({3, 1, 2}, iota(6)), {1}, false, {3, 2}, iota(6));
  check(ops::sum, vec({3, 1, 2}, iota(6)), {0, 1}, false, {2}, {9, 12});
  check(ops::sum, vec({}, {4}), {}, false, {}, {4});
  check(ops::sum, vec({1, 1}, {4}), {}, true, {1, 1}, {4});
}
SPIRE_FORWARD_TEST(Sum, EmptyDims) {
  check(ops::sum, vec({0, 3}, {}), {0}, false, {3}, {0, 0, 0});
  check(ops::sum, vec({0, 3}, {}), {1}, false, {0}, {});
  check(ops::sum, vec({0, 3}, {}), {}, false, {}, {0});
}
SPIRE_FORWARD_TEST(Sum, IntegerAndLongRows) {
  check(ops::sum, vec({2, 3}, {1, 2, 3, 4, 5, 6}, DType::I32), {1}, false, {2}, {6, 15});
  check(ops::sum, vec({2, 3}, {1, 2, 3, 4, 5, 6}, DType::I64), {0}, false, {3}, {5, 7, 9});
  check(ops::sum, vec({100}, iota(100)), {}, false, {}, {5050});
  check(ops::sum, vec({2, 50}, iota(100), DType::F64), {1}, false, {2}, {1275, 3775}, 1e-12);
}
SPIRE_FORWARD_TEST(Sum, UnknownDimsFedAtRunTime) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {-1, 3}, "x");
  Output rows = ops::sum(x, {1});
  Output cols = ops::sum(x, {0}, true);
  EXPECT_EQ(rows.shape(), Shape({-1}));
  EXPECT_EQ(cols.shape(), Shape({1, 3}));
  auto r = run({rows, cols}, {{x, m23()}});
  expect_tensor(r[0], {2}, {9, 12});
  expect_tensor(r[1], {1, 3}, {5, 7, 9});
  auto e = run({rows, cols}, {{x, vec({0, 3}, {})}});
  expect_tensor(e[0], {0}, {});
  expect_tensor(e[1], {1, 3}, {0, 0, 0});
}
SPIRE_FORWARD_TEST(Sum, BadAxisThrows) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {2, 3}, "x");
  expect_error([&] { ops::sum(x, {2}, false, "bad_sum"); }, {"Sum", "bad_sum", "axis 2", "[2, 3]"});
  expect_error([&] { ops::sum(x, {-3}); }, {"Sum", "axis -3", "rank 2"});
  Output b = ops::placeholder(DType::Bool, {2}, "b");
  expect_error([&] { ops::sum(b); }, {"Sum", "bool"});
}

SPIRE_FORWARD_TEST(Mean, Axes) {
  check(ops::mean, m23(), {}, false, {}, {3.5});
  check(ops::mean, m23(), {0}, false, {3}, {2.5, 3.5, 4.5});
  check(ops::mean, m23(), {-1}, true, {2, 1}, {3, 4});
  check(ops::mean, vec({2, 3, 2}, iota(12)), {0, 2}, false, {3}, {4.5, 6.5, 8.5});
  check(ops::mean, vec({3, 1}, {1, 2, 4}), {1}, false, {3}, {1, 2, 4});
}
SPIRE_FORWARD_TEST(Mean, IntegerTruncatesAndEmptyIsNaN) {
  check(ops::mean, vec({3}, {1, 2, 4}, DType::I32), {}, false, {}, {2});
  check(ops::mean, vec({2, 2}, {1, 2, 4, 7}, DType::I64), {1}, false, {2}, {1, 5});
  check(ops::mean, vec({0, 2}, {}), {0}, false, {2}, {kNaN, kNaN});
  check(ops::mean, vec({0, 2}, {}), {1}, false, {0}, {});
}
SPIRE_FORWARD_TEST(Mean, UnknownDims) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F64, {-1, -1}, "x");
  Output y = ops::mean(x, {0});
  EXPECT_EQ(y.shape(), Shape({-1}));
  expect_tensor(run1(y, {{x, vec({2, 3}, {1, 5, 3, 4, 2, 6}, DType::F64)}}), {3}, {2.5, 3.5, 4.5});
}

SPIRE_FORWARD_TEST(Max, Axes) {
  check(ops::max, m23(), {}, false, {}, {6});
  check(ops::max, m23(), {0}, false, {3}, {4, 5, 6});
  check(ops::max, m23(), {1}, true, {2, 1}, {5, 6});
  check(ops::max, vec({2, 3, 2}, iota(12)), {0, 2}, false, {3}, {8, 10, 12});
  check(ops::max, vec({20}, iota(20, -30)), {}, false, {}, {-11});
  check(ops::max, vec({2, 2}, {-3, 7, 9, -1}, DType::I32), {1}, false, {2}, {7, 9});
}
SPIRE_FORWARD_TEST(Max, NaNAndEmpty) {
  check(ops::max, vec({2, 3}, {1, kNaN, 3, 4, 5, 6}), {1}, false, {2}, {kNaN, 6});
  check(ops::max, vec({0, 2}, {}), {0}, false, {2}, {-kInf, -kInf});
  Graph g;
  DefaultGraphGuard guard(g);
  expect_error([&] { ops::max(ops::placeholder(DType::F32, {2}, "x"), {1}, false, "mx"); },
               {"Max", "mx", "axis 1", "[2]"});
}
SPIRE_FORWARD_TEST(Min, Axes) {
  check(ops::min, m23(), {}, false, {}, {1});
  check(ops::min, m23(), {0}, false, {3}, {1, 2, 3});
  check(ops::min, m23(), {-1}, true, {2, 1}, {1, 2});
  check(ops::min, vec({2, 2}, {-3, 7, 9, -1}, DType::I64), {0}, false, {2}, {-3, -1});
  check(ops::min, vec({0, 2}, {}), {0}, false, {2}, {kInf, kInf});
  check(ops::min, vec({3}, {2, kNaN, 1}), {}, false, {}, {kNaN});
}
SPIRE_FORWARD_TEST(Prod, Axes) {
  check(ops::prod, m23(), {}, false, {}, {720});
  check(ops::prod, m23(), {1}, false, {2}, {15, 48});
  check(ops::prod, m23(), {0}, true, {1, 3}, {4, 10, 18});
  check(ops::prod, vec({2, 2}, {2, 3, -1, 4}, DType::I32), {1}, false, {2}, {6, -4});
  check(ops::prod, vec({0, 2}, {}), {0}, false, {2}, {1, 1});
}

SPIRE_FORWARD_TEST(ArgMax, Values) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::constant(m23());
  Tensor a1 = run1(ops::argmax(x, 1));
  EXPECT_EQ(a1.dtype(), DType::I64);
  expect_tensor(a1, {2}, {1, 2});
  expect_tensor(run1(ops::argmax(x, 0)), {3}, {1, 0, 1});
  Tensor a32 = run1(ops::argmax(x, -1, DType::I32));
  EXPECT_EQ(a32.dtype(), DType::I32);
  expect_tensor(a32, {2}, {1, 2});
  // Ties: the first index; NaN counts as the largest.
  expect_tensor(run1(ops::argmax(ops::constant(vec({2, 3}, {2, 2, 1, 1, kNaN, 3})), 1)), {2}, {0, 1});
  expect_tensor(run1(ops::argmax(ops::constant(vec({2, 3, 2}, iota(12), DType::I32)), 1)), {2, 2},
                {2, 2, 2, 2});
  expect_tensor(run1(ops::argmax(ops::constant(vec({0, 3}, {})), 1)), {0}, {});
}
SPIRE_FORWARD_TEST(ArgMax, Errors) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {2, 3}, "x");
  expect_error([&] { ops::argmax(x, 2, DType::I64, "am"); }, {"ArgMax", "am", "axis 2", "[2, 3]"});
  expect_error([&] { ops::argmax(x, 0, DType::F32); }, {"ArgMax", "i32 or i64"});
  expect_error([&] { ops::argmax(ops::placeholder(DType::F32, {2, 0}), 1); }, {"ArgMax", "empty"});
  Output u = ops::placeholder(DType::F32, {2, -1}, "u");
  Output a = ops::argmax(u, 1, DType::I64, "am_rt");
  expect_error([&] { run1(a, {{u, vec({2, 0}, {})}}); }, {"am_rt", "empty"});
}

// L2Loss: sum(t^2) / 2. Integer-valued inputs keep every partial sum exact in f32, so the
// lanes, the tails (n around the 32 lanes) and the shares of two threads are checked exactly.
SPIRE_FORWARD_TEST(L2Loss, Values) {
  for (DType dt : {DType::F32, DType::F64}) {
    Graph g;
    DefaultGraphGuard guard(g);
    Output y = ops::l2_loss(ops::constant(vec({2, 3}, {1, -5, 3, 4, 2, -6}, dt)), "l2");
    EXPECT_EQ(y.shape(), Shape({}));
    EXPECT_EQ(y.dtype(), dt);
    expect_tensor(run1(y), {}, {45.5}, 0);
    expect_tensor(run1(ops::l2_loss(ops::constant(vec({0, 3}, {}, dt)))), {}, {0}, 0);
    expect_tensor(run1(ops::l2_loss(ops::constant(vec({}, {-3}, dt)))), {}, {4.5}, 0);
  }
}
SPIRE_FORWARD_TEST(L2Loss, LanesTailsAndTwoThreads) {
  for (int64_t n : {1, 31, 32, 33, 63, 100, 200001}) {
    for (int threads : {1, 2}) {
      Graph g;
      DefaultGraphGuard guard(g);
      std::vector<double> v(static_cast<size_t>(n));
      double want = 0;
      for (int64_t i = 0; i < n; ++i) {
        v[static_cast<size_t>(i)] = static_cast<double>((i * 7) % 11 - 5);
        want += v[static_cast<size_t>(i)] * v[static_cast<size_t>(i)];
      }
      Output x = ops::placeholder(DType::F32, {n}, "x");
      SessionOptions o;
      o.num_threads = threads;
      Session s(g, o);
      Tensor r = s.run({ops::l2_loss(x)}, {{x, vec({n}, v)}})[0];
      EXPECT_EQ(r.data<float>()[0], static_cast<float>(want / 2)) << n << " elements, " << threads << " threads";
    }
  }
}
SPIRE_FORWARD_TEST(L2Loss, Errors) {
  Graph g;
  DefaultGraphGuard guard(g);
  expect_error([&] { ops::l2_loss(ops::placeholder(DType::I32, {2}), "l2i"); },
               {"L2Loss", "l2i", "f32 or f64", "i32"});
}

}  // namespace
}  // namespace spire::testing
