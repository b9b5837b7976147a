// Forward tests of the shape and indexing ops (core/ops/array_ops.cc) and
// their gradient helper ops, against hand-computed values: views without
// copies, every dtype, empty and size-1 dims, negative axes, unknown dims
// fed at run time, and the errors (bad axis/perm, size mismatches, gather
// index out of range) naming the op, node and shapes.
#include <cmath>

#include "core/ops/op_util.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

Tensor vec(const Shape& s, const std::vector<double>& v, DType dt = DType::F32) {
  Tensor t(dt, s);
  for (size_t i = 0; i < v.size(); ++i)
    visit_dtype(dt, "vec", [&](auto z) { t.data<decltype(z)>()[i] = static_cast<decltype(z)>(v[i]); });
  return t;
}
std::vector<double> iota(int n, double start = 0) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = start + i;
  return v;
}
Output c(const Shape& s, const std::vector<double>& v, DType dt = DType::F32) {
  return ops::constant(vec(s, v, dt));
}
Output ci(const Shape& s, const std::vector<double>& v) { return c(s, v, DType::I32); }

// ---- Reshape & views ----------------------------------------------------------

SPIRE_FORWARD_TEST(Reshape, ValuesAndInferredDim) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = c({2, 3}, iota(6));
  Output r = ops::reshape(x, {3, -1});
  EXPECT_EQ(r.shape(), Shape({3, 2}));
  expect_tensor(run1(r), {3, 2}, iota(6));
  expect_tensor(run1(ops::reshape(x, {6})), {6}, iota(6));
  expect_tensor(run1(ops::reshape(c({1}, {7}), {})), {}, {7});
  expect_tensor(run1(ops::reshape(c({0, 3}, {}), {3, 0})), {3, 0}, {});
  expect_tensor(run1(ops::reshape(c({2, 2}, {1, 0, 0, 1}, DType::Bool), {4})), {4}, {1, 0, 0, 1});
}
SPIRE_FORWARD_TEST(Reshape, IsAView) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {2, 3}, "x");
  Output r = ops::reshape(x, {-1});
  Tensor in = vec({2, 3}, iota(6));
  // The run's one allocation is its own copy of the fed value; the reshape is a view of it.
  uint64_t before = cpu_allocator()->memory_stats().num_allocs;
  Tensor out = run1(r, {{x, in}});
  EXPECT_EQ(cpu_allocator()->memory_stats().num_allocs, before + 1);
  expect_tensor(out, {6}, iota(6));
  EXPECT_FALSE(out.shares_buffer_with(in)) << "a fetched value must not alias the caller's feed";
}
SPIRE_FORWARD_TEST(Reshape, UnknownDimsResolvedAtRunTime) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {-1, 4}, "x");
  Output r = ops::reshape(x, {-1, 2}, "r");
  EXPECT_EQ(r.shape(), Shape({-1, 2}));
  expect_tensor(run1(r, {{x, vec({2, 4}, iota(8))}}), {4, 2}, iota(8));
  expect_tensor(run1(r, {{x, vec({0, 4}, {})}}), {0, 2}, {});
  Output r3 = ops::reshape(x, {3, -1}, "r3");
  expect_error([&] { run1(r3, {{x, vec({2, 4}, iota(8))}}); }, {"Reshape", "r3", "8 elements", "[3, ?]"});
}
SPIRE_FORWARD_TEST(Reshape, SizeMismatchThrows) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {2, 3}, "x");
  expect_error([&] { ops::reshape(x, {4, 2}, "bad_reshape"); },
               {"Reshape", "bad_reshape", "6 elements", "[4, 2]", "[2, 3]"});
  expect_error([&] { ops::reshape(x, {-1, -1}); }, {"Reshape", "at most one"});
  expect_error([&] { ops::reshape(x, {4, -1}); }, {"Reshape", "6 elements", "[4, ?]"});
}
SPIRE_FORWARD_TEST(ReshapeLike, Values) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = c({2, 3}, iota(6));
  Output like = ops::placeholder(DType::I64, {-1, 2}, "like");
  Output r = ops::reshape_like(x, like, "rl");
  EXPECT_EQ(r.shape(), Shape({-1, 2}));
  expect_tensor(run1(r, {{like, vec({3, 2}, iota(6), DType::I64)}}), {3, 2}, iota(6));
  expect_error([&] { run1(r, {{like, vec({2, 2}, iota(4), DType::I64)}}); }, {"ReshapeLike", "rl", "[2, 2]"});
  expect_error([&] { ops::reshape_like(x, c({4}, iota(4))); }, {"ReshapeLike", "[2, 3]", "[4]"});
}
SPIRE_FORWARD_TEST(ExpandDims, Axes) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = c({2, 3}, iota(6));
  expect_tensor(run1(ops::expand_dims(x, 0)), {1, 2, 3}, iota(6));
  expect_tensor(run1(ops::expand_dims(x, 1)), {2, 1, 3}, iota(6));
  expect_tensor(run1(ops::expand_dims(x, -1)), {2, 3, 1}, iota(6));
  expect_tensor(run1(ops::expand_dims(x, 2)), {2, 3, 1}, iota(6));
  expect_tensor(run1(ops::expand_dims(c({}, {5}), 0)), {1}, {5});
  Output u = ops::placeholder(DType::F32, {-1}, "u");
  Output e = ops::expand_dims(u, -2);
  EXPECT_EQ(e.shape(), Shape({1, -1}));
  Tensor in = vec({4}, iota(4));
  uint64_t before = cpu_allocator()->memory_stats().num_allocs;
  Tensor out = run1(e, {{u, in}});
  EXPECT_EQ(cpu_allocator()->memory_stats().num_allocs, before + 1) << "expand_dims is a view";
  expect_tensor(out, {1, 4}, iota(4));
  expect_error([&] { ops::expand_dims(x, 3, "ed"); }, {"ExpandDims", "ed", "axis 3", "[2, 3]"});
  expect_error([&] { ops::expand_dims(x, -4); }, {"ExpandDims", "axis -4"});
}
SPIRE_FORWARD_TEST(Squeeze, Axes) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = c({1, 3, 1}, iota(3));
  expect_tensor(run1(ops::squeeze(x)), {3}, iota(3));
  expect_tensor(run1(ops::squeeze(x, {0})), {3, 1}, iota(3));
  expect_tensor(run1(ops::squeeze(x, {-1})), {1, 3}, iota(3));
  expect_tensor(run1(ops::squeeze(c({1, 1}, {4}))), {}, {4});
  expect_error([&] { ops::squeeze(x, {1}, "sq"); }, {"Squeeze", "sq", "axis 1", "size 3", "[1, 3, 1]"});
  expect_error([&] { ops::squeeze(x, {3}); }, {"Squeeze", "axis 3"});
  // Unknown dims: squeezing them explicitly is checked at run time; without
  // axes only dims known to be 1 are removed.
  Output u = ops::placeholder(DType::F32, {-1, 1, -1}, "u");
  Output s_all = ops::squeeze(u);
  EXPECT_EQ(s_all.shape(), Shape({-1, -1}));
  Output s0 = ops::squeeze(u, {0}, "s0");
  EXPECT_EQ(s0.shape(), Shape({1, -1}));
  Tensor in = vec({1, 1, 2}, {7, 8});
  uint64_t before = cpu_allocator()->memory_stats().num_allocs;
  Tensor one = run1(s0, {{u, in}});
  EXPECT_EQ(cpu_allocator()->memory_stats().num_allocs, before + 1) << "squeeze is a view";
  expect_tensor(one, {1, 2}, {7, 8});
  auto r = run({s_all, s0}, {{u, in}});
  expect_tensor(r[0], {1, 2}, {7, 8});
  expect_tensor(r[1], {1, 2}, {7, 8});
  expect_error([&] { run1(s0, {{u, vec({2, 1, 1}, {1, 2})}}); }, {"Squeeze", "s0", "size 2"});
}

// ---- Transpose ------------------------------------------------------------------

SPIRE_FORWARD_TEST(Transpose, Perms) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = c({2, 3}, iota(6));
  expect_tensor(run1(ops::transpose(x)), {3, 2}, {0, 3, 1, 4, 2, 5});
  // y[a,b,c] = x[b,c,a] for x of shape [2,3,4]: x[i,j,k] = 12i + 4j + k.
  Output x3 = c({2, 3, 4}, iota(24));
  std::vector<double> want;
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) want.push_back(12 * i + 4 * j + k);
  expect_tensor(run1(ops::transpose(x3, {2, 0, 1})), {4, 2, 3}, want);
  want.clear();
  for (int j = 0; j < 3; ++j)
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < 4; ++k) want.push_back(12 * i + 4 * j + k);
  expect_tensor(run1(ops::transpose(x3, {1, 0, 2})), {3, 2, 4}, want);  // inner rows stay contiguous
  expect_tensor(run1(ops::transpose(x3, {0, 1, 2})), {2, 3, 4}, iota(24));
  expect_tensor(run1(ops::transpose(c({0, 3}, {}))), {3, 0}, {});
  expect_tensor(run1(ops::transpose(c({}, {3}))), {}, {3});
  // Size-1 dims: [3,1,2] -> perm [2,1,0] is a real transpose; [1,3] -> [3,1] a view.
  expect_tensor(run1(ops::transpose(c({3, 1, 2}, iota(6)), {2, 1, 0})), {2, 1, 3}, {0, 2, 4, 1, 3, 5});
  expect_tensor(run1(ops::transpose(c({1, 3}, iota(3)))), {3, 1}, iota(3));
  expect_tensor(run1(ops::transpose(c({2, 2}, {1, 0, 1, 1}, DType::Bool))), {2, 2}, {1, 1, 0, 1});
  expect_tensor(run1(ops::transpose(c({2, 3}, iota(6), DType::I64))), {3, 2}, {0, 3, 1, 4, 2, 5});
}
SPIRE_FORWARD_TEST(Transpose, LargeTiled) {
  Graph g;
  DefaultGraphGuard guard(g);
  const int R = 37, C = 70;
  Output x = c({R, C}, iota(R * C), DType::F64);
  Tensor y = run1(ops::transpose(x));
  ASSERT_EQ(y.shape(), Shape({C, R}));
  bool ok = true;
  for (int i = 0; i < C; ++i)
    for (int j = 0; j < R; ++j) ok = ok && y.data<double>()[i * R + j] == j * C + i;
  EXPECT_TRUE(ok);
}
SPIRE_FORWARD_TEST(Transpose, UnknownDimsAndBadPerm) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output u = ops::placeholder(DType::F32, {-1, 2}, "u");
  Output t = ops::transpose(u, {1, 0});
  EXPECT_EQ(t.shape(), Shape({2, -1}));
  expect_tensor(run1(t, {{u, vec({3, 2}, iota(6))}}), {2, 3}, {0, 2, 4, 1, 3, 5});
  expect_error([&] { ops::transpose(u, {0, 0}, "tp"); }, {"Transpose", "tp", "perm [0, 0]", "[?, 2]"});
  expect_error([&] { ops::transpose(u, {0, 1, 2}); }, {"Transpose", "perm [0, 1, 2]"});
  expect_error([&] { ops::transpose(u, {0, 2}); }, {"Transpose", "not a permutation"});
}

// ---- Concat / Split -------------------------------------------------------------

SPIRE_FORWARD_TEST(Concat, Axes) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output a = c({2, 2}, {1, 2, 3, 4}), b = c({2, 1}, {5, 6}), e = c({2, 0}, {});
  expect_tensor(run1(ops::concat({a, b, e}, 1)), {2, 3}, {1, 2, 5, 3, 4, 6});
  expect_tensor(run1(ops::concat({a, b}, -1)), {2, 3}, {1, 2, 5, 3, 4, 6});
  expect_tensor(run1(ops::concat({a, c({1, 2}, {7, 8})}, 0)), {3, 2}, {1, 2, 3, 4, 7, 8});
  expect_tensor(run1(ops::concat({a}, 0)), {2, 2}, {1, 2, 3, 4});
  expect_tensor(run1(ops::concat({ci({2}, {1, 2}), ci({1}, {3})}, 0)), {3}, {1, 2, 3});
  expect_tensor(run1(ops::concat({c({1}, {1}, DType::Bool), c({1}, {0}, DType::Bool)}, 0)), {2}, {1, 0});
}
SPIRE_FORWARD_TEST(Concat, UnknownDimsAndErrors) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output u = ops::placeholder(DType::F32, {-1, 2}, "u");
  Output a = c({1, 2}, {9, 9});
  Output y = ops::concat({u, a}, 0, "cc");
  EXPECT_EQ(y.shape(), Shape({-1, 2}));
  expect_tensor(run1(y, {{u, vec({2, 2}, iota(4))}}), {3, 2}, {0, 1, 2, 3, 9, 9});
  expect_error([&] { ops::concat({a, c({1, 3}, {1, 2, 3})}, 0, "bad_concat"); },
               {"Concat", "bad_concat", "[1, 3]", "[1, 2]", "dimension 1"});
  expect_error([&] { ops::concat({a, c({2}, {1, 2})}, 0); }, {"Concat", "rank"});
  expect_error([&] { ops::concat({a, ci({1, 2}, {1, 2})}, 0); }, {"Concat", "f32", "i32"});
  expect_error([&] { ops::concat({a, a}, 2); }, {"Concat", "axis 2"});
  Output v = ops::placeholder(DType::F32, {1, -1}, "v");
  Output y2 = ops::concat({a, v}, 0, "cc2");
  expect_error([&] { run1(y2, {{v, vec({1, 3}, iota(3))}}); }, {"Concat", "cc2", "[1, 3]", "[1, 2]"});
}
// Many rows over two threads (the kernels copy chunks of rows in parallel): a split along
// the last axis and the concat back give x again, every element in place.
SPIRE_FORWARD_TEST(Split, ManyRowsOverTwoThreadsRoundTripThroughConcat) {
  Graph g;
  DefaultGraphGuard guard(g);
  const int64_t rows = 3001, cols = 37;
  Output x = ops::placeholder(DType::F32, {rows, cols}, "x");
  auto parts = ops::split(x, std::vector<int64_t>{5, 0, 20, 12}, 1);
  Output back = ops::concat({parts[2], parts[0], parts[3]}, 1);
  std::vector<double> v(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i);
  SessionOptions o;
  o.num_threads = 2;
  Session s(g, o);
  auto r = s.run({parts[0], parts[2], parts[3], back}, {{x, vec({rows, cols}, v)}});
  const int64_t off[3] = {0, 5, 25}, width[3] = {5, 20, 12};
  for (int p = 0; p < 3; ++p)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < width[p]; ++j)
        ASSERT_EQ(r[static_cast<size_t>(p)].data<float>()[i * width[p] + j], static_cast<float>(v[static_cast<size_t>(i * cols + off[p] + j)]))
            << "part " << p << " row " << i;
  // back = columns [5, 25), [0, 5), [25, 37) of each row.
  const int64_t order[3] = {1, 0, 2};
  for (int64_t i = 0; i < rows; ++i) {
    int64_t k = 0;
    for (int64_t p : order)
      for (int64_t j = 0; j < width[p]; ++j, ++k)
        ASSERT_EQ(r[3].data<float>()[i * cols + k], static_cast<float>(v[static_cast<size_t>(i * cols + off[p] + j)]))
            << "row " << i;
  }
}
SPIRE_FORWARD_TEST(SplitLike, Values) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = c({2, 3}, iota(6));
  Output l0 = ops::placeholder(DType::F32, {2, -1}, "l0");
  auto parts = ops::split_like(x, {l0, c({2, 2}, iota(4))}, 1, "sl");
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[1].shape(), Shape({2, 2}));
  auto r = run(parts, {{l0, vec({2, 1}, {0, 0})}});
  expect_tensor(r[0], {2, 1}, {0, 3});
  expect_tensor(r[1], {2, 2}, {1, 2, 4, 5});
  expect_error([&] { run(parts, {{l0, vec({2, 2}, iota(4))}}); }, {"SplitLike", "sl", "4 entries"});
}
SPIRE_FORWARD_TEST(Split, EqualAndSizes) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = c({4, 3}, iota(12));
  auto halves = ops::split(x, 2, 0);
  ASSERT_EQ(halves.size(), 2u);
  auto r = run(halves);
  expect_tensor(r[0], {2, 3}, iota(6));
  expect_tensor(r[1], {2, 3}, iota(6, 6));
  auto cols = ops::split(x, std::vector<int64_t>{1, -1}, -1);
  EXPECT_EQ(cols[1].shape(), Shape({4, 2}));
  r = run(cols);
  expect_tensor(r[0], {4, 1}, {0, 3, 6, 9});
  expect_tensor(r[1], {4, 2}, {1, 2, 4, 5, 7, 8, 10, 11});
  auto z = run(ops::split(x, std::vector<int64_t>{0, 3}, 1));
  expect_tensor(z[0], {4, 0}, {});
  expect_tensor(z[1], {4, 3}, iota(12));
  auto b = run(ops::split(c({4}, {1, 0, 0, 1}, DType::Bool), 4, 0));
  expect_tensor(b[3], {1}, {1});
}
SPIRE_FORWARD_TEST(Split, UnknownDimsAndErrors) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output u = ops::placeholder(DType::F32, {-1, 2}, "u");
  auto parts = ops::split(u, 2, 0, "sp");
  EXPECT_EQ(parts[0].shape(), Shape({-1, 2}));
  auto r = run(parts, {{u, vec({2, 2}, iota(4))}});
  expect_tensor(r[1], {1, 2}, {2, 3});
  expect_error([&] { run(parts, {{u, vec({3, 2}, iota(6))}}); }, {"Split", "sp", "3", "2 equal parts"});
  Output x = c({4, 3}, iota(12));
  expect_error([&] { ops::split(x, 3, 0, "sp3"); }, {"Split", "sp3", "size 4", "3 equal parts", "[4, 3]"});
  expect_error([&] { ops::split(x, std::vector<int64_t>{1, 1}, 0); }, {"Split", "do not add up", "[1, 1]"});
  expect_error([&] { ops::split(x, std::vector<int64_t>{-1, -1}, 0); }, {"Split", "at most one -1"});
  expect_error([&] { ops::split(x, 2, 5); }, {"Split", "axis 5"});
}

// ---- Slice / Pad --------------------------------------------------------------------

SPIRE_FORWARD_TEST(Slice, Values) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = c({3, 4}, iota(12));
  expect_tensor(run1(ops::slice(x, {1, 1}, {2, 2})), {2, 2}, {5, 6, 9, 10});
  expect_tensor(run1(ops::slice(x, {1, 0}, {-1, -1})), {2, 4}, iota(8, 4));
  expect_tensor(run1(ops::slice(x, {0, 3}, {3, 1})), {3, 1}, {3, 7, 11});
  expect_tensor(run1(ops::slice(x, {3, 0}, {-1, 2})), {0, 2}, {});
  Output x3 = c({2, 2, 3}, iota(12), DType::I64);
  expect_tensor(run1(ops::slice(x3, {1, 0, 1}, {1, 2, 2})), {1, 2, 2}, {7, 8, 10, 11});
  expect_tensor(run1(ops::slice(c({}, {4}), {}, {})), {}, {4});
}
SPIRE_FORWARD_TEST(Slice, UnknownDimsAndErrors) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output u = ops::placeholder(DType::F32, {-1, 3}, "u");
  Output s = ops::slice(u, {1, 1}, {-1, 1}, "sl");
  EXPECT_EQ(s.shape(), Shape({-1, 1}));
  expect_tensor(run1(s, {{u, vec({3, 3}, iota(9))}}), {2, 1}, {4, 7});
  Output s2 = ops::slice(u, {2, 0}, {1, 3}, "sl2");
  expect_error([&] { run1(s2, {{u, vec({2, 3}, iota(6))}}); }, {"Slice", "sl2", "out of bounds", "[2, 3]"});
  expect_error([&] { ops::slice(u, {0, 2}, {1, 2}, "bad_slice"); }, {"Slice", "bad_slice", "out of bounds", "[?, 3]"});
  expect_error([&] { ops::slice(u, {0}, {1}); }, {"Slice", "rank 2"});
}
SPIRE_FORWARD_TEST(SliceGrad, Values) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output like = ops::placeholder(DType::F32, {-1, 3}, "like");
  Output y = ops::slice_grad(c({2, 1}, {1, 2}), like, {1, 1}, {-1, 1}, "sg");
  EXPECT_EQ(y.shape(), Shape({-1, 3}));
  expect_tensor(run1(y, {{like, vec({3, 3}, iota(9))}}), {3, 3}, {0, 0, 0, 0, 1, 0, 0, 2, 0});
  expect_error([&] { run1(y, {{like, vec({4, 3}, iota(12))}}); }, {"SliceGrad", "sg", "[2, 1]", "[3, 1]"});
}
SPIRE_FORWARD_TEST(Pad, Values) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = c({2, 2}, {1, 2, 3, 4});
  expect_tensor(run1(ops::pad(x, {{1, 0}, {0, 2}})), {3, 4}, {0, 0, 0, 0, 1, 2, 0, 0, 3, 4, 0, 0});
  expect_tensor(run1(ops::pad(x, {{0, 0}, {1, 1}}, -1)), {2, 4}, {-1, 1, 2, -1, -1, 3, 4, -1});
  expect_tensor(run1(ops::pad(c({0}, {}), {{1, 1}}, 5)), {2}, {5, 5});
  expect_tensor(run1(ops::pad(ci({2}, {1, 2}), {{0, 1}}, 7)), {3}, {1, 2, 7});
  expect_tensor(run1(ops::pad(c({1}, {1}, DType::Bool), {{1, 0}})), {2}, {0, 1});
  Output u = ops::placeholder(DType::F32, {-1}, "u");
  Output p = ops::pad(u, {{2, 1}});
  EXPECT_EQ(p.shape(), Shape({-1}));
  expect_tensor(run1(p, {{u, vec({1}, {9})}}), {4}, {0, 0, 9, 0});
  expect_error([&] { ops::pad(x, {{1, 1}}, 0, "pd"); }, {"Pad", "pd", "2 * rank", "[2, 2]"});
  expect_error([&] { ops::pad(x, {{1, 1}, {-1, 0}}); }, {"Pad", "non-negative"});
}
SPIRE_FORWARD_TEST(PadGrad, Values) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output gr = c({3, 4}, iota(12));
  Output like = ops::placeholder(DType::F32, {-1, -1}, "like");
  Output y = ops::pad_grad(gr, like, {1, 0, 0, 2}, "pg");
  EXPECT_EQ(y.shape(), Shape({2, 2}));
  expect_tensor(run1(y, {{like, vec({2, 2}, iota(4))}}), {2, 2}, {4, 5, 8, 9});
  expect_error([&] { ops::pad_grad(gr, c({2, 3}, iota(6)), {1, 0, 0, 2}); }, {"PadGrad", "[3, 4]", "[2, 3]"});
}

// ---- Gather / OneHot ------------------------------------------------------------------

SPIRE_FORWARD_TEST(Gather, Values) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output p = c({3, 2}, {1, 2, 3, 4, 5, 6});
  expect_tensor(run1(ops::gather(p, ci({3}, {2, 0, 2}))), {3, 2}, {5, 6, 1, 2, 5, 6});
  expect_tensor(run1(ops::gather(p, ci({2, 2}, {1, 0, 0, 1}))), {2, 2, 2}, {3, 4, 1, 2, 1, 2, 3, 4});
  expect_tensor(run1(ops::gather(p, c({2}, {1, 1}, DType::I64), 1)), {3, 2}, {2, 2, 4, 4, 6, 6});
  expect_tensor(run1(ops::gather(p, ci({}, {1}), -1)), {3}, {2, 4, 6});
  expect_tensor(run1(ops::gather(p, ci({0}, {}))), {0, 2}, {});
  expect_tensor(run1(ops::gather(c({3}, {1, 0, 1}, DType::Bool), ci({2}, {1, 2}))), {2}, {0, 1});
}
SPIRE_FORWARD_TEST(Gather, IndexOutOfRangeThrows) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output p = ops::placeholder(DType::F32, {-1, 2}, "params");
  Output idx = ops::placeholder(DType::I64, {-1}, "idx");
  Output y = ops::gather(p, idx, 0, "emb");
  Tensor pv = vec({3, 2}, iota(6));
  expect_error([&] { run1(y, {{p, pv}, {idx, vec({2}, {1, 3}, DType::I64)}}); },
               {"Gather", "emb", "index 3", "element 1", "[0, 3)", "f32[3, 2]", "i64[2]"});
  expect_error([&] { run1(y, {{p, pv}, {idx, vec({1}, {-1}, DType::I64)}}); }, {"emb", "index -1"});
  expect_error([&] { ops::gather(p, c({1}, {0})); }, {"Gather", "f32"});
  expect_error([&] { ops::gather(p, idx, 2); }, {"Gather", "axis 2"});
}
SPIRE_FORWARD_TEST(GatherGrad, ScatterAdds) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output like = ops::placeholder(DType::F32, {-1, 2}, "like");
  Output y = ops::gather_grad(c({3, 2}, {1, 2, 3, 4, 5, 6}), ci({3}, {2, 0, 2}), like, 0, "gg");
  EXPECT_EQ(y.shape(), Shape({-1, 2}));
  expect_tensor(run1(y, {{like, vec({4, 2}, iota(8))}}), {4, 2}, {3, 4, 0, 0, 6, 8, 0, 0});
  Output y1 = ops::gather_grad(c({2, 1}, {1, 2}, DType::I64), ci({1}, {1}), c({2, 3}, iota(6), DType::I64), 1);
  expect_tensor(run1(y1), {2, 3}, {0, 1, 0, 0, 2, 0});
  expect_error([&] { run1(y, {{like, vec({2, 2}, iota(4))}}); }, {"GatherGrad", "gg", "index 2"});
}
SPIRE_FORWARD_TEST(OneHot, Values) {
  Graph g;
  DefaultGraphGuard guard(g);
  Tensor y = run1(ops::one_hot(ci({3}, {0, 2, 5}), 3));
  EXPECT_EQ(y.dtype(), DType::F32);
  expect_tensor(y, {3, 3}, {1, 0, 0, 0, 0, 1, 0, 0, 0});
  Tensor y2 = run1(ops::one_hot(c({2, 1}, {1, -1}, DType::I64), 2, 5, -1, DType::I32));
  EXPECT_EQ(y2.dtype(), DType::I32);
  expect_tensor(y2, {2, 1, 2}, {-1, 5, -1, -1});
  expect_tensor(run1(ops::one_hot(ci({0}, {}), 4)), {0, 4}, {});
  expect_error([&] { ops::one_hot(c({2}, {0, 1}), 3, 1, 0, DType::F32, "oh"); }, {"OneHot", "oh", "f32"});
  expect_error([&] { ops::one_hot(ci({2}, {0, 1}), -1); }, {"OneHot", "depth"});
}

// ---- Tile / BroadcastTo ---------------------------------------------------------------

SPIRE_FORWARD_TEST(Tile, Values) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = c({2, 2}, {1, 2, 3, 4});
  expect_tensor(run1(ops::tile(x, {1, 2})), {2, 4}, {1, 2, 1, 2, 3, 4, 3, 4});
  expect_tensor(run1(ops::tile(x, {2, 1})), {4, 2}, {1, 2, 3, 4, 1, 2, 3, 4});
  expect_tensor(run1(ops::tile(x, {2, 0})), {4, 0}, {});
  expect_tensor(run1(ops::tile(c({2, 1, 2}, {1, 2, 3, 4}), {1, 2, 2})), {2, 2, 4},
                {1, 2, 1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4, 3, 4});
  expect_tensor(run1(ops::tile(c({}, {7}), {})), {}, {7});
  expect_tensor(run1(ops::tile(c({2}, {1, 0}, DType::Bool), {2})), {4}, {1, 0, 1, 0});
  Output u = ops::placeholder(DType::F32, {-1, 1}, "u");
  Output t = ops::tile(u, {2, 3});
  EXPECT_EQ(t.shape(), Shape({-1, 3}));
  expect_tensor(run1(t, {{u, vec({2, 1}, {5, 6})}}), {4, 3}, {5, 5, 5, 6, 6, 6, 5, 5, 5, 6, 6, 6});
  expect_error([&] { ops::tile(x, {2}, "tl"); }, {"Tile", "tl", "multiples [2]", "[2, 2]"});
  expect_error([&] { ops::tile(x, {2, -1}); }, {"Tile", "non-negative"});
}
SPIRE_FORWARD_TEST(TileGrad, SumsCopies) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output like = ops::placeholder(DType::F32, {-1, 2}, "like");
  Output y = ops::tile_grad(c({2, 4}, {1, 2, 3, 4, 5, 6, 7, 8}), like, {2, 2}, "tg");
  expect_tensor(run1(y, {{like, vec({1, 2}, {0, 0})}}), {1, 2}, {1 + 3 + 5 + 7, 2 + 4 + 6 + 8});
  expect_tensor(run1(ops::tile_grad(ci({3}, {1, 2, 3}), ci({1}, {0}), {3})), {1}, {6});
  expect_error([&] { run1(y, {{like, vec({2, 2}, iota(4))}}); }, {"TileGrad", "tg", "[2, 4]", "[2, 2]"});
}
SPIRE_FORWARD_TEST(BroadcastTo, Values) {
  Graph g;
  DefaultGraphGuard guard(g);
  expect_tensor(run1(ops::broadcast_to(c({2, 1}, {1, 2}), {2, 3})), {2, 3}, {1, 1, 1, 2, 2, 2});
  expect_tensor(run1(ops::broadcast_to(c({3}, {1, 2, 3}), {2, 3})), {2, 3}, {1, 2, 3, 1, 2, 3});
  expect_tensor(run1(ops::broadcast_to(c({}, {4}), {2})), {2}, {4, 4});
  expect_tensor(run1(ops::broadcast_to(c({1}, {1}, DType::Bool), {0, 1})), {0, 1}, {});
  expect_tensor(run1(ops::broadcast_to(ci({1, 2}, {1, 2}), {2, 1, 2})), {2, 1, 2}, {1, 2, 1, 2});
  Output u = ops::placeholder(DType::F32, {-1}, "u");
  Output b = ops::broadcast_to(u, {2, 3}, "bt");
  expect_tensor(run1(b, {{u, vec({1}, {9})}}), {2, 3}, {9, 9, 9, 9, 9, 9});
  expect_error([&] { run1(b, {{u, vec({2}, {1, 2})}}); }, {"BroadcastTo", "bt", "[2]", "[2, 3]"});
  expect_error([&] { ops::broadcast_to(c({2}, {1, 2}), {3}, "bt2"); }, {"BroadcastTo", "bt2", "[2]", "[3]"});
  expect_error([&] { ops::broadcast_to(c({2, 2}, iota(4)), {2}); }, {"BroadcastTo", "[2, 2]"});
}

}  // namespace
}  // namespace spire::testing
