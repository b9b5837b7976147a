// Tests of layers/optimizers.h: each optimizer's variable values after a few
// steps against references computed here with plain loops (f64), Nesterov,
// learning-rate changes between steps, slot names and collections, the
// global step, global-norm clipping and gradient processors, two-tower
// gradients and average_grads, the error messages, and the fused update
// ops (same bits as the per-variable graphs on the CPU).
#include <algorithm>
#include <cmath>
#include <random>

#include "layers/optimizers.h"
#include "layers/tower.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

// A quadratic loss with a known gradient over two f64 variables:
//   loss = 0.5 * sum(a * w * w) + sum(b * w) + 1.5 * u * u - u
//   dloss/dw = a * w + b,  dloss/du = 3 u - 1.
class OptimizerTest : public ::testing::Test {
 protected:
  Graph g;
  DefaultGraphGuard guard{g};
  const std::vector<double> a{1.0, 2.0, 0.5, 3.0}, b{0.5, -1.0, 2.0, 0.25};
  const std::vector<double> w0{1.0, -2.0, 0.5, 3.0};
  const double u0 = 2.0;
  Output w, u, loss;

  void SetUp() override {
    w = get_variable("w", {2, 2}, DType::F64, init::zeros());
    u = get_variable("u", {}, DType::F64, init::zeros());
    Output ac = ops::constant(Tensor::from_vector<double>({2, 2}, a));
    Output bc = ops::constant(Tensor::from_vector<double>({2, 2}, b));
    loss = ops::sum(ac * w * w) * 0.5 + ops::sum(bc * w) + u * u * 1.5 - u;
  }

  // Parameters as one flat vector: w's 4 values then u.
  std::vector<double> initial() const {
    std::vector<double> p = w0;
    p.push_back(u0);
    return p;
  }
  std::vector<double> grad(const std::vector<double>& p) const {
    std::vector<double> gr(5);
    for (int i = 0; i < 4; ++i) gr[i] = a[i] * p[i] + b[i];
    gr[4] = 3 * p[4] - 1;
    return gr;
  }

  // Initializes all variables and sets w, u to their starting values.
  void init_session(Session& s) {
    s.run_targets({global_variables_initializer()});
    s.set_variable_value(w.node, Tensor::from_vector<double>({2, 2}, w0));
    s.set_variable_value(u.node, Tensor::scalar<double>(u0));
  }
  std::vector<double> params(Session& s) const {
    std::vector<double> p = s.variable_value(w.node).to_vector<double>();
    p.push_back(s.variable_value(u.node).item<double>());
    return p;
  }
  void expect_params(Session& s, const std::vector<double>& want, double tol = 1e-12) const {
    std::vector<double> got = params(s);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i], want[i], tol) << "parameter " << i;
  }
};

TEST_F(OptimizerTest, GradientDescentThreeSteps) {
  GradientDescentOptimizer opt(0.1);  // the f32 learning_rate variable holds float(0.1)
  Node* train = opt.minimize(loss);
  EXPECT_EQ(train->name(), "GradientDescent");
  Session s(g);
  init_session(s);
  const double lr = static_cast<double>(0.1f);
  std::vector<double> p = initial();
  for (int step = 0; step < 3; ++step) {
    s.run_targets({train});
    std::vector<double> gr = grad(p);
    for (size_t i = 0; i < p.size(); ++i) p[i] -= lr * gr[i];
    expect_params(s, p);
  }
}

TEST_F(OptimizerTest, ExplicitLearningRateOutput) {
  Output lr = ops::scalar(0.3, DType::F64);
  GradientDescentOptimizer opt(lr);
  EXPECT_EQ(opt.learning_rate(), lr);
  Node* train = opt.minimize(loss);
  Session s(g);
  init_session(s);
  std::vector<double> p = initial();
  for (int step = 0; step < 3; ++step) {
    s.run_targets({train});
    std::vector<double> gr = grad(p);
    for (size_t i = 0; i < p.size(); ++i) p[i] -= 0.3 * gr[i];
  }
  expect_params(s, p);
}

void momentum_reference(std::vector<double>& p, std::vector<double>& acc,
                        const std::vector<double>& gr, double lr, double m, bool nesterov) {
  for (size_t i = 0; i < p.size(); ++i) {
    acc[i] = acc[i] * m + gr[i];
    p[i] -= nesterov ? lr * (gr[i] + m * acc[i]) : lr * acc[i];
  }
}

TEST_F(OptimizerTest, MomentumThreeSteps) {
  MomentumOptimizer opt(0.125, 0.9);
  Node* train = opt.minimize(loss);
  Session s(g);
  init_session(s);
  std::vector<double> p = initial(), acc(5, 0.0);
  for (int step = 0; step < 3; ++step) {
    s.run_targets({train});
    momentum_reference(p, acc, grad(p), 0.125, 0.9, false);
    expect_params(s, p);
  }
  std::vector<double> got_acc = s.variable_value(opt.get_slot(w, "Momentum").node).to_vector<double>();
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(got_acc[i], acc[i], 1e-12);
}

TEST_F(OptimizerTest, MomentumNesterovThreeSteps) {
  MomentumOptimizer opt(0.125, 0.75, /*use_nesterov=*/true);
  Node* train = opt.minimize(loss);
  Session s(g);
  init_session(s);
  std::vector<double> p = initial(), acc(5, 0.0);
  for (int step = 0; step < 3; ++step) {
    s.run_targets({train});
    momentum_reference(p, acc, grad(p), 0.125, 0.75, true);
    expect_params(s, p);
  }
}

TEST_F(OptimizerTest, AdamThreeSteps) {
  const double lr = 0.125, b1 = 0.9, b2 = 0.999, eps = 1e-8;
  AdamOptimizer opt(lr, b1, b2, eps);
  Node* train = opt.minimize(loss);
  Session s(g);
  init_session(s);
  std::vector<double> p = initial(), m(5, 0.0), v(5, 0.0);
  for (int t = 1; t <= 3; ++t) {
    s.run_targets({train});
    std::vector<double> gr = grad(p);
    double lr_t = lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
    for (size_t i = 0; i < p.size(); ++i) {
      m[i] = b1 * m[i] + (1 - b1) * gr[i];
      v[i] = b2 * v[i] + (1 - b2) * gr[i] * gr[i];
      p[i] -= lr_t * m[i] / (std::sqrt(v[i]) + eps);
    }
    expect_params(s, p);
    EXPECT_NEAR(s.variable_value(opt.beta1_power().node).item<double>(), std::pow(b1, t + 1),
                1e-15);
    EXPECT_NEAR(s.variable_value(opt.beta2_power().node).item<double>(), std::pow(b2, t + 1),
                1e-15);
  }
  std::vector<double> gm = s.variable_value(opt.get_slot(w, "Adam").node).to_vector<double>();
  std::vector<double> gv = s.variable_value(opt.get_slot(w, "Adam_1").node).to_vector<double>();
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(gm[i], m[i], 1e-12);
    EXPECT_NEAR(gv[i], v[i], 1e-12);
  }
}

TEST_F(OptimizerTest, AdamWThreeStepsMatchesPyTorch) {
  const double lr = 0.125, wd = 0.25, b1 = 0.8, b2 = 0.99, eps = 1e-6;
  AdamWOptimizer opt(lr, wd, b1, b2, eps);
  Node* train = opt.minimize(loss);
  EXPECT_EQ(train->name(), "AdamW");
  Session s(g);
  init_session(s);
  std::vector<double> p = initial(), m(5, 0.0), v(5, 0.0);
  for (int t = 1; t <= 3; ++t) {
    s.run_targets({train});
    std::vector<double> gr = grad(p);
    // torch.optim.AdamW.
    double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
    for (size_t i = 0; i < p.size(); ++i) {
      p[i] *= 1 - lr * wd;
      m[i] = b1 * m[i] + (1 - b1) * gr[i];
      v[i] = b2 * v[i] + (1 - b2) * gr[i] * gr[i];
      double denom = std::sqrt(v[i]) / std::sqrt(bc2) + eps;
      p[i] -= lr / bc1 * m[i] / denom;
    }
    expect_params(s, p);
  }
}

TEST_F(OptimizerTest, F32VariablesWork) {
  Output x = get_variable("x32", {3}, DType::F32, init::constant(1.0));
  Output l = ops::sum(ops::square(x - ops::constant(Tensor::from_vector<float>({3}, {0, 2, 4}))));
  AdamOptimizer opt(0.25);
  Node* train = opt.minimize(l, {}, {x});
  EXPECT_EQ(opt.beta1_power().dtype(), DType::F32);
  Session s(g);
  s.run_targets({global_variables_initializer()});
  s.run_targets({train});
  // First Adam step moves every coordinate by about lr against the gradient's sign.
  expect_tensor(s.variable_value(x.node), {3}, {0.75, 1.25, 1.25}, 1e-5);
}

TEST_F(OptimizerTest, MixedDtypeVariablesAndLearningRateCast) {
  Output x = get_variable("x32", {2}, DType::F32, init::constant(1.0));
  Output l = loss + ops::cast(ops::sum(ops::square(x)), DType::F64);
  MomentumOptimizer opt(0.125, 0.5);
  Node* train = opt.minimize(l);
  Session s(g);
  init_session(s);
  s.run_targets({train});
  s.run_targets({train});
  // x: acc1 = 2, x = 0.75; acc2 = 0.5*2 + 1.5 = 2.5, x = 0.75 - 0.3125.
  expect_tensor(s.variable_value(x.node), {2}, {0.4375, 0.4375}, 1e-7);
}

TEST_F(OptimizerTest, LearningRateChangeTakesEffectOnNextStep) {
  GradientDescentOptimizer opt(0.125);
  Output lr = opt.learning_rate();
  EXPECT_EQ(lr.node->name(), "learning_rate");
  EXPECT_EQ(lr.dtype(), DType::F32);
  EXPECT_EQ(lr.shape().rank(), 0);
  Node* train = opt.minimize(loss);
  Output set_lr = ops::assign(lr, ops::scalar(0.25, DType::F32));
  Session s(g);
  init_session(s);
  std::vector<double> p = initial();
  auto reference_step = [&](double r) {
    std::vector<double> gr = grad(p);
    for (size_t i = 0; i < p.size(); ++i) p[i] -= r * gr[i];
  };
  s.run_targets({train});
  reference_step(0.125);
  expect_params(s, p);
  s.set_variable_value(lr.node, Tensor::scalar<float>(0.5f));  // a callback's direct set
  s.run_targets({train});
  reference_step(0.5);
  expect_params(s, p);
  s.run({set_lr});  // or an assign op
  s.run_targets({train});
  reference_step(0.25);
  expect_params(s, p);
}

TEST_F(OptimizerTest, LearningRateVariableIsSharedAndNonTrainable) {
  GradientDescentOptimizer a(0.125);
  MomentumOptimizer b(0.5, 0.9);
  EXPECT_EQ(a.learning_rate(), b.learning_rate());
  const std::vector<Output> trainable = trainable_variables();
  const std::vector<Output> global = global_variables();
  EXPECT_EQ(std::count(trainable.begin(), trainable.end(), a.learning_rate()), 0);
  EXPECT_EQ(std::count(global.begin(), global.end(), a.learning_rate()), 1);
}

TEST_F(OptimizerTest, SlotNamesAndCollections) {
  Output nw;
  {
    VariableScopeGuard vs("net");
    nw = get_variable("w", {3}, DType::F64, init::ones());
  }
  Output l2 = loss + ops::sum(ops::square(nw));
  MomentumOptimizer mom(0.125, 0.9);
  AdamOptimizer adam(0.125);
  Node* t1 = nullptr;
  Node* t2 = nullptr;
  {
    // Slot names do not depend on the scopes apply_gradients is called in.
    VariableScopeGuard vs("outer");
    NameScope ns("inner");
    t1 = mom.minimize(l2);
    t2 = adam.minimize(l2);
  }
  EXPECT_EQ(mom.get_slot(w, "Momentum").node->name(), "w/Momentum");
  EXPECT_EQ(mom.get_slot(nw, "Momentum").node->name(), "net/w/Momentum");
  EXPECT_EQ(adam.get_slot(w, "Adam").node->name(), "w/Adam");
  EXPECT_EQ(adam.get_slot(w, "Adam_1").node->name(), "w/Adam_1");
  EXPECT_EQ(adam.get_slot(nw, "Adam").node->name(), "net/w/Adam");
  EXPECT_EQ(adam.get_slot(nw, "Adam_1").node->name(), "net/w/Adam_1");
  EXPECT_EQ(adam.get_slot(u, "Adam").node->name(), "u/Adam");
  EXPECT_EQ(adam.beta1_power().node->name(), "beta1_power");
  EXPECT_EQ(adam.beta2_power().node->name(), "beta2_power");
  EXPECT_FALSE(mom.get_slot(w, "Adam").valid());
  EXPECT_EQ(adam.get_slot_names(), (std::vector<std::string>{"Adam", "Adam_1"}));
  EXPECT_EQ(t1->name(), "outer/inner/Momentum");
  EXPECT_EQ(t2->name(), "outer/inner/Adam");

  const std::vector<Output> trainable = trainable_variables();
  const std::vector<Output> global = global_variables();
  std::vector<Output> slots = {mom.get_slot(w, "Momentum"), mom.get_slot(nw, "Momentum"),
                               mom.get_slot(u, "Momentum"), adam.get_slot(w, "Adam"),
                               adam.get_slot(w, "Adam_1"),  adam.get_slot(nw, "Adam_1"),
                               adam.beta1_power(),          adam.beta2_power()};
  for (const Output& sl : slots) {
    EXPECT_EQ(std::count(global.begin(), global.end(), sl), 1) << sl.name();
    EXPECT_EQ(std::count(trainable.begin(), trainable.end(), sl), 0) << sl.name();
    EXPECT_FALSE(variable_of(sl).trainable);
    EXPECT_EQ(sl.dtype(), DType::F64);
  }
  EXPECT_EQ(trainable.size(), 3u);  // w, u, net/w

  // global_variables_initializer() zeroes the slots and sets the beta powers.
  Session s(g);
  s.run_targets({global_variables_initializer()});
  expect_tensor(s.variable_value(mom.get_slot(nw, "Momentum").node), {3}, {0, 0, 0}, 0);
  expect_tensor(s.variable_value(adam.get_slot(w, "Adam_1").node), {2, 2}, {0, 0, 0, 0}, 0);
  expect_tensor(s.variable_value(adam.beta1_power().node), {}, {0.9}, 0);
  expect_tensor(s.variable_value(adam.beta2_power().node), {}, {0.999}, 0);

  // A second optimizer of the same kind gets its own, uniquely named slots.
  MomentumOptimizer mom2(0.125, 0.5);
  mom2.minimize(loss, {}, {w});
  EXPECT_EQ(mom2.get_slot(w, "Momentum").node->name(), "w/Momentum_1");
  // The same optimizer reuses its slots in a second train op.
  mom.minimize(loss, {}, {w});
  EXPECT_EQ(mom.get_slot(w, "Momentum").node->name(), "w/Momentum");
}

TEST_F(OptimizerTest, GlobalStepIncrementsAfterUpdates) {
  Output gs = get_variable("global_step", {}, DType::I64, init::zeros(), false);
  GradientDescentOptimizer opt(0.125);
  Node* train = opt.minimize(loss, gs);
  Session s(g);
  init_session(s);
  for (int i = 1; i <= 3; ++i) {
    s.run_targets({train});
    EXPECT_EQ(s.variable_value(gs.node).item<int64_t>(), i);
  }
  std::vector<double> p = initial();
  for (int i = 0; i < 3; ++i) {
    std::vector<double> gr = grad(p);
    for (size_t k = 0; k < p.size(); ++k) p[k] -= 0.125 * gr[k];
  }
  expect_params(s, p);
}

TEST_F(OptimizerTest, UpdatesWaitForAllGradients) {
  // d/dp sum(p * q) = q and d/dq = p: each gradient reads the other
  // variable, so both must be computed before either is updated.
  Output p = get_variable("p", {2}, DType::F64, init::constant(1.0));
  Output q = get_variable("q", {2}, DType::F64, init::constant(3.0));
  GradientDescentOptimizer opt(0.125);
  Node* train = opt.minimize(ops::sum(p * q), {}, {p, q});
  Session s(g);
  s.run_targets({global_variables_initializer()});
  for (int i = 0; i < 5; ++i) s.run_targets({train});
  double pv = 1, qv = 3;
  for (int i = 0; i < 5; ++i) {
    double np = pv - 0.125 * qv, nq = qv - 0.125 * pv;
    pv = np;
    qv = nq;
  }
  expect_tensor(s.variable_value(p.node), {2}, {pv, pv}, 1e-12);
  expect_tensor(s.variable_value(q.node), {2}, {qv, qv}, 1e-12);
}

TEST_F(OptimizerTest, ComputeGradientsSkipsUnusedVariables) {
  Output unused = get_variable("unused", {2}, DType::F64, init::zeros());
  GradientDescentOptimizer opt(0.125);
  GradsAndVars gv = opt.compute_gradients(loss);
  ASSERT_EQ(gv.size(), 2u);
  EXPECT_EQ(gv[0].second, w);
  EXPECT_EQ(gv[1].second, u);
  // An invalid gradient passed to apply_gradients leaves its variable alone.
  gv.emplace_back(Output(), unused);
  Node* train = opt.apply_gradients(gv);
  Session s(g);
  init_session(s);
  s.run_targets({train});
  expect_tensor(s.variable_value(unused.node), {2}, {0, 0}, 0);
}

TEST_F(OptimizerTest, ClipByGlobalNorm) {
  Output t1 = ops::constant(Tensor::from_vector<double>({2}, {3, 4}));
  Output t2 = ops::constant(Tensor::from_vector<double>({1}, {12}));
  auto [clipped, norm] = clip_by_global_norm({t1, Output(), t2}, 6.5);
  ASSERT_EQ(clipped.size(), 3u);
  EXPECT_FALSE(clipped[1].valid());
  std::vector<Tensor> r = run({norm, clipped[0], clipped[2]});
  expect_tensor(r[0], {}, {13}, 1e-12);
  expect_tensor(r[1], {2}, {1.5, 2}, 1e-12);
  expect_tensor(r[2], {1}, {6}, 1e-12);
  // Under the threshold nothing changes.
  auto [same, norm2] = clip_by_global_norm({t1, t2}, 20.0);
  r = run({norm2, same[0], same[1]});
  expect_tensor(r[0], {}, {13}, 1e-12);
  expect_tensor(r[1], {2}, {3, 4}, 1e-12);
  expect_tensor(r[2], {1}, {12}, 1e-12);
  expect_tensor(run1(global_norm({t1, t2})), {}, {13}, 1e-12);
  expect_error([&] { clip_by_global_norm({t1}, 0.0); }, {"clip_norm", "> 0"});
  expect_error([&] { clip_by_global_norm({Output()}, 1.0); }, {"no valid tensor"});
}

TEST_F(OptimizerTest, GlobalNormClipProcessor) {
  const double clip = 1.5;
  std::shared_ptr<Optimizer> opt = apply_grad_processors(
      std::make_shared<MomentumOptimizer>(0.125, 0.5), {GlobalNormClip(clip)});
  EXPECT_EQ(opt->name(), "Momentum");
  Node* train = opt->minimize(loss);
  EXPECT_EQ(opt->get_slot(w, "Momentum").node->name(), "w/Momentum");
  Session s(g);
  init_session(s);
  std::vector<double> p = initial(), acc(5, 0.0);
  for (int step = 0; step < 3; ++step) {
    s.run_targets({train});
    std::vector<double> gr = grad(p);
    double n2 = 0;
    for (double x : gr) n2 += x * x;
    double scale = clip / std::max(std::sqrt(n2), clip);
    for (double& x : gr) x *= scale;
    momentum_reference(p, acc, gr, 0.125, 0.5, false);
    expect_params(s, p);
  }
}

TEST_F(OptimizerTest, MapGradientProcessor) {
  std::shared_ptr<Optimizer> opt = apply_grad_processors(
      std::make_shared<GradientDescentOptimizer>(0.125),
      {MapGradient([](const Output& gr, const Output&) { return gr * 2.0; })});
  Node* train = opt->minimize(loss);
  Session s(g);
  init_session(s);
  s.run_targets({train});
  std::vector<double> p = initial(), gr = grad(p);
  for (size_t i = 0; i < p.size(); ++i) p[i] -= 0.25 * gr[i];
  expect_params(s, p);
}

// A tower function: cost = sum((v * x)^2) with v the shared variable "v".
Output tower_cost(const Output& x) {
  Output v = get_variable("v", {3}, DType::F64, init::constant(0.5));
  return ops::sum(ops::square(v * x));
}

TEST(OptimizerTowers, TwoTowerGradientIsSummedAndAveraged) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::constant(Tensor::from_vector<double>({3}, {1, -2, 3}));
  Output c0, c1;
  {
    TowerContext t0("tower0", true, "", 0, 2);
    c0 = tower_cost(x);
  }
  {
    TowerContext t1("tower1", true, "", 1, 2);
    c1 = tower_cost(x);
  }
  std::vector<Output> vars = trainable_variables();
  ASSERT_EQ(vars.size(), 1u);  // tower1 reused "v"
  Output v = vars[0];
  GradientDescentOptimizer opt(0.125);
  GradsAndVars total = opt.compute_gradients(c0 + c1);
  ASSERT_EQ(total.size(), 1u);
  Output single = gradient(c0, v);
  GradsAndVars g0 = opt.compute_gradients(c0), g1 = opt.compute_gradients(c1);
  GradsAndVars avg = average_grads({g0, g1});
  GradsAndVars sum = average_grads({g0, g1}, /*average=*/false);
  ASSERT_EQ(avg.size(), 1u);
  EXPECT_EQ(avg[0].second, v);
  Session s(g);
  s.run_targets({global_variables_initializer()});
  std::vector<Tensor> r = s.run({total[0].first, single, avg[0].first, sum[0].first});
  // d/dv sum((v x)^2) = 2 v x^2 = {1, 4, 9} at v = 0.5.
  expect_tensor(r[1], {3}, {1, 4, 9}, 1e-12);
  expect_tensor(r[0], {3}, {2, 8, 18}, 1e-12);
  expect_tensor(r[2], {3}, {1, 4, 9}, 1e-12);
  expect_tensor(r[3], {3}, {2, 8, 18}, 1e-12);
  // Applying the summed gradient.
  Node* train = opt.apply_gradients(total);
  s.run_targets({train});
  expect_tensor(s.variable_value(v.node), {3}, {0.25, -0.5, -1.75}, 1e-12);

  EXPECT_EQ(average_grads({g0}).size(), 1u);
  Output other = get_variable("other", {3}, DType::F64, init::zeros());
  expect_error([&] { average_grads({g0, {{g1[0].first, other}}}); },
               {"average_grads", "'other", "same variables"});
  expect_error([&] { average_grads({g0, {}}); }, {"average_grads", "tower 1 has 0"});
}

TEST_F(OptimizerTest, Errors) {
  GradientDescentOptimizer opt(0.125);
  Output vec_loss = w * 2.0;
  expect_error([&] { opt.compute_gradients(vec_loss); }, {"GradientDescent", "loss must be a scalar", "[2, 2]"});
  Output iv = get_variable("iv", {2}, DType::I32, init::zeros(), false);
  expect_error([&] { opt.compute_gradients(loss, {w, iv}); },
               {"'iv", "i32", "not floating-point"});
  Output c = ops::scalar(1.0, DType::F64);
  expect_error([&] { opt.compute_gradients(loss, {c}); }, {"is not a variable"});
  Output other = get_variable("other", {}, DType::F64, init::zeros());
  expect_error([&] { opt.compute_gradients(ops::sum(ops::square(w)), {other}); },
               {"no gradients provided for any variable", "'other'"});
  // Gradient/variable mismatches.
  Output g3 = ops::constant(Tensor::zeros(DType::F64, {3}));
  expect_error([&] { opt.apply_gradients({{g3, w}}); },
               {"gradient", "[3]", "does not match the shape of variable", "'w:0'", "[2, 2]"});
  Output g32 = ops::constant(Tensor::zeros(DType::F32, {2, 2}));
  expect_error([&] { opt.apply_gradients({{g32, w}}); }, {"does not match the dtype", "f32", "f64"});
  Output g4 = ops::constant(Tensor::zeros(DType::F64, {2, 2}));
  expect_error([&] { opt.apply_gradients({{g4, w}, {g4, w}}); }, {"'w'", "listed twice"});
  expect_error([&] { opt.apply_gradients({{Output(), w}}); }, {"no gradients provided"});
  expect_error([&] { opt.apply_gradients({}); }, {"no (gradient, variable) pairs"});
  expect_error([&] { opt.apply_gradients({{g4, w}}, g4); }, {"global_step must be a scalar"});
  // Learning-rate dtype and shape.
  expect_error([&] { GradientDescentOptimizer bad(ops::scalar(1, DType::I32)); },
               {"learning rate must be a f32 or f64 scalar", "i32"});
  expect_error([&] { GradientDescentOptimizer bad(g4); }, {"learning rate must be a scalar"});
  // Hyper-parameters.
  expect_error([&] { AdamOptimizer bad(0.1, 1.0); }, {"beta1 must be in [0, 1)"});
  expect_error([&] { AdamWOptimizer bad(0.1, -1.0); }, {"weight_decay must be >= 0"});
  expect_error([&] { GlobalNormClip(-1.0); }, {"GlobalNormClip"});
}

// ---- fused updates -----------------------------------------------------------------------

int count_fused(const Graph& g) {
  int n = 0;
  for (const auto& node : g.nodes()) n += node->op_type().rfind("FusedApply", 0) == 0;
  return n;
}

// Trains f32 and f64 variables (two fused groups) for `steps` steps with the
// optimizer `make` builds, fused or not; returns the bytes of every global
// variable (variables, slots, beta powers) in creation order.
std::vector<std::vector<unsigned char>> train_bytes(
    const std::function<std::shared_ptr<Optimizer>()>& make, bool fused, int steps,
    int* num_fused) {
  Graph g;
  DefaultGraphGuard guard(g);
  std::mt19937_64 rng(21);
  std::vector<Output> terms;
  const std::vector<std::pair<Shape, DType>> vars = {
      {{3, 5}, DType::F32}, {{7}, DType::F64}, {{70001}, DType::F32}, {{}, DType::F64},
      {{1}, DType::F32}};
  for (size_t i = 0; i < vars.size(); ++i) {
    const auto& [shape, dt] = vars[i];
    Output v = get_variable("v" + std::to_string(i), shape, dt, init::zeros());
    Output c = ops::constant(random_tensor(dt, shape, rng, 0.5, 2));
    Output d = ops::constant(random_tensor(dt, shape, rng, -1, 1));
    Output t = ops::sum(c * v * v + d * v);
    terms.push_back(dt == DType::F64 ? t : ops::cast(t, DType::F64));
  }
  std::shared_ptr<Optimizer> opt = make();
  opt->set_use_fused_ops(fused);
  Node* train = opt->minimize(ops::add_n(terms));
  *num_fused = count_fused(g);
  Session s(g);
  s.run_targets({global_variables_initializer()});
  // Start away from zero so every term moves.
  for (size_t i = 0; i < vars.size(); ++i) {
    Output v = global_variables()[i];
    s.set_variable_value(v.node, random_tensor(v.dtype(), v.shape(), rng, -1, 1));
  }
  for (int k = 0; k < steps; ++k) s.run_targets({train});
  std::vector<std::vector<unsigned char>> out;
  for (const Output& v : global_variables()) {
    Tensor t = s.variable_value(v.node);
    const auto* p = static_cast<const unsigned char*>(t.raw_data());
    out.emplace_back(p, p + t.nbytes());
  }
  return out;
}

TEST(OptimizerFused, SameBitsAsPerVariableGraphsOnTheCpu) {
  const std::vector<std::pair<std::string, std::function<std::shared_ptr<Optimizer>()>>> makers = {
      {"sgd", [] { return std::make_shared<GradientDescentOptimizer>(0.05); }},
      {"momentum", [] { return std::make_shared<MomentumOptimizer>(0.05, 0.9); }},
      {"nesterov", [] { return std::make_shared<MomentumOptimizer>(0.05, 0.75, true); }},
      {"adam", [] { return std::make_shared<AdamOptimizer>(0.05, 0.9, 0.99, 1e-6); }},
      {"adamw", [] { return std::make_shared<AdamWOptimizer>(0.05, 0.1, 0.8, 0.99, 1e-6); }},
      {"clipped momentum", [] {
         return apply_grad_processors(std::make_shared<MomentumOptimizer>(0.05, 0.5),
                                      {GlobalNormClip(1.0)});
       }}};
  for (const auto& [name, make] : makers) {
    SCOPED_TRACE(name);
    int nf = -1, nu = -1;
    auto fused = train_bytes(make, true, 4, &nf);
    auto unfused = train_bytes(make, false, 4, &nu);
    EXPECT_EQ(nf, 2);  // one update op for the f32 variables, one for the f64 ones
    EXPECT_EQ(nu, 0);
    ASSERT_EQ(fused.size(), unfused.size());
    for (size_t i = 0; i < fused.size(); ++i) EXPECT_EQ(fused[i], unfused[i]) << "variable " << i;
  }
}

TEST_F(OptimizerTest, FusedUpdateRunsAfterAllGradientsAndBeforeTheGlobalStep) {
  Output gs = get_variable("global_step", {}, DType::I64, init::zeros(), false);
  AdamOptimizer opt(0.125);
  Node* train = opt.minimize(loss, gs);
  EXPECT_TRUE(opt.use_fused_ops());
  Node* fused = nullptr;
  for (const auto& n : g.nodes())
    if (n->op_type() == "FusedApplyAdam") fused = n.get();
  ASSERT_NE(fused, nullptr);
  EXPECT_EQ(fused->name(), "Adam/apply");
  EXPECT_EQ(fused->attr<int64_t>("n"), 2);  // w and u in one op
  Session s(g);
  init_session(s);
  s.run_targets({train});
  s.run_targets({train});
  EXPECT_EQ(s.variable_value(gs.node).item<int64_t>(), 2);
  EXPECT_NEAR(s.variable_value(opt.beta1_power().node).item<double>(), 0.9 * 0.9 * 0.9, 1e-15);
}

}  // namespace
}  // namespace spire::testing
