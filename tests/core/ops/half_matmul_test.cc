// Forward tests of the f16 / bf16 MatMul and BatchMatMul CPU kernels
// (kernels/cpu/matmul_kernels.cc): the 16-bit product equals the f32 GEMM of
// the widened inputs rounded once to the 16-bit dtype (bit for bit, where the
// kernel widens: not a bf16 MatMul on a CPU with AVX512-BF16, whose own GEMM
// sums the same products in another order), and lies
// within half an epsilon of the dtype (plus f32 summation error) of the exact
// product computed here in f64. Also the shape function's dtype checks.
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/gemm_bf16.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

// Machine epsilon of a 16-bit dtype (docs: f16 2^-10, bf16 2^-7).
double epsilon(DType dt) { return dt == DType::F16 ? 0x1p-10 : 0x1p-7; }

struct Product {
  Tensor low;      // the 16-bit kernel's product, as f32
  Tensor rounded;  // the f32 product of the widened inputs, rounded to the 16-bit dtype, as f32
  Tensor a, b;     // the 16-bit inputs, as f64 (exact)
};

// Random f32 inputs in [-2, 2], cast to `dt`; `mm` builds the product of two operands.
Product run_product(DType dt, const Shape& sa, const Shape& sb,
                    const std::function<Output(const Output&, const Output&)>& mm, uint64_t seed) {
  Graph g;
  DefaultGraphGuard guard(g);
  std::mt19937_64 rng(seed);
  Output a = ops::cast(ops::constant(random_tensor(DType::F32, sa, rng, -2, 2)), dt);
  Output b = ops::cast(ops::constant(random_tensor(DType::F32, sb, rng, -2, 2)), dt);
  Output low = mm(a, b);
  EXPECT_EQ(low.dtype(), dt);
  Output rounded = ops::cast(mm(ops::cast(a, DType::F32), ops::cast(b, DType::F32)), dt);
  std::vector<Tensor> r = run({ops::cast(low, DType::F32), ops::cast(rounded, DType::F32),
                               ops::cast(a, DType::F64), ops::cast(b, DType::F64)});
  return {r[0], r[1], r[2], r[3]};
}

// a [m, k] (or [k, m] when ta) times b [k, n] (or [n, k]) in f64: the exact product and
// the sum of |a_i b_i| per output element.
void reference(bool ta, bool tb, int64_t m, int64_t k, int64_t n, const double* pa,
               const double* pb, std::vector<double>* exact, std::vector<double>* mag) {
  exact->assign(static_cast<size_t>(m * n), 0.0);
  mag->assign(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) {
        const double x = ta ? pa[p * m + i] : pa[i * k + p];
        const double y = tb ? pb[j * k + p] : pb[p * n + j];
        (*exact)[static_cast<size_t>(i * n + j)] += x * y;
        (*mag)[static_cast<size_t>(i * n + j)] += std::fabs(x * y);
      }
}

void expect_close_to_exact(DType dt, const float* got, const std::vector<double>& exact,
                           const std::vector<double>& mag, const std::string& what) {
  for (size_t i = 0; i < exact.size(); ++i) {
    // One rounding to the 16-bit dtype (half an epsilon, relative) after an f32 sum.
    const double tol = 0.5 * epsilon(dt) * std::fabs(exact[i]) + 1e-6 * mag[i];
    ASSERT_NEAR(got[i], exact[i], tol) << what << " element " << i;
  }
}

class HalfMatMul : public ::testing::TestWithParam<DType> {};

TEST_P(HalfMatMul, MatMulIsTheRoundedF32ProductForEveryTranspose) {
  const DType dt = GetParam();
  const int64_t m = 37, k = 70, n = 19;
  for (int t = 0; t < 4; ++t) {
    const bool ta = (t & 1) != 0, tb = (t & 2) != 0;
    const Shape sa = ta ? Shape{k, m} : Shape{m, k};
    const Shape sb = tb ? Shape{n, k} : Shape{k, n};
    Product p = run_product(
        dt, sa, sb, [&](const Output& x, const Output& y) { return ops::matmul(x, y, ta, tb); },
        100 + static_cast<uint64_t>(t));
    const std::string what = std::string(dtype_name(dt)) + " transpose " + std::to_string(t);
    ASSERT_EQ(p.low.shape(), (Shape{m, n})) << what;
    const float* got = p.low.data<float>();
    const float* want = p.rounded.data<float>();
    if (dt == DType::F16 || !cpu::gemm_bf16_supported())
      for (int64_t i = 0; i < m * n; ++i) ASSERT_EQ(got[i], want[i]) << what << " element " << i;
    std::vector<double> exact, mag;
    reference(ta, tb, m, k, n, p.a.data<double>(), p.b.data<double>(), &exact, &mag);
    expect_close_to_exact(dt, got, exact, mag, what);
    // The product is not exact in the 16-bit dtype: rounding happened (the test can tell).
    int inexact = 0;
    for (size_t i = 0; i < exact.size(); ++i) inexact += got[i] != static_cast<float>(exact[i]);
    EXPECT_GT(inexact, 0) << what;
  }
}

TEST_P(HalfMatMul, BatchMatMulIsTheRoundedF32ProductWithBroadcasting) {
  const DType dt = GetParam();
  struct Case {
    Shape a, b;
    bool adj_a, adj_b;
  };
  const Case cases[] = {
      {{3, 5, 9}, {3, 9, 4}, false, false},     // equal batches
      {{3, 9, 5}, {3, 4, 9}, true, true},       // both adjoint
      {{2, 1, 5, 9}, {3, 9, 4}, false, false},  // batch dims broadcast on both sides
      {{4, 5, 9}, {9, 4}, false, false},        // shared b: one tall GEMM
  };
  uint64_t seed = 200;
  for (const Case& c : cases) {
    const std::string what =
        std::string(dtype_name(dt)) + " " + c.a.to_string() + " @ " + c.b.to_string();
    Product p = run_product(
        dt, c.a, c.b,
        [&](const Output& x, const Output& y) { return ops::batch_matmul(x, y, c.adj_a, c.adj_b); },
        seed++);
    const int64_t n = p.low.num_elements();
    ASSERT_EQ(n, p.rounded.num_elements()) << what;
    ASSERT_GT(n, 0) << what;
    const float* got = p.low.data<float>();
    const float* want = p.rounded.data<float>();
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], want[i]) << what << " element " << i;
  }
  // One entry of the broadcast case against the exact product: entry (1, 2) of the
  // [2, 3] batch is a[1, 0] @ b[2].
  Product p = run_product(
      dt, {2, 1, 5, 9}, {3, 9, 4},
      [](const Output& x, const Output& y) { return ops::batch_matmul(x, y); }, 300);
  std::vector<double> exact, mag;
  reference(false, false, 5, 9, 4, p.a.data<double>() + 1 * 5 * 9,
            p.b.data<double>() + 2 * 9 * 4, &exact, &mag);
  expect_close_to_exact(dt, p.low.data<float>() + (1 * 3 + 2) * 5 * 4, exact, mag,
                        "broadcast entry (1, 2)");
}

TEST_P(HalfMatMul, GradientsRunInTheSameDtype) {
  const DType dt = GetParam();
  Graph g;
  DefaultGraphGuard guard(g);
  std::mt19937_64 rng(7);
  Output a = ops::cast(ops::constant(random_tensor(DType::F32, {4, 6}, rng, -2, 2)), dt);
  Output b = ops::cast(ops::constant(random_tensor(DType::F32, {6, 3}, rng, -2, 2)), dt);
  Output loss = ops::sum(ops::cast(ops::matmul(a, b), DType::F32));
  std::vector<Output> grads = gradients({loss}, {a, b});
  ASSERT_EQ(grads[0].dtype(), dt);
  ASSERT_EQ(grads[1].dtype(), dt);
  // d sum(a b) / da = 1 b^T: each row of the gradient holds the row sums of b.
  std::vector<Tensor> r = run({ops::cast(grads[0], DType::F64), ops::cast(b, DType::F64)});
  const double* ga = r[0].data<double>();
  const double* pb = r[1].data<double>();
  for (int i = 0; i < 4; ++i)
    for (int p = 0; p < 6; ++p) {
      double s = 0;
      for (int j = 0; j < 3; ++j) s += pb[p * 3 + j];
      EXPECT_NEAR(ga[i * 6 + p], s, epsilon(dt) * (std::fabs(s) + 1e-3)) << i << "," << p;
    }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, HalfMatMul, ::testing::Values(DType::F16, DType::BF16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(dtype_name(info.param));
                         });

TEST(HalfMatMulShape, MixedAndIntegerDtypesAreRejected) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output h = ops::placeholder(DType::F16, {2, 2});
  Output bf = ops::placeholder(DType::BF16, {2, 2});
  Output i = ops::placeholder(DType::I32, {2, 2});
  expect_error([&] { ops::matmul(h, bf); }, {"MatMul", "f16", "bf16"});
  expect_error([&] { ops::matmul(i, i); }, {"MatMul", "i32"});
  expect_error([&] { ops::batch_matmul(bf, h); }, {"BatchMatMul", "bf16", "f16"});
}

}  // namespace
}  // namespace spire::testing
