// Tests of AdamW's parameter groups (WeightDecayFilter: nanoGPT's rank rule,
// regex filters) against torch.optim.AdamW's update computed here in f64,
// fused and per-variable; and of ClipNormSemantics::kTorch
// (torch.nn.utils.clip_grad_norm_) beside TF's clip_by_global_norm.
#include <cmath>

#include "layers/initializers.h"
#include "layers/optimizers.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

// loss = 0.5 * sum(a * W * W) + 0.5 * sum(c * b * b) + s * s - s over
// W [2, 2] (rank 2), b [2] (rank 1), s [] (rank 0): gradients a W, c b, 2 s - 1.
struct GroupModel {
  Graph g;
  DefaultGraphGuard guard{g};
  const std::vector<double> a{1.0, 2.0, 0.5, 3.0}, c{1.5, -0.5};
  Output W, b, s, loss;
  GroupModel() {
    W = get_variable("W", {2, 2}, DType::F64, init::zeros());
    b = get_variable("b", {2}, DType::F64, init::zeros());
    s = get_variable("s", {}, DType::F64, init::zeros());
    Output ac = ops::constant(Tensor::from_vector<double>({2, 2}, a));
    Output cc = ops::constant(Tensor::from_vector<double>({2}, c));
    loss = ops::sum(ac * W * W) * 0.5 + ops::sum(cc * b * b) * 0.5 + s * s - s;
  }
  // Flat parameters W(4), b(2), s(1) and their gradients.
  std::vector<double> grad(const std::vector<double>& p) const {
    return {a[0] * p[0], a[1] * p[1], a[2] * p[2], a[3] * p[3], c[0] * p[4], c[1] * p[5],
            2 * p[6] - 1};
  }
};

const std::vector<double> kStart{1.0, -2.0, 0.5, 3.0, 0.75, -1.25, 2.0};

void set_start(Session& sess, GroupModel& m) {
  sess.run_targets({global_variables_initializer()});
  sess.set_variable_value(m.W.node, Tensor::from_vector<double>({2, 2}, {1.0, -2.0, 0.5, 3.0}));
  sess.set_variable_value(m.b.node, Tensor::from_vector<double>({2}, {0.75, -1.25}));
  sess.set_variable_value(m.s.node, Tensor::scalar<double>(2.0));
}

std::vector<double> flat(Session& sess, GroupModel& m) {
  std::vector<double> p = sess.variable_value(m.W.node).to_vector<double>();
  for (double x : sess.variable_value(m.b.node).to_vector<double>()) p.push_back(x);
  p.push_back(sess.variable_value(m.s.node).item<double>());
  return p;
}

// Three AdamW steps with the filter against torch.optim.AdamW with two
// param groups (`decayed[i]`: element i is in the decayed group).
void check_groups(const std::function<void(AdamWOptimizer&, GroupModel&)>& set_filter,
                  const std::vector<bool>& decayed) {
  const double lr = 0.125, wd = 0.5, b1 = 0.8, b2 = 0.99, eps = 1e-6;
  for (bool fused : {true, false}) {
    SCOPED_TRACE(fused ? "fused" : "per-variable");
    GroupModel m;
    AdamWOptimizer opt(lr, wd, b1, b2, eps);
    set_filter(opt, m);
    opt.set_use_fused_ops(fused);
    Node* train = opt.minimize(m.loss);
    Session sess(m.g);
    set_start(sess, m);
    std::vector<double> p = kStart, mo(7, 0.0), v(7, 0.0);
    for (int t = 1; t <= 3; ++t) {
      sess.run_targets({train});
      std::vector<double> gr = m.grad(p);
      const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
      for (size_t i = 0; i < p.size(); ++i) {
        p[i] *= 1 - lr * (decayed[i] ? wd : 0.0);  // torch: param.mul_(1 - lr * group wd)
        mo[i] = b1 * mo[i] + (1 - b1) * gr[i];
        v[i] = b2 * v[i] + (1 - b2) * gr[i] * gr[i];
        p[i] -= lr / bc1 * mo[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + eps);
      }
      std::vector<double> got = flat(sess, m);
      for (size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(got[i], p[i], 1e-12) << "step " << t << " [" << i << "]";
    }
  }
}

TEST(AdamWParamGroups, NanoGptRankRuleDecaysOnlyMatrices) {
  check_groups([](AdamWOptimizer& opt, GroupModel&) { opt.set_weight_decay_filter(decay_if_rank_at_least(2)); },
               {true, true, true, true, false, false, false});
}

TEST(AdamWParamGroups, RegexFilters) {
  check_groups([](AdamWOptimizer& opt, GroupModel&) { opt.set_weight_decay_filter(decay_if_name_matches({"^b$"})); },
               {false, false, false, false, true, true, false});
  check_groups(
      [](AdamWOptimizer& opt, GroupModel&) { opt.set_weight_decay_filter(decay_unless_name_matches({"^W", "s"})); },
      {false, false, false, false, true, true, false});
  // Default: one group, everything decays.
  check_groups([](AdamWOptimizer&, GroupModel&) {}, std::vector<bool>(7, true));
}

TEST(AdamWParamGroups, FilterQueriesAndErrors) {
  GroupModel m;
  AdamWOptimizer opt(0.1, 0.25);
  EXPECT_EQ(opt.weight_decay_for(m.b), 0.25);
  opt.set_weight_decay_filter(decay_if_rank_at_least(2));
  EXPECT_EQ(opt.weight_decay_for(m.W), 0.25);
  EXPECT_EQ(opt.weight_decay_for(m.b), 0.0);
  EXPECT_EQ(opt.weight_decay_for(m.s), 0.0);
  // One fused op per group.
  Node* train = opt.minimize(m.loss);
  int fused = 0;
  for (const auto& n : m.g.nodes())
    if (n->op_type() == "FusedApplyAdamW") {
      ++fused;
      EXPECT_EQ(n->attr<double>("weight_decay"), n->name() == "AdamW/apply" ? 0.25 : 0.0) << n->name();
    }
  EXPECT_EQ(fused, 2);
  (void)train;
  expect_error([&] { opt.set_weight_decay_filter(nullptr); }, {"filter is null"});
  expect_error([] { decay_if_name_matches({"("}); }, {"decay_if_name_matches", "invalid regex '('"});
  expect_error([] { decay_unless_name_matches({}); }, {"no regex"});
}

// ---- clipping ------------------------------------------------------------------------------

TEST(ClipNormSemantics, TorchScalesByMaxNormOverNormPlusEps) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output t1 = ops::constant(Tensor::from_vector<double>({2}, {3, 4}));  // norm 5
  Session sess(g);
  auto run = [&](double clip, ClipNormSemantics sem) {
    auto [c, n] = clip_by_global_norm({t1}, clip, "clip", sem);
    std::vector<Tensor> r = sess.run({c[0], n});
    EXPECT_DOUBLE_EQ(r[1].item<double>(), 5.0);
    return r[0].to_vector<double>();
  };
  // Above the threshold: torch 2 / (5 + 1e-6), TF 2 / 5.
  const double torch_coef = 2.0 / (5.0 + 1e-6);
  std::vector<double> tc = run(2.0, ClipNormSemantics::kTorch);
  EXPECT_DOUBLE_EQ(tc[0], 3 * torch_coef);
  EXPECT_DOUBLE_EQ(tc[1], 4 * torch_coef);
  std::vector<double> tf = run(2.0, ClipNormSemantics::kTensorFlow);
  EXPECT_DOUBLE_EQ(tf[0], 3 * 0.4);
  EXPECT_GT(std::abs(tc[0] - tf[0]), 1e-8);
  // Within 1e-6 below the norm: torch still scales a little, TF does not.
  const double near = 5.0 + 5e-7;
  EXPECT_DOUBLE_EQ(run(near, ClipNormSemantics::kTorch)[1], 4 * (near / (5.0 + 1e-6)));
  EXPECT_DOUBLE_EQ(run(near, ClipNormSemantics::kTensorFlow)[1], 4.0);
  // Well below: both leave it (torch clamps the coefficient to 1).
  EXPECT_DOUBLE_EQ(run(10.0, ClipNormSemantics::kTorch)[1], 4.0);
}

TEST(ClipNormSemantics, GlobalNormClipProcessorWithTorchSemantics) {
  GroupModel m;
  std::shared_ptr<Optimizer> opt = apply_grad_processors(
      std::make_shared<GradientDescentOptimizer>(0.5), {GlobalNormClip(1.0, ClipNormSemantics::kTorch)});
  Node* train = opt->minimize(m.loss);
  Session sess(m.g);
  set_start(sess, m);
  std::vector<double> p = kStart;
  for (int step = 0; step < 2; ++step) {
    sess.run_targets({train});
    std::vector<double> gr = m.grad(p);
    double n2 = 0;
    for (double x : gr) n2 += x * x;
    const double coef = std::min(1.0 / (std::sqrt(n2) + 1e-6), 1.0);
    for (size_t i = 0; i < p.size(); ++i) p[i] -= 0.5 * gr[i] * coef;
    std::vector<double> got = flat(sess, m);
    for (size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(got[i], p[i], 1e-13) << "step " << step;
  }
}

}  // namespace
}  // namespace spire::testing
