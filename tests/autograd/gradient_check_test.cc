// The registry-driven gradient check: every op registered with a gradient
// function must have at least one GradCase, and every case's analytic
// gradients must match central finite differences in f64 (and, for cases
// marked second_order, the gradient of the gradient too).
#include <cmath>
#include <set>

#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

// Sum over outputs of <w_k, out_k> evaluated for given input tensors.
double weighted_sum(Session& s, const std::vector<Output>& outs, const std::vector<Tensor>& ws,
                    const std::vector<Output>& phs, const std::vector<Tensor>& ins) {
  FeedDict feeds;
  for (size_t i = 0; i < phs.size(); ++i) feeds.push_back({phs[i], ins[i]});
  auto vals = s.run(outs, feeds);
  double acc = 0;
  for (size_t k = 0; k < vals.size(); ++k) {
    const Tensor& v = vals[k];
    if (!is_floating(v.dtype())) continue;
    for (int64_t j = 0; j < v.num_elements(); ++j) acc += v.element_as_double(j) * ws[k].data<double>()[j];
  }
  return acc;
}

void check_case(const GradCase& c) {
  SCOPED_TRACE(c.op + " / " + c.name);
  std::mt19937_64 rng(std::hash<std::string>{}(c.op + c.name));
  Graph g;
  DefaultGraphGuard guard(g);
  std::vector<Output> phs;
  std::vector<Tensor> ins;
  std::uniform_real_distribution<double> u(-2, 2);
  for (size_t i = 0; i < c.shapes.size(); ++i) {
    phs.push_back(ops::placeholder(DType::F64, c.shapes[i], "x" + std::to_string(i)));
    Tensor t(DType::F64, c.shapes[i]);
    for (int64_t j = 0; j < t.num_elements(); ++j)
      t.data<double>()[j] = c.sample ? c.sample(static_cast<int>(i), rng) : u(rng);
    ins.push_back(t);
  }
  std::vector<Output> outs = c.build(phs);
  ASSERT_FALSE(outs.empty());
  bool covers = false;
  for (const auto& n : g.nodes()) covers = covers || n->op_type() == c.op;
  ASSERT_TRUE(covers) << "the case does not build a node of op " << c.op;

  std::vector<Tensor> ws;
  std::vector<Output> wconst;
  std::vector<Output> float_outs;
  for (const auto& o : outs) {
    ASSERT_TRUE(o.shape().is_fully_defined()) << "case outputs need static shapes";
    if (!is_floating(o.dtype())) continue;
    Tensor w = random_tensor(DType::F64, o.shape(), rng, -1, 1);
    ws.push_back(w);
    wconst.push_back(ops::constant(w));
    float_outs.push_back(o);
  }
  ASSERT_FALSE(float_outs.empty());
  std::vector<Output> grads = gradients(float_outs, phs, wconst);

  SessionOptions options;
  options.num_cpu_devices = c.cpu_devices;
  Session s(g, options);
  FeedDict feeds;
  for (size_t i = 0; i < phs.size(); ++i) feeds.push_back({phs[i], ins[i]});
  std::vector<Output> valid_grads;
  for (const auto& gr : grads)
    if (gr.valid()) valid_grads.push_back(gr);
  auto gvals = s.run(valid_grads, feeds);

  const double eps = c.eps;
  size_t vi = 0;
  for (size_t i = 0; i < phs.size(); ++i) {
    Tensor analytic;
    if (grads[i].valid()) analytic = gvals[vi++];
    for (int64_t j = 0; j < ins[i].num_elements(); ++j) {
      std::vector<Tensor> plus = ins, minus = ins;
      plus[i] = ins[i].clone();
      minus[i] = ins[i].clone();
      plus[i].data<double>()[j] += eps;
      minus[i].data<double>()[j] -= eps;
      double numeric = (weighted_sum(s, float_outs, ws, phs, plus) -
                        weighted_sum(s, float_outs, ws, phs, minus)) / (2 * eps);
      double a = analytic.defined() ? analytic.data<double>()[j] : 0.0;
      EXPECT_NEAR(a, numeric, c.tol * (1 + std::abs(numeric)))
          << "d/d input " << i << " element " << j;
    }
  }

  if (!c.second_order) return;
  // Second order: h = d/dx <v, g(x)> compared with finite differences of g.
  std::vector<Output> gs, vconst;
  std::vector<Tensor> vs;
  for (const auto& gr : grads) {
    if (!gr.valid()) continue;
    Tensor v = random_tensor(DType::F64, gr.shape(), rng, -1, 1);
    vs.push_back(v);
    vconst.push_back(ops::constant(v));
    gs.push_back(gr);
  }
  std::vector<Output> hs = gradients(gs, phs, vconst);
  Session s2(g, options);
  for (size_t i = 0; i < phs.size(); ++i) {
    Tensor analytic;
    if (hs[i].valid()) analytic = s2.run({hs[i]}, feeds)[0];
    for (int64_t j = 0; j < ins[i].num_elements(); ++j) {
      std::vector<Tensor> plus = ins, minus = ins;
      plus[i] = ins[i].clone();
      minus[i] = ins[i].clone();
      plus[i].data<double>()[j] += eps;
      minus[i].data<double>()[j] -= eps;
      double numeric = (weighted_sum(s2, gs, vs, phs, plus) - weighted_sum(s2, gs, vs, phs, minus)) /
                       (2 * eps);
      double a = analytic.defined() ? analytic.data<double>()[j] : 0.0;
      EXPECT_NEAR(a, numeric, 1e-5 * (1 + std::abs(numeric)))
          << "second order, d/d input " << i << " element " << j;
    }
  }
}

TEST(GradientCheck, EveryDifferentiableOpHasACase) {
  std::set<std::string> covered;
  for (const auto& c : grad_cases()) covered.insert(c.op);
  for (const auto& name : OpRegistry::global().op_names()) {
    const OpDef& def = OpRegistry::global().get(name);
    if (def.differentiable())
      EXPECT_TRUE(covered.count(name)) << "op " << name
                                       << " has a gradient function but no gradient-check case";
  }
}

TEST(GradientCheck, AllCases) {
  ASSERT_FALSE(grad_cases().empty());
  for (const auto& c : grad_cases()) check_case(c);
}

TEST(ForwardCoverage, EveryOpHasAForwardTest) {
  std::set<std::string> covered(forward_covered_ops().begin(), forward_covered_ops().end());
  for (const auto& name : OpRegistry::global().op_names())
    EXPECT_TRUE(covered.count(name)) << "op " << name << " has no forward test (SPIRE_FORWARD_TEST)";
}

}  // namespace
}  // namespace spire::testing
