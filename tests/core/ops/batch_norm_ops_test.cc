// Forward tests of FusedBatchNorm and FusedBatchNormGrad (core/ops/batch_norm_ops.cc)
// against hand-computed values: x [4, 2] channels last (and the same data on
// axis 0 of its transpose), in f32 and f64.
#include <cmath>

#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

Tensor vec(const Shape& s, const std::vector<double>& v, DType dt) {
  Tensor t(dt, s);
  for (size_t i = 0; i < v.size(); ++i)
    visit_dtype(dt, "vec", [&](auto z) { t.data<decltype(z)>()[i] = static_cast<decltype(z)>(v[i]); });
  return t;
}

Tensor run1(const Output& o) {
  Session s(*o.graph());
  return s.run({o})[0];
}

// x columns: channel 0 = {1, 2, 3, 6} (mean 3, var 3.5), channel 1 = {-1, 1, -1, 1}
// (mean 0, var 1); gamma {2, 0.5}, beta {1, -1}, eps 0.5.
const std::vector<double> kX = {1, -1, 2, 1, 3, -1, 6, 1};
const std::vector<double> kXt = {1, 2, 3, 6, -1, 1, -1, 1};  // [2, 4]: channels on axis 0

std::vector<double> expected_y() {
  std::vector<double> y(8);
  const double mean[2] = {3, 0}, var[2] = {3.5, 1}, gamma[2] = {2, 0.5}, beta[2] = {1, -1};
  for (int i = 0; i < 8; ++i) {
    const int c = i % 2;
    y[static_cast<size_t>(i)] = (kX[static_cast<size_t>(i)] - mean[c]) / std::sqrt(var[c] + 0.5) * gamma[c] + beta[c];
  }
  return y;
}

SPIRE_FORWARD_TEST(FusedBatchNorm, ChannelsLastAndAxis0) {
  for (DType dt : {DType::F32, DType::F64}) {
    const double tol = dt == DType::F32 ? 1e-6 : 1e-14;
    Graph g;
    DefaultGraphGuard guard(g);
    Output gamma = ops::constant(vec({2}, {2, 0.5}, dt));
    Output beta = ops::constant(vec({2}, {1, -1}, dt));
    auto r = ops::fused_batch_norm(ops::constant(vec({4, 2}, kX, dt)), gamma, beta, 0.5);
    Session s(g);
    std::vector<Tensor> out = s.run({r.y, r.mean, r.variance});
    expect_tensor(out[0], {4, 2}, expected_y(), tol);
    expect_tensor(out[1], {2}, {3, 0}, tol);
    expect_tensor(out[2], {2}, {3.5, 1}, tol);
    auto rt = ops::fused_batch_norm(ops::constant(vec({2, 4}, kXt, dt)), gamma, beta, 0.5, 0);
    std::vector<double> yt(8), y = expected_y();
    for (int n = 0; n < 4; ++n)
      for (int c = 0; c < 2; ++c) yt[static_cast<size_t>(c * 4 + n)] = y[static_cast<size_t>(n * 2 + c)];
    expect_tensor(run1(rt.y), {2, 4}, yt, tol);
  }
}

// dy = {1, 0, 0, 2, -1, 0, 2, -2}: per channel, with xc = x - mean and r = 1/sqrt(var + eps):
// dbeta = S(dy), dgamma = r S(dy xc), dx = gamma r (dy - dbeta/n - xc r^2 S(dy xc)/n).
SPIRE_FORWARD_TEST(FusedBatchNormGrad, AgainstTheFormula) {
  const std::vector<double> dy = {1, 0, 0, 2, -1, 0, 2, -2};
  const double mean[2] = {3, 0}, var[2] = {3.5, 1}, gamma[2] = {2, 0.5};
  std::vector<double> dx(8), dgamma(2), dbeta(2);
  for (int c = 0; c < 2; ++c) {
    const double r = 1 / std::sqrt(var[c] + 0.5);
    double sdy = 0, sdyx = 0;
    for (int n = 0; n < 4; ++n) {
      const size_t i = static_cast<size_t>(n * 2 + c);
      sdy += dy[i];
      sdyx += dy[i] * (kX[i] - mean[c]);
    }
    dbeta[static_cast<size_t>(c)] = sdy;
    dgamma[static_cast<size_t>(c)] = r * sdyx;
    for (int n = 0; n < 4; ++n) {
      const size_t i = static_cast<size_t>(n * 2 + c);
      dx[i] = gamma[c] * r * (dy[i] - sdy / 4 - (kX[i] - mean[c]) * r * r * sdyx / 4);
    }
  }
  for (DType dt : {DType::F32, DType::F64}) {
    const double tol = dt == DType::F32 ? 1e-6 : 1e-14;
    Graph g;
    DefaultGraphGuard guard(g);
    std::vector<Output> r = ops::fused_batch_norm_grad(
        ops::constant(vec({4, 2}, dy, dt)), ops::constant(vec({4, 2}, kX, dt)),
        ops::constant(vec({2}, {2, 0.5}, dt)), ops::constant(vec({2}, {3, 0}, dt)),
        ops::constant(vec({2}, {3.5, 1}, dt)), 0.5, -1);
    Session s(g);
    std::vector<Tensor> out = s.run(r);
    expect_tensor(out[0], {4, 2}, dx, tol);
    expect_tensor(out[1], {2}, dgamma, tol);
    expect_tensor(out[2], {2}, dbeta, tol);
  }
}

}  // namespace
}  // namespace spire::testing
