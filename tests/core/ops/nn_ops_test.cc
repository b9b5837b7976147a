// Forward tests of the matmul and softmax families of nn_ops (MatMul, BatchMatMul,
// Softmax, LogSoftmax, SparseSoftmaxCrossEntropyWithLogits, InTopK) against hand-computed values:
// transposition flags, broadcast batch dims, empty dims, unknown batch dims in shape
// inference, numerically large logits, and the error messages. Conv and pooling tests
// are in nn_conv_pool_test.cc.
#include <cmath>
#include <limits>

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

// ---- MatMul -------------------------------------------------------------------------

SPIRE_FORWARD_TEST(MatMul, AllTransposeFlags) {
  const std::vector<double> want{58, 64, 139, 154};
  for (DType dt : {DType::F32, DType::F64}) {
    Graph g;
    DefaultGraphGuard guard(g);
    Output a = ops::constant(vec({2, 3}, {1, 2, 3, 4, 5, 6}, dt));
    Output at = ops::constant(vec({3, 2}, {1, 4, 2, 5, 3, 6}, dt));
    Output b = ops::constant(vec({3, 2}, {7, 8, 9, 10, 11, 12}, dt));
    Output bt = ops::constant(vec({2, 3}, {7, 9, 11, 8, 10, 12}, dt));
    Output ab = ops::matmul(a, b);
    EXPECT_EQ(ab.shape(), Shape({2, 2}));
    expect_tensor(run1(ab), {2, 2}, want);
    expect_tensor(run1(ops::matmul(at, b, true, false)), {2, 2}, want);
    expect_tensor(run1(ops::matmul(a, bt, false, true)), {2, 2}, want);
    expect_tensor(run1(ops::matmul(at, bt, true, true)), {2, 2}, want);
    // b^T a^T = (ab)^T
    expect_tensor(run1(ops::matmul(b, a, true, true)), {2, 2}, {58, 139, 64, 154});
  }
}
SPIRE_FORWARD_TEST(MatMul, EmptyDims) {
  Graph g;
  DefaultGraphGuard guard(g);
  // k = 0: the sum over an empty inner dimension is zero.
  expect_tensor(run1(ops::matmul(ops::constant(vec({2, 0}, {})), ops::constant(vec({0, 3}, {})))),
                {2, 3}, {0, 0, 0, 0, 0, 0});
  expect_tensor(run1(ops::matmul(ops::constant(vec({0, 3}, {})),
                                 ops::constant(vec({3, 2}, {1, 2, 3, 4, 5, 6})))),
                {0, 2}, {});
}
SPIRE_FORWARD_TEST(MatMul, UnknownBatchDim) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {-1, 2}, "x");
  Output y = ops::matmul(x, ops::constant(vec({2, 3}, {1, 0, 1, 0, 1, 1})));
  EXPECT_EQ(y.shape(), Shape({-1, 3}));
  expect_tensor(run1(y, {{x, vec({1, 2}, {2, 5})}}), {1, 3}, {2, 5, 7});
}
SPIRE_FORWARD_TEST(MatMul, InnerDimMismatchThrows) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output a = ops::placeholder(DType::F32, {2, 3}, "a");
  Output b = ops::placeholder(DType::F32, {4, 5}, "b");
  expect_error([&] { ops::matmul(a, b, false, false, "mm"); },
               {"MatMul", "mm", "inner dimensions", "[2, 3]", "[4, 5]"});
  // Run-time mismatch through unknown dims.
  Output c = ops::placeholder(DType::F32, {2, -1}, "c");
  Output d = ops::matmul(c, ops::placeholder(DType::F32, {4, 5}, "d2"), false, false, "mm2");
  expect_error([&] {
    run1(d, {{c, vec({2, 3}, {1, 2, 3, 4, 5, 6})},
             {g.output_by_name("d2"), vec({4, 5}, std::vector<double>(20, 1.0))}});
  }, {"mm2", "[2, 3]", "[4, 5]"});
  Output i = ops::placeholder(DType::I32, {2, 2}, "i");
  expect_error([&] { ops::matmul(i, i); }, {"MatMul", "i32"});
  expect_error([&] { ops::matmul(ops::placeholder(DType::F32, {2, 2, 2}), a); }, {"MatMul", "rank"});
}

// ---- BatchMatMul ----------------------------------------------------------------------

SPIRE_FORWARD_TEST(BatchMatMul, EqualBatch) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output a = ops::constant(vec({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8}, DType::F64));
  Output b = ops::constant(vec({2, 2, 2}, {1, 0, 0, 1, 0, 1, 1, 0}, DType::F64));
  Output c = ops::batch_matmul(a, b);
  EXPECT_EQ(c.shape(), Shape({2, 2, 2}));
  expect_tensor(run1(c), {2, 2, 2}, {1, 2, 3, 4, 6, 5, 8, 7});
}
SPIRE_FORWARD_TEST(BatchMatMul, BroadcastBatchAndAdjoint) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output a = ops::constant(vec({1, 2, 2}, {1, 2, 3, 4}));
  Output at = ops::constant(vec({1, 2, 2}, {1, 3, 2, 4}));
  Output b = ops::constant(vec({3, 2, 1}, {1, 0, 0, 1, 1, 1}));
  Output bt = ops::constant(vec({3, 1, 2}, {1, 0, 0, 1, 1, 1}));
  const std::vector<double> want{1, 3, 2, 4, 3, 7};
  for (Output c : {ops::batch_matmul(a, b), ops::batch_matmul(at, b, true, false),
                   ops::batch_matmul(a, bt, false, true), ops::batch_matmul(at, bt, true, true)}) {
    EXPECT_EQ(c.shape(), Shape({3, 2, 1}));
    expect_tensor(run1(c), {3, 2, 1}, want);
  }
  // b shared by all batch entries (rank-2 b, and b with batch dims of 1).
  Output a2 = ops::constant(vec({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8}));
  Output m = ops::constant(vec({2, 2}, {1, 1, 0, 1}));
  expect_tensor(run1(ops::batch_matmul(a2, m)), {2, 2, 2}, {1, 3, 3, 7, 5, 11, 7, 15});
  Output m3 = ops::constant(vec({1, 1, 2, 2}, {1, 1, 0, 1}));
  expect_tensor(run1(ops::batch_matmul(a2, m3)), {1, 2, 2, 2}, {1, 3, 3, 7, 5, 11, 7, 15});
  // Two-sided broadcast: [2,1] x [1,3] batch -> [2,3].
  Output p = ops::constant(vec({2, 1, 1, 1}, {1, 2}));
  Output q = ops::constant(vec({1, 3, 1, 1}, {10, 20, 30}));
  expect_tensor(run1(ops::batch_matmul(p, q)), {2, 3, 1, 1}, {10, 20, 30, 20, 40, 60});
}
SPIRE_FORWARD_TEST(BatchMatMul, EmptyBatchAndUnknownDims) {
  Graph g;
  DefaultGraphGuard guard(g);
  expect_tensor(run1(ops::batch_matmul(ops::constant(vec({0, 2, 3}, {})),
                                       ops::constant(vec({0, 3, 4}, {})))),
                {0, 2, 4}, {});
  Output x = ops::placeholder(DType::F32, {-1, 2, 3}, "x");
  Output y = ops::batch_matmul(x, ops::placeholder(DType::F32, {3, -1}, "w"));
  EXPECT_EQ(y.shape(), Shape({-1, 2, -1}));
}
SPIRE_FORWARD_TEST(BatchMatMul, MismatchThrows) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output a = ops::placeholder(DType::F32, {2, 2, 3}, "a");
  expect_error([&] { ops::batch_matmul(a, ops::placeholder(DType::F32, {2, 4, 2}), false, false, "bmm"); },
               {"BatchMatMul", "bmm", "inner dimensions", "[2, 2, 3]", "[2, 4, 2]"});
  expect_error([&] { ops::batch_matmul(a, ops::placeholder(DType::F32, {3, 3, 2})); },
               {"BatchMatMul", "batch dimensions", "[2]", "[3]"});
}

// ---- Softmax / LogSoftmax ---------------------------------------------------------------

const std::vector<double> kSoft123{0.0900305731704, 0.2447284710548, 0.6652409557748};
const std::vector<double> kLogSoft123{-2.4076059644444, -1.4076059644444, -0.4076059644444};

SPIRE_FORWARD_TEST(Softmax, RowsAndStability) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::constant(vec({3, 3}, {1, 2, 3, 0, 0, 0, 1000, 1001, 1002}));
  std::vector<double> want = kSoft123;
  want.insert(want.end(), {1.0 / 3, 1.0 / 3, 1.0 / 3});
  want.insert(want.end(), kSoft123.begin(), kSoft123.end());
  expect_tensor(run1(ops::softmax(x)), {3, 3}, want);
  // -1000s: exp underflows without the max subtraction.
  expect_tensor(run1(ops::softmax(ops::constant(vec({3}, {-1000, -1001, -999}, DType::F64)))),
                {3}, {kSoft123[1], kSoft123[0], kSoft123[2]}, 1e-12);
}
SPIRE_FORWARD_TEST(Softmax, OtherAxisAndEmpty) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::constant(vec({2, 2}, {1, 0, 3, 0}));
  expect_tensor(run1(ops::softmax(x, 0)), {2, 2}, {0.1192029220, 0.5, 0.8807970780, 0.5});
  // Middle axis of a rank-3 tensor.
  Output y = ops::constant(vec({1, 3, 2}, {1, 0, 2, 0, 3, 0}));
  expect_tensor(run1(ops::softmax(y, 1)), {1, 3, 2},
                {kSoft123[0], 1.0 / 3, kSoft123[1], 1.0 / 3, kSoft123[2], 1.0 / 3});
  expect_tensor(run1(ops::softmax(ops::constant(vec({0, 3}, {})))), {0, 3}, {});
  Output p = ops::placeholder(DType::F32, {-1, 4});
  EXPECT_EQ(ops::softmax(p).shape(), Shape({-1, 4}));
}
SPIRE_FORWARD_TEST(Softmax, BadAxisThrows) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {2, 3});
  expect_error([&] { ops::softmax(x, 2, "sm"); }, {"Softmax", "sm", "axis 2"});
  expect_error([&] { ops::softmax(ops::placeholder(DType::I32, {3})); }, {"Softmax", "i32"});
}
SPIRE_FORWARD_TEST(LogSoftmax, RowsAndStability) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::constant(vec({2, 3}, {1, 2, 3, 1000, 1001, 1002}, DType::F64));
  std::vector<double> want = kLogSoft123;
  want.insert(want.end(), kLogSoft123.begin(), kLogSoft123.end());
  expect_tensor(run1(ops::log_softmax(x)), {2, 3}, want, 1e-10);
  // Far below the others: log of an underflowed exp would be -inf.
  expect_tensor(run1(ops::log_softmax(ops::constant(vec({2}, {0, -2000}, DType::F64)))), {2},
                {0, -2000}, 1e-10);
  expect_tensor(run1(ops::log_softmax(ops::constant(vec({2, 2}, {1, 0, 3, 0})), 0)), {2, 2},
                {std::log(0.1192029220), std::log(0.5), std::log(0.8807970780), std::log(0.5)},
                1e-6);
}

// ---- SparseSoftmaxCrossEntropyWithLogits ------------------------------------------------

SPIRE_FORWARD_TEST(SparseSoftmaxCrossEntropyWithLogits, Values) {
  for (DType label_dt : {DType::I32, DType::I64}) {
    Graph g;
    DefaultGraphGuard guard(g);
    Output logits = ops::constant(vec({3, 3}, {1, 2, 3, 0, 0, 0, 1000, 1001, 1002}));
    Output labels = ops::constant(vec({3}, {2, 0, 0}, label_dt));
    Output loss = ops::sparse_softmax_cross_entropy_with_logits(logits, labels);
    EXPECT_EQ(loss.shape(), Shape({3}));
    expect_tensor(run1(loss), {3}, {0.4076059644, 1.0986122887, 2.4076059644}, 1e-5);
  }
}
SPIRE_FORWARD_TEST(SparseSoftmaxCrossEntropyWithLogits, EmptyAndUnknownBatch) {
  Graph g;
  DefaultGraphGuard guard(g);
  expect_tensor(run1(ops::sparse_softmax_cross_entropy_with_logits(
                    ops::constant(vec({0, 3}, {})), ops::constant(vec({0}, {}, DType::I32)))),
                {0}, {});
  Output x = ops::placeholder(DType::F32, {-1, 3}, "x");
  Output y = ops::placeholder(DType::I64, {-1}, "y");
  Output loss = ops::sparse_softmax_cross_entropy_with_logits(x, y);
  EXPECT_EQ(loss.shape(), Shape({-1}));
  expect_tensor(run1(loss, {{x, vec({1, 3}, {0, 0, 0})}, {y, vec({1}, {1}, DType::I64)}}), {1},
                {1.0986122887}, 1e-5);
}
SPIRE_FORWARD_TEST(SparseSoftmaxCrossEntropyWithLogits, BadLabelsThrow) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output logits = ops::constant(vec({2, 3}, {1, 2, 3, 0, 0, 0}));
  Output hi = ops::sparse_softmax_cross_entropy_with_logits(
      logits, ops::constant(vec({2}, {0, 3}, DType::I32)), "xent_hi");
  expect_error([&] { run1(hi); }, {"SparseSoftmaxCrossEntropyWithLogits", "xent_hi", "label 3",
                                   "index 1", "[0, 3)"});
  Output lo = ops::sparse_softmax_cross_entropy_with_logits(
      logits, ops::constant(vec({2}, {-1, 0}, DType::I64)), "xent_lo");
  expect_error([&] { run1(lo); }, {"xent_lo", "label -1", "index 0"});
  // Static errors: label dtype, row-count mismatch.
  expect_error([&] {
    ops::sparse_softmax_cross_entropy_with_logits(logits, ops::constant(vec({2}, {0, 1})));
  }, {"SparseSoftmaxCrossEntropyWithLogits", "f32"});
  expect_error([&] {
    ops::sparse_softmax_cross_entropy_with_logits(logits, ops::constant(vec({3}, {0, 1, 2}, DType::I32)));
  }, {"2 rows", "3 entries"});
}

SPIRE_FORWARD_TEST(InTopK, TiesNonFiniteAndBadTargets) {
  for (DType target_dt : {DType::I32, DType::I64}) {
    Graph g;
    DefaultGraphGuard guard(g);
    const double inf = std::numeric_limits<double>::infinity();
    const double nan = std::numeric_limits<double>::quiet_NaN();
    Output scores = ops::constant(vec({6, 4}, {1, 3, 3, 2,      // target 1: tied for first
                                               1, 3, 3, 2,      // target 3: third
                                               5, nan, 4, 1,    // NaN elsewhere is never greater
                                               0, inf, 1, 2,    // an infinity is greater
                                               nan, 1, 2, 3,    // non-finite target: out
                                               1, 2, 3, 4}));   // target 4: out of range
    Output targets = ops::constant(vec({6}, {1, 3, 2, 3, 0, 4}, target_dt));
    expect_tensor(run1(ops::in_top_k(scores, targets, 1)), {6}, {1, 0, 0, 0, 0, 0});
    expect_tensor(run1(ops::in_top_k(scores, targets, 2)), {6}, {1, 0, 1, 1, 0, 0});
    expect_tensor(run1(ops::in_top_k(scores, targets, 3)), {6}, {1, 1, 1, 1, 0, 0});
    expect_tensor(run1(ops::in_top_k(scores, targets, 0)), {6}, {0, 0, 0, 0, 0, 0});
    expect_tensor(run1(ops::in_top_k(scores, targets, 9)), {6}, {1, 1, 1, 1, 0, 0});
    EXPECT_EQ(ops::in_top_k(scores, targets, 1).dtype(), DType::Bool);
  }
}
SPIRE_FORWARD_TEST(InTopK, Errors) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output scores = ops::constant(vec({2, 3}, {1, 2, 3, 0, 0, 0}));
  expect_error([&] { ops::in_top_k(scores, ops::constant(vec({2}, {0, 1})), 1, "top"); },
               {"InTopK", "top", "f32"});
  expect_error([&] { ops::in_top_k(scores, ops::constant(vec({3}, {0, 1, 2}, DType::I32)), 1); },
               {"InTopK", "2 rows", "3 entries"});
  expect_error([&] { ops::in_top_k(scores, ops::constant(vec({2}, {0, 1}, DType::I32)), -1); },
               {"InTopK", "k must be >= 0"});
  expect_error([&] { ops::in_top_k(ops::constant(vec({6}, {1, 2, 3, 0, 0, 0})),
                                   ops::constant(vec({2}, {0, 1}, DType::I32)), 1); },
               {"InTopK", "rank"});
}

}  // namespace
}  // namespace spire::testing
