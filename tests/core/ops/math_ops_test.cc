// Forward tests of the elementwise math ops against hand-computed values,
// including broadcasting edge cases (size-1 dims, scalars, empty dims).
#include <cmath>
#include <limits>

#include "core/ops/op_util.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

using UnaryFn = Output (*)(const Output&, const std::string&);
using BinaryFn = Output (*)(const Output&, const Output&, const std::string&);

Tensor vec(const Shape& s, const std::vector<double>& v, DType dt = DType::F32) {
  Tensor t(dt, s);
  for (size_t i = 0; i < v.size(); ++i)
    visit_dtype(dt, "vec", [&](auto z) { t.data<decltype(z)>()[i] = static_cast<decltype(z)>(v[i]); });
  return t;
}

void check_unary(UnaryFn f, const std::vector<double>& in, const std::vector<double>& want,
                 DType dt = DType::F32, double tol = 1e-5) {
  Graph g;
  DefaultGraphGuard guard(g);
  Shape s{static_cast<int64_t>(in.size())};
  Output x = ops::constant(vec(s, in, dt));
  expect_tensor(run1(f(x, "")), s, want, tol);
}

void check_binary(BinaryFn f, const Tensor& a, const Tensor& b, const Shape& out,
                  const std::vector<double>& want, double tol = 1e-6) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output z = f(ops::constant(a), ops::constant(b), "");
  EXPECT_EQ(z.shape(), out);
  expect_tensor(run1(z), out, want, tol);
}

SPIRE_FORWARD_TEST(Add, Broadcast) {
  check_binary(ops::add, vec({2, 3}, {1, 2, 3, 4, 5, 6}), vec({3}, {10, 20, 30}), {2, 3},
               {11, 22, 33, 14, 25, 36});
  check_binary(ops::add, vec({2, 1}, {1, 2}), vec({1, 3}, {10, 20, 30}), {2, 3},
               {11, 21, 31, 12, 22, 32});
  check_binary(ops::add, vec({}, {5}), vec({2}, {1, 2}), {2}, {6, 7});
  check_binary(ops::add, vec({0, 3}, {}), vec({3}, {1, 2, 3}), {0, 3}, {});
  check_binary(ops::add, vec({2}, {1, 2}, DType::I64), vec({2}, {3, 4}, DType::I64), {2}, {4, 6});
  check_binary(ops::add, vec({2}, {1, 2}, DType::I32), vec({2}, {3, 4}, DType::I32), {2}, {4, 6});
}
SPIRE_FORWARD_TEST(Add, IncompatibleShapesThrow) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output a = ops::placeholder(DType::F32, {2, 3}, "a");
  Output b = ops::placeholder(DType::F32, {4}, "b");
  expect_error([&] { ops::add(a, b, "bad_add"); }, {"Add", "bad_add", "[2, 3]", "[4]"});
  Output c = ops::placeholder(DType::F64, {3}, "c");
  expect_error([&] { ops::add(a, c); }, {"Add", "same dtype", "f32", "f64"});
}
SPIRE_FORWARD_TEST(Sub, Broadcast) {
  check_binary(ops::sub, vec({2, 2}, {1, 2, 3, 4}), vec({2, 1}, {1, 2}), {2, 2}, {0, 1, 1, 2});
}
SPIRE_FORWARD_TEST(Mul, Broadcast) {
  check_binary(ops::mul, vec({3}, {1, 2, 3}), vec({2, 1}, {2, -1}), {2, 3}, {2, 4, 6, -1, -2, -3});
}
SPIRE_FORWARD_TEST(Div, FloatAndInt) {
  check_binary(ops::div, vec({3}, {1, 3, -4}), vec({}, {2}), {3}, {0.5, 1.5, -2});
  check_binary(ops::div, vec({3}, {7, -7, 9}, DType::I32), vec({3}, {2, 2, 3}, DType::I32), {3},
               {3, -3, 3});
  check_binary(ops::div, vec({1}, {1}), vec({1}, {0}), {1}, {std::numeric_limits<double>::infinity()});
}
SPIRE_FORWARD_TEST(Div, IntegerDivisionByZeroThrows) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output z = ops::div(ops::constant(vec({2}, {1, 2}, DType::I32)),
                      ops::constant(vec({2}, {1, 0}, DType::I32)), "idiv");
  expect_error([&] { run1(z); }, {"idiv", "division by zero"});
}
SPIRE_FORWARD_TEST(Div, IntMinByMinusOneWrapsInsteadOfTrapping) {
  // INT_MIN / -1 overflows: C++ leaves it undefined and x86 traps (SIGFPE); Spire wraps
  // to INT_MIN as two's complement (NumPy's result), in i32 and i64.
  Graph g;
  DefaultGraphGuard guard(g);
  Tensor a32 = Tensor::from_vector<int32_t>({3}, {INT32_MIN, INT32_MIN, 7});
  Tensor b32 = Tensor::from_vector<int32_t>({3}, {-1, 1, -1});
  Tensor r32 = run1(ops::div(ops::constant(a32), ops::constant(b32)));
  EXPECT_EQ(r32.to_vector<int32_t>(), (std::vector<int32_t>{INT32_MIN, INT32_MIN, -7}));
  Tensor a64 = Tensor::from_vector<int64_t>({2}, {INT64_MIN, -9});
  Tensor b64 = Tensor::from_vector<int64_t>({2}, {-1, -1});
  Tensor r64 = run1(ops::div(ops::constant(a64), ops::constant(b64)));
  EXPECT_EQ(r64.to_vector<int64_t>(), (std::vector<int64_t>{INT64_MIN, 9}));
}
SPIRE_FORWARD_TEST(Pow, Values) {
  check_binary(ops::pow, vec({3}, {2, 9, 4}), vec({3}, {3, 0.5, -1}), {3}, {8, 3, 0.25});
}
SPIRE_FORWARD_TEST(Maximum, Values) {
  check_binary(ops::maximum, vec({3}, {1, 5, -2}), vec({}, {0}), {3}, {1, 5, 0});
}
SPIRE_FORWARD_TEST(Minimum, Values) {
  check_binary(ops::minimum, vec({3}, {1, 5, -2}), vec({}, {0}), {3}, {0, 0, -2});
}
SPIRE_FORWARD_TEST(AddN, Values) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output a = ops::constant(vec({2}, {1, 2})), b = ops::constant(vec({2}, {10, 20}));
  expect_tensor(run1(ops::add_n({a, b, a})), {2}, {12, 24});
}
SPIRE_FORWARD_TEST(Neg, Values) { check_unary(ops::neg, {1, -2, 0}, {-1, 2, 0}); }
SPIRE_FORWARD_TEST(Exp, Values) { check_unary(ops::exp, {0, 1, -1}, {1, M_E, 1 / M_E}); }
SPIRE_FORWARD_TEST(Log, Values) {
  check_unary(ops::log, {1, M_E, 0}, {0, 1, -std::numeric_limits<double>::infinity()});
}
SPIRE_FORWARD_TEST(Sqrt, Values) { check_unary(ops::sqrt, {4, 2, 0}, {2, M_SQRT2, 0}); }
SPIRE_FORWARD_TEST(Rsqrt, Values) { check_unary(ops::rsqrt, {4, 0.25}, {0.5, 2}); }
SPIRE_FORWARD_TEST(Abs, Values) { check_unary(ops::abs, {-3, 2, 0}, {3, 2, 0}); }
SPIRE_FORWARD_TEST(Square, Values) { check_unary(ops::square, {-3, 2, 0.5}, {9, 4, 0.25}); }
SPIRE_FORWARD_TEST(Sign, Values) { check_unary(ops::sign, {-3, 2, 0}, {-1, 1, 0}); }
// NaN stays NaN in Relu, Sign and Relu's gradient (TensorFlow's behaviour), in f32 and f64.
TEST(NaN, ReluSignAndReluGradientKeepNaN) {
  for (DType dt : {DType::F32, DType::F64}) {
    SCOPED_TRACE(dtype_name(dt));
    Graph g;
    DefaultGraphGuard guard(g);
    const double nan = std::numeric_limits<double>::quiet_NaN();
    Output x = ops::placeholder(dt, {4}, "x");
    Output r = ops::relu(x);
    Output gx = gradient(ops::sum(r * 3.0), x);
    Output sg = ops::sign(x);
    auto v = run({r, gx, sg}, {{x, vec({4}, {nan, -1, 2, 0}, dt)}});
    EXPECT_TRUE(std::isnan(v[0].element_as_double(0))) << "relu(NaN)";
    EXPECT_EQ(v[0].element_as_double(1), 0);
    EXPECT_EQ(v[0].element_as_double(2), 2);
    EXPECT_TRUE(std::isnan(v[1].element_as_double(0))) << "relu'(NaN)";
    EXPECT_EQ(v[1].element_as_double(1), 0);
    EXPECT_EQ(v[1].element_as_double(2), 3);
    EXPECT_TRUE(std::isnan(v[2].element_as_double(0))) << "sign(NaN)";
    EXPECT_EQ(v[2].element_as_double(3), 0);
    // A NaN arriving as the upstream gradient also stays.
    Output gy = ops::placeholder(dt, {4}, "gy");
    Output g2 = gradients({r}, {x}, {gy})[0];
    Tensor gv = run({g2}, {{x, vec({4}, {1, -1, 2, 0}, dt)}, {gy, vec({4}, {nan, nan, 1, 1}, dt)}})[0];
    EXPECT_TRUE(std::isnan(gv.element_as_double(0)));
    EXPECT_TRUE(std::isnan(gv.element_as_double(1))) << "NaN * 0 is NaN";
  }
}
SPIRE_FORWARD_TEST(Erf, Values) { check_unary(ops::erf, {0, 1, -0.5}, {0, 0.8427007929, -0.5204998778}); }
SPIRE_FORWARD_TEST(Relu, Values) { check_unary(ops::relu, {-3, 2, 0}, {0, 2, 0}); }
SPIRE_FORWARD_TEST(Sigmoid, Values) {
  check_unary(ops::sigmoid, {0, 2, -1000, 1000}, {0.5, 0.8807970780, 0, 1});
}
SPIRE_FORWARD_TEST(Tanh, Values) { check_unary(ops::tanh, {0, 1, -1}, {0, 0.7615941560, -0.7615941560}); }
SPIRE_FORWARD_TEST(Gelu, Values) {
  check_unary(ops::gelu, {0, 1, -1, 2}, {0, 0.8413447461, -0.1586552539, 1.9544997361});
}
SPIRE_FORWARD_TEST(GeluGrad, Values) {
  // dy * (Phi(x) + x phi(x)), the derivative evaluated in double (Python's math.erf).
  for (DType dt : {DType::F64, DType::F32}) {
    Graph g;
    DefaultGraphGuard guard(g);
    Output dy = ops::constant(vec({5}, {1, 2, -1, 0.5, 3}, dt));
    Output x = ops::constant(vec({5}, {0, 1, -1, 2, -6}, dt));
    const Tensor got = run({ops::gelu_grad(dy, x)})[0];
    const std::vector<double> want = {0.5, 2 * 1.0833154705876864, -1 * -0.08331547058768629,
                                      0.5 * 1.085231801078197, 3 * -3.546870945402639e-08};
    for (int i = 0; i < 5; ++i)
      EXPECT_NEAR(got.element_as_double(i), want[static_cast<size_t>(i)], dt == DType::F64 ? 1e-12 : 2e-6)
          << dtype_name(dt) << " element " << i;
    expect_error([&] { ops::gelu_grad(dy, ops::constant(vec({2}, {1, 2}, dt))); },
                 {"GeluGrad", "one shape and dtype", "[5]", "[2]"});
  }
}
SPIRE_FORWARD_TEST(Gelu, TanhApproximation) {
  // PyTorch's gelu(x, approximate="tanh") at these points (0.5 x (1 + tanh(sqrt(2/pi) (x +
  // 0.044715 x^3))) evaluated in double); they differ from the exact values above by up to 1e-4.
  auto tanh_gelu = [](const Output& x, const std::string& n) {
    return ops::gelu(x, ops::GeluApproximate::kTanh, n);
  };
  const std::vector<double> in = {0, 1, -1, 2, -3, 0.5};
  const std::vector<double> want = {0, 0.8411919906082768, -0.15880800939172324, 1.954597694087775,
                                    -0.0036373920817729943, 0.34571400982514394};
  check_unary(tanh_gelu, in, want, DType::F64, 1e-15);
  check_unary(tanh_gelu, in, want, DType::F32, 1e-6);
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::constant(vec({2}, {1, 2}));
  expect_error([&] { ops::add_op("Gelu", {x}, {{"approximate", "erf"}}); },
               {"Gelu", "approximate must be \"none\" or \"tanh\"", "erf"});
  EXPECT_EQ(ops::parse_gelu_approximate("tanh"), ops::GeluApproximate::kTanh);
  EXPECT_STREQ(ops::gelu_approximate_name(ops::GeluApproximate::kNone), "none");
  expect_error([] { ops::parse_gelu_approximate("exact"); }, {"unknown approximate 'exact'", "none, tanh"});
}
SPIRE_FORWARD_TEST(Softplus, Values) {
  check_unary(ops::softplus, {0, 1, -50, 100}, {M_LN2, 1.3132616875, 1.9287498e-22, 100}, DType::F64, 1e-9);
}
SPIRE_FORWARD_TEST(LeakyRelu, Values) {
  Graph g;
  DefaultGraphGuard guard(g);
  expect_tensor(run1(ops::leaky_relu(ops::constant(vec({3}, {-2, 3, 0})), 0.1)), {3}, {-0.2, 3, 0});
}

void check_compare(BinaryFn f, const std::vector<double>& want) {
  check_binary(f, vec({3}, {1, 2, 3}), vec({}, {2}), {3}, want);
}
SPIRE_FORWARD_TEST(Equal, Values) { check_compare(ops::equal, {0, 1, 0}); }
SPIRE_FORWARD_TEST(NotEqual, Values) { check_compare(ops::not_equal, {1, 0, 1}); }
SPIRE_FORWARD_TEST(Less, Values) { check_compare(ops::less, {1, 0, 0}); }
SPIRE_FORWARD_TEST(LessEqual, Values) { check_compare(ops::less_equal, {1, 1, 0}); }
SPIRE_FORWARD_TEST(Greater, Values) { check_compare(ops::greater, {0, 0, 1}); }
SPIRE_FORWARD_TEST(GreaterEqual, Values) { check_compare(ops::greater_equal, {0, 1, 1}); }
SPIRE_FORWARD_TEST(LogicalAnd, Values) {
  check_binary(ops::logical_and, vec({4}, {0, 0, 1, 1}, DType::Bool), vec({4}, {0, 1, 0, 1}, DType::Bool),
               {4}, {0, 0, 0, 1});
}
SPIRE_FORWARD_TEST(LogicalOr, Values) {
  check_binary(ops::logical_or, vec({4}, {0, 0, 1, 1}, DType::Bool), vec({4}, {0, 1, 0, 1}, DType::Bool),
               {4}, {0, 1, 1, 1});
}
SPIRE_FORWARD_TEST(LogicalNot, Values) {
  Graph g;
  DefaultGraphGuard guard(g);
  expect_tensor(run1(ops::logical_not(ops::constant(vec({2}, {0, 1}, DType::Bool)))), {2}, {1, 0});
  expect_error([&] { ops::logical_not(ops::constant(vec({2}, {0, 1}))); }, {"LogicalNot", "bool"});
}
SPIRE_FORWARD_TEST(Select, Broadcast) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output c = ops::constant(vec({3}, {1, 0, 1}, DType::Bool));
  Output x = ops::constant(vec({2, 3}, {1, 2, 3, 4, 5, 6}));
  Output y = ops::constant(vec({}, {-1}));
  expect_tensor(run1(ops::where(c, x, y)), {2, 3}, {1, -1, 3, 4, -1, 6});
}
SPIRE_FORWARD_TEST(Cast, Values) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::constant(vec({4}, {1.7, -1.7, 0, 3}));
  Tensor i = run1(ops::cast(x, DType::I32));
  EXPECT_EQ(i.dtype(), DType::I32);
  expect_tensor(i, {4}, {1, -1, 0, 3});
  expect_tensor(run1(ops::cast(x, DType::Bool)), {4}, {1, 1, 0, 1});
  expect_tensor(run1(ops::cast(x, DType::F64)), {4}, {1.7, -1.7, 0, 3}, 1e-6);
}
// A floating value out of an integer type's range (or NaN, or infinite)
// saturates (NaN gives 0), as CUDA's conversions do; C++'s static_cast
// would be undefined (UBSan reports it). Also from f16 storage.
SPIRE_FORWARD_TEST(Cast, FloatToIntegerSaturates) {
  Graph g;
  DefaultGraphGuard guard(g);
  const double inf = std::numeric_limits<double>::infinity();
  Output x = ops::constant(Tensor::from_vector<float>(
      {7}, {static_cast<float>(inf), static_cast<float>(-inf), std::nanf(""), 3e9f, -3e9f, 2.9f, -2.9f}));
  Tensor i32 = run1(ops::cast(x, DType::I32));
  const int32_t big = std::numeric_limits<int32_t>::max(), small = std::numeric_limits<int32_t>::min();
  EXPECT_EQ(i32.to_vector<int32_t>(), (std::vector<int32_t>{big, small, 0, big, small, 2, -2}));
  Tensor i64 = run1(ops::cast(ops::cast(x, DType::F64), DType::I64));
  const int64_t big64 = std::numeric_limits<int64_t>::max(), small64 = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(i64.to_vector<int64_t>(),
            (std::vector<int64_t>{big64, small64, 0, 3000000000, -3000000000, 2, -2}));
  Tensor from_half = run1(ops::cast(ops::cast(x, DType::F16), DType::I32));
  EXPECT_EQ(from_half.to_vector<int32_t>(), (std::vector<int32_t>{big, small, 0, big, small, 2, -2}));
}
SPIRE_FORWARD_TEST(SumToLike, Values) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::constant(vec({2, 3}, {1, 2, 3, 4, 5, 6}));
  expect_tensor(run1(ops::sum_to_like(x, ops::constant(vec({3}, {0, 0, 0})))), {3}, {5, 7, 9});
  expect_tensor(run1(ops::sum_to_like(x, ops::constant(vec({2, 1}, {0, 0})))), {2, 1}, {6, 15});
  expect_tensor(run1(ops::sum_to_like(x, ops::constant(vec({}, {0})))), {}, {21});
}
SPIRE_FORWARD_TEST(BroadcastLike, Values) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output like = ops::constant(vec({2, 3}, {0, 0, 0, 0, 0, 0}));
  expect_tensor(run1(ops::broadcast_like(ops::constant(vec({2, 1}, {1, 2})), like)), {2, 3},
                {1, 1, 1, 2, 2, 2});
}

}  // namespace
}  // namespace spire::testing
