// Tests of layers/accum_grad_optimizer.h and Optimizer::apply_gradients_if:
// k micro-steps of batch b through AccumGradOptimizer against one step of
// the big batch k*b without it (kMean: the same mean loss; kSum: k times
// the mean loss, i.e. the sum of the micro-batch losses), for momentum SGD
// and AdamW, fused and per-variable, in f64 over several windows; the inner
// optimizer's state (momentum, Adam moments, beta powers) and the variables
// stay unchanged on the accumulating runs; counter, slots, global step and
// errors.
#include <cmath>
#include <functional>
#include <memory>
#include <random>

#include "layers/accum_grad_optimizer.h"
#include "layers/initializers.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

constexpr int kIn = 3, kOut = 2, kMicro = 2;

// A regression model: loss = scale * mean(tanh(x W + b) - y)^2 over a batch of
// placeholders x [-1, 3], y [-1, 2]; W [3, 2] and b [2] are f64 variables.
struct Model {
  Graph g;
  Output x, y, W, b, loss;
  Model(double scale) {
    DefaultGraphGuard guard(g);
    x = ops::placeholder(DType::F64, {-1, kIn}, "x");
    y = ops::placeholder(DType::F64, {-1, kOut}, "y");
    W = get_variable("W", {kIn, kOut}, DType::F64, init::zeros());
    b = get_variable("b", {kOut}, DType::F64, init::zeros());
    Output d = ops::tanh(ops::matmul(x, W) + b) - y;
    loss = ops::mean(ops::square(d)) * scale;
  }
};

using MakeOpt = std::function<std::shared_ptr<Optimizer>()>;

std::vector<double> random_values(std::mt19937& rng, size_t n) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> v(n);
  for (double& e : v) e = u(rng);
  return v;
}

void init(Session& s, Model& m) {
  DefaultGraphGuard guard(m.g);
  s.run_targets({global_variables_initializer()});
  s.set_variable_value(m.W.node, Tensor::from_vector<double>({kIn, kOut},
                                                             {0.5, -0.25, 0.75, 0.1, -0.6, 0.3}));
  s.set_variable_value(m.b.node, Tensor::from_vector<double>({kOut}, {0.2, -0.1}));
}

std::vector<double> values(Session& s, const Output& v) {
  return s.variable_value(v.node).to_vector<double>();
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tol,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << what << " [" << i << "]";
}

// Runs `windows` windows of k micro-steps of batch kMicro through
// AccumGradOptimizer(make(), k, mode) and the same number of big-batch steps
// of make() alone, and compares the variables after each window; checks
// that nothing moves on the accumulating runs.
void check_equivalence(const MakeOpt& make, AccumMode mode, int k, bool fused,
                       const std::vector<std::string>& state_slots) {
  SCOPED_TRACE(std::string(mode == AccumMode::kSum ? "sum" : "mean") + (fused ? " fused" : " unfused"));
  Model acc_model(1.0);
  Model big_model(mode == AccumMode::kSum ? static_cast<double>(k) : 1.0);
  Node* acc_train;
  std::shared_ptr<AccumGradOptimizer> acc_opt;
  {
    DefaultGraphGuard guard(acc_model.g);
    acc_opt = std::make_shared<AccumGradOptimizer>(make(), k, mode);
    acc_opt->set_use_fused_ops(fused);
    acc_train = acc_opt->minimize(acc_model.loss);
  }
  Node* big_train;
  {
    DefaultGraphGuard guard(big_model.g);
    std::shared_ptr<Optimizer> opt = make();
    opt->set_use_fused_ops(fused);
    big_train = opt->minimize(big_model.loss);
  }
  Session sa(acc_model.g), sb(big_model.g);
  init(sa, acc_model);
  init(sb, big_model);
  std::mt19937 rng(7);
  for (int w = 0; w < 3; ++w) {
    std::vector<double> xs, ys;
    for (int j = 0; j < k; ++j) {
      std::vector<double> x = random_values(rng, kMicro * kIn), y = random_values(rng, kMicro * kOut);
      xs.insert(xs.end(), x.begin(), x.end());
      ys.insert(ys.end(), y.begin(), y.end());
      // The state before this run: nothing may change before the k-th run.
      std::vector<std::vector<double>> before;
      for (const Output& v : {acc_model.W, acc_model.b}) {
        before.push_back(values(sa, v));
        for (const std::string& slot : state_slots)
          before.push_back(values(sa, acc_opt->get_slot(v, slot)));
      }
      sa.run_targets({acc_train}, {{acc_model.x, Tensor::from_vector<double>({kMicro, kIn}, x)},
                                   {acc_model.y, Tensor::from_vector<double>({kMicro, kOut}, y)}});
      EXPECT_EQ(sa.variable_value(acc_opt->counter().node).item<int64_t>(), (j + 1) % k);
      if (j + 1 < k) {
        size_t idx = 0;
        for (const Output& v : {acc_model.W, acc_model.b}) {
          EXPECT_EQ(values(sa, v), before[idx++]) << "window " << w << " run " << j;
          for (const std::string& slot : state_slots)
            EXPECT_EQ(values(sa, acc_opt->get_slot(v, slot)), before[idx++])
                << slot << ", window " << w << " run " << j;
        }
      }
    }
    sb.run_targets({big_train}, {{big_model.x, Tensor::from_vector<double>({k * kMicro, kIn}, xs)},
                                 {big_model.y, Tensor::from_vector<double>({k * kMicro, kOut}, ys)}});
    expect_near(values(sa, acc_model.W), values(sb, big_model.W), 1e-12, "W after window " + std::to_string(w));
    expect_near(values(sa, acc_model.b), values(sb, big_model.b), 1e-12, "b after window " + std::to_string(w));
    // Not a test that cannot fail: the window moved the weights.
    EXPECT_GT(std::abs(values(sa, acc_model.W)[0] - 0.5), 1e-6);
  }
}

TEST(AccumGradOptimizer, MomentumSumAndMeanEqualTheBigBatch) {
  MakeOpt make = [] { return std::make_shared<MomentumOptimizer>(0.25, 0.9); };
  for (AccumMode mode : {AccumMode::kSum, AccumMode::kMean})
    for (bool fused : {true, false}) check_equivalence(make, mode, 3, fused, {"Momentum"});
}

TEST(AccumGradOptimizer, AdamWSumAndMeanEqualTheBigBatch) {
  // beta powers, moments and the decay of W only (nanoGPT's groups) all move per window.
  MakeOpt make = [] {
    auto opt = std::make_shared<AdamWOptimizer>(0.125, 0.5, 0.8, 0.95, 1e-8);
    opt->set_weight_decay_filter(decay_if_rank_at_least(2));
    return opt;
  };
  for (AccumMode mode : {AccumMode::kSum, AccumMode::kMean})
    for (bool fused : {true, false}) check_equivalence(make, mode, 4, fused, {"Adam", "Adam_1"});
}

TEST(AccumGradOptimizer, BetaPowersAdvanceOnlyOnApplyingRuns) {
  Model m(1.0);
  DefaultGraphGuard guard(m.g);
  auto adam = std::make_shared<AdamWOptimizer>(0.125, 0.0, 0.5, 0.75);
  AccumGradOptimizer opt(adam, 3, AccumMode::kMean);
  Output gs = get_variable("global_step", {}, DType::I64, init::zeros(), false).value;
  Node* train = opt.minimize(m.loss, gs);
  EXPECT_EQ(train->name(), "AccumGrad");
  Session s(m.g);
  init(s, m);
  FeedDict feed{{m.x, Tensor::from_vector<double>({1, kIn}, {0.5, -1.0, 0.25})},
                {m.y, Tensor::from_vector<double>({1, kOut}, {0.3, -0.7})}};
  for (int run = 1; run <= 7; ++run) {
    s.run_targets({train}, feed);
    const int applied = run / 3;
    EXPECT_EQ(s.variable_value(gs.node).item<int64_t>(), run);
    EXPECT_EQ(s.variable_value(opt.counter().node).item<int64_t>(), run % 3);
    EXPECT_DOUBLE_EQ(s.variable_value(adam->beta1_power().node).item<double>(),
                     std::pow(0.5, applied + 1)) << "run " << run;
    EXPECT_DOUBLE_EQ(s.variable_value(adam->beta2_power().node).item<double>(),
                     std::pow(0.75, applied + 1)) << "run " << run;
  }
}

TEST(AccumGradOptimizer, SlotsNamesAndNiterOne) {
  Model m(1.0);
  DefaultGraphGuard guard(m.g);
  auto mom = std::make_shared<MomentumOptimizer>(0.1, 0.9);
  AccumGradOptimizer opt(mom, 2);
  EXPECT_EQ(opt.learning_rate(), mom->learning_rate());
  opt.minimize(m.loss);
  EXPECT_EQ(opt.get_slot(m.W, "AccumGrad").node->name(), "W/AccumGrad");
  EXPECT_EQ(opt.get_slot(m.W, "Momentum").node->name(), "W/Momentum");
  EXPECT_EQ(opt.get_slot_names(), (std::vector<std::string>{"Momentum", "AccumGrad"}));
  EXPECT_EQ(opt.counter().node->name(), "AccumGrad_counter");
  EXPECT_EQ(opt.counter().dtype(), DType::I64);
  // A second train op (e.g. another replica's update) counts its own runs.
  Output w2 = get_variable("W2", {2}, DType::F64, init::zeros());
  opt.minimize(ops::sum(ops::square(w2)), {}, {w2});
  EXPECT_EQ(opt.counter().node->name(), "AccumGrad_counter_1");
  // niter 1: the inner optimizer's own update, no accumulator.
  Model m1(1.0);
  DefaultGraphGuard g1(m1.g);
  AccumGradOptimizer one(std::make_shared<GradientDescentOptimizer>(0.1), 1);
  one.minimize(m1.loss);
  EXPECT_FALSE(one.counter().valid());
  EXPECT_FALSE(one.get_slot(m1.W, "AccumGrad").valid());
}

TEST(AccumGradOptimizer, Errors) {
  Model m(1.0);
  DefaultGraphGuard guard(m.g);
  auto sgd = std::make_shared<GradientDescentOptimizer>(0.1);
  expect_error([&] { AccumGradOptimizer(nullptr, 2); }, {"inner optimizer is null"});
  expect_error([&] { AccumGradOptimizer(sgd, 0); }, {"niter must be >= 1", "0"});
  AccumGradOptimizer opt(sgd, 2);
  expect_error([&] { opt.apply_gradients({{Output(), m.W}}); }, {"no gradients"});
  opt.minimize(m.loss);
  expect_error([&] { opt.minimize(m.loss); }, {"variable 'W' is already accumulated"});
  Output cond = ops::constant(Tensor::scalar<bool>(true));
  expect_error([&] { opt.apply_gradients_if(cond, {{m.W, m.W}}); }, {"not supported"});
  expect_error([&] { sgd->apply_gradients_if(ops::scalar(1.0, DType::F64), {{m.W, m.W}}); },
               {"apply_if must be a scalar bool"});
}

// apply_gradients_if alone: a fed condition gates every update, fused or not.
TEST(OptimizerApplyIf, FedConditionGatesTheUpdate) {
  for (bool fused : {true, false}) {
    Model m(1.0);
    DefaultGraphGuard guard(m.g);
    AdamOptimizer opt(0.125);
    opt.set_use_fused_ops(fused);
    Output cond = ops::placeholder(DType::Bool, {}, "cond");
    Node* train = opt.apply_gradients_if(cond, opt.compute_gradients(m.loss));
    Session s(m.g);
    init(s, m);
    FeedDict feed{{m.x, Tensor::from_vector<double>({1, kIn}, {0.5, -1.0, 0.25})},
                  {m.y, Tensor::from_vector<double>({1, kOut}, {0.3, -0.7})}};
    std::vector<double> w0 = values(s, m.W);
    FeedDict off = feed, on = feed;
    off.emplace_back(cond, Tensor::scalar<bool>(false));
    on.emplace_back(cond, Tensor::scalar<bool>(true));
    s.run_targets({train}, off);
    EXPECT_EQ(values(s, m.W), w0);
    EXPECT_EQ(values(s, opt.get_slot(m.W, "Adam")), std::vector<double>(kIn * kOut, 0.0));
    EXPECT_DOUBLE_EQ(s.variable_value(opt.beta1_power().node).item<double>(), 0.9);
    s.run_targets({train}, on);
    EXPECT_NE(values(s, m.W), w0);
    EXPECT_DOUBLE_EQ(s.variable_value(opt.beta1_power().node).item<double>(), 0.9 * 0.9);
  }
}

}  // namespace
}  // namespace spire::testing
