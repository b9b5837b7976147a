// Tests of layers/loss_scale.h: all_finite; LossScaleOptimizer with
// PyTorch GradScaler semantics: a step with an inf or NaN gradient changes
// no variable, slot or beta power (bit for bit) and halves the scale; the
// scale grows after growth_interval finite steps; gradients reach the
// wrapped optimizer (and its clipping) unscaled; the state variables, the
// monitor summaries and the errors.
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "layers/loss_scale.h"
#include "tests/layers/layer_test_util.h"

namespace spire::testing {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<uint32_t> bits(const Tensor& t) {
  std::vector<float> v = t.to_vector<float>();
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
  return b;
}

TEST(AllFinite, FalseForInfAndNanTrueOtherwise) {
  GraphEnv env;
  Output x = ops::placeholder(DType::F32, {3});
  Output y = ops::placeholder(DType::F64, {2, 2});
  Output ok = all_finite({x, Output(), y});
  ASSERT_EQ(ok.dtype(), DType::Bool);
  ASSERT_EQ(ok.shape().rank(), 0);
  auto eval = [&](std::vector<float> xv, std::vector<double> yv) {
    return run1(ok, {{x, Tensor::from_vector<float>({3}, xv)},
                     {y, Tensor::from_vector<double>({2, 2}, yv)}})
        .item<bool>();
  };
  EXPECT_TRUE(eval({1, -2, 3.4e38f}, {1e300, -1e300, 0, -0.0}));
  EXPECT_FALSE(eval({1, std::numeric_limits<float>::infinity(), 0}, {1, 2, 3, 4}));
  EXPECT_FALSE(eval({1, 2, 3}, {1, -kInf, 3, 4}));
  EXPECT_FALSE(eval({1, std::nanf(""), 3}, {1, 2, 3, 4}));
  expect_error([&] { all_finite({Output()}); }, {"all_finite", "no valid tensor"});
  expect_error([&] { all_finite({ops::placeholder(DType::I32, {2})}); },
               {"all_finite", "i32", "not floating-point"});
}

// loss = sum(w * x) + sum(w * w) / 2 over an f32 variable w [4] and an input x [4]
// (gradient x + w: an inf in x makes it inf), trained by Adam under loss scaling.
class LossScaleTest : public ::testing::Test {
 protected:
  GraphEnv env;
  Output w, x, loss;

  void SetUp() override {
    w = get_variable("w", {4}, DType::F32, init::constant(0.5));
    x = ops::placeholder(DType::F32, {4}, "x");
    loss = ops::sum(w * x) + ops::sum(w * w) * 0.5;
  }
  FeedDict feed(std::vector<float> v) const { return {{x, Tensor::from_vector<float>({4}, v)}}; }
  static double scalar(Session& s, const Output& v) { return s.variable_value(v.node).item<double>(); }
};

TEST_F(LossScaleTest, AnInfOrNanGradientSkipsTheWholeStepAndHalvesTheScale) {
  auto opt = std::make_shared<LossScaleOptimizer>(std::make_shared<AdamOptimizer>(0.01));
  Node* train = opt->minimize(loss);
  auto adam = std::dynamic_pointer_cast<AdamOptimizer>(opt->inner());
  Output m = opt->get_slot(w, "Adam"), v = opt->get_slot(w, "Adam_1");
  ASSERT_TRUE(m.valid() && v.valid());
  const std::vector<Output> state = {w, m, v, adam->beta1_power(), adam->beta2_power()};
  EXPECT_EQ(opt->non_slot_variables().size(), 2u);
  auto s = init_session(env.g);
  EXPECT_EQ(scalar(*s, opt->loss_scale()), 65536.0);
  s->run_targets({train}, feed({1, -2, 3, 0.25f}));  // a good step: slots become nonzero
  EXPECT_EQ(scalar(*s, opt->loss_scale()), 65536.0);
  EXPECT_EQ(scalar(*s, opt->growth_tracker()), 1);
  std::vector<std::vector<uint32_t>> before;
  for (const Output& o : state) before.push_back(bits(s->variable_value(o.node)));
  EXPECT_NE(before[1], std::vector<uint32_t>(4, 0u));

  const float inf = std::numeric_limits<float>::infinity();
  for (float bad : {inf, -inf, std::nanf("")}) {
    s->run_targets({train}, feed({1, bad, 3, 0.25f}));
    for (size_t i = 0; i < state.size(); ++i)
      EXPECT_EQ(bits(s->variable_value(state[i].node)), before[i])
          << state[i].node->name() << " changed in a skipped step (bad value " << bad << ")";
  }
  EXPECT_EQ(scalar(*s, opt->loss_scale()), 65536.0 / 8);
  EXPECT_EQ(scalar(*s, opt->growth_tracker()), 0);
  EXPECT_EQ(scalar(*s, opt->skipped_steps()), 3);

  s->run_targets({train}, feed({1, -2, 3, 0.25f}));  // a good step changes everything again
  for (size_t i = 0; i < state.size(); ++i)
    EXPECT_NE(bits(s->variable_value(state[i].node)), before[i]) << state[i].node->name();
  EXPECT_EQ(scalar(*s, opt->skipped_steps()), 3);
  EXPECT_EQ(scalar(*s, opt->growth_tracker()), 1);
}

TEST_F(LossScaleTest, TheScaleGrowsAfterGrowthIntervalGoodSteps) {
  LossScaleOptions o;
  o.init_scale = 8;
  o.growth_interval = 3;
  auto opt = std::make_shared<LossScaleOptimizer>(std::make_shared<AdamOptimizer>(0.01), o);
  Node* train = opt->minimize(loss);
  auto s = init_session(env.g);
  const std::vector<float> good = {1, -2, 3, 0.25f}, bad = {1, std::nanf(""), 3, 0.25f};
  // (input, scale after, tracker after)
  const struct {
    bool ok;
    double scale;
    int64_t tracker;
  } steps[] = {{true, 8, 1},  {true, 8, 2},  {true, 16, 0}, {true, 16, 1}, {false, 8, 0},
               {true, 8, 1},  {true, 8, 2},  {true, 16, 0}, {true, 16, 1}, {true, 16, 2},
               {true, 32, 0}};
  int n = 0;
  for (const auto& st : steps) {
    s->run_targets({train}, feed(st.ok ? good : bad));
    EXPECT_EQ(scalar(*s, opt->loss_scale()), st.scale) << "after step " << n;
    EXPECT_EQ(scalar(*s, opt->growth_tracker()), st.tracker) << "after step " << n;
    ++n;
  }
  EXPECT_EQ(scalar(*s, opt->skipped_steps()), 1);
}

TEST_F(LossScaleTest, ComputeGradientsReturnsTheUnscaledGradients) {
  auto opt = std::make_shared<LossScaleOptimizer>(std::make_shared<GradientDescentOptimizer>(0.1));
  GradsAndVars gv = opt->compute_gradients(loss);
  ASSERT_EQ(gv.size(), 1u);
  Node* train = opt->apply_gradients(gv);
  Output unscaled = gradients({loss}, {w})[0];  // the same graph's gradient without scaling
  auto s = init_session(env.g);
  const std::vector<float> xv = {1, -2, 3, 0.25f};
  for (int step = 0; step < 3; ++step) {
    std::vector<float> w0 = s->variable_value(w.node).to_vector<float>();
    std::vector<Tensor> r = s->run({gv[0].first, unscaled}, feed(xv));
    std::vector<float> g = r[0].to_vector<float>(), want = r[1].to_vector<float>();
    s->run_targets({train}, feed(xv));
    std::vector<float> w1 = s->variable_value(w.node).to_vector<float>();
    for (int i = 0; i < 4; ++i) {
      // Power-of-two scales make scaling and unscaling exact; SGD steps with the gradient.
      EXPECT_EQ(g[i], want[i]) << "step " << step << " element " << i;
      EXPECT_NEAR(g[i], xv[i] + w0[i], 1e-6) << "step " << step << " element " << i;
      EXPECT_EQ(w1[i], w0[i] - static_cast<float>(0.1f * g[i])) << "step " << step;
    }
  }
}

TEST_F(LossScaleTest, GradientsAreUnscaledBeforeTheWrappedOptimizerAndItsClipping) {
  // Plain SGD on the same loss, no scaling: the reference.
  Graph ref_g;
  Output rw, rx;
  Node* ref_train;
  {
    DefaultGraphGuard guard(ref_g);
    rw = get_variable("w", {4}, DType::F32, init::constant(0.5));
    rx = ops::placeholder(DType::F32, {4}, "x");
    Output rloss = ops::sum(rw * rx) + ops::sum(rw * rw) * 0.5;
    ref_train = apply_grad_processors(std::make_shared<GradientDescentOptimizer>(0.5),
                                      {GlobalNormClip(1.0)})
                    ->minimize(rloss);
  }
  // The gradient x + w = (2.5, -1.5, 3.5, 0.75) has norm 4.7: clipping to 1 scales it by
  // 1/4.7. Clipping the scaled gradient (norm 4.7 * 65536), then unscaling, would move w
  // by 1/65536 of that.
  auto inner = apply_grad_processors(std::make_shared<GradientDescentOptimizer>(0.5),
                                     {GlobalNormClip(1.0)});
  Node* train = std::make_shared<LossScaleOptimizer>(inner)->minimize(loss);
  // The other order: clipping outside the loss scaler.
  Graph g2;
  Output w2, x2;
  Node* train2;
  {
    DefaultGraphGuard guard(g2);
    w2 = get_variable("w", {4}, DType::F32, init::constant(0.5));
    x2 = ops::placeholder(DType::F32, {4}, "x");
    Output loss2 = ops::sum(w2 * x2) + ops::sum(w2 * w2) * 0.5;
    auto scaler = std::make_shared<LossScaleOptimizer>(
        std::make_shared<GradientDescentOptimizer>(0.5));
    train2 = apply_grad_processors(scaler, {GlobalNormClip(1.0)})->minimize(loss2);
  }
  const std::vector<float> xv = {2, -2, 3, 0.25f};
  auto s = init_session(env.g), rs = init_session(ref_g), s2 = init_session(g2);
  for (int step = 0; step < 3; ++step) {
    s->run_targets({train}, feed(xv));
    rs->run_targets({ref_train}, {{rx, Tensor::from_vector<float>({4}, xv)}});
    s2->run_targets({train2}, {{x2, Tensor::from_vector<float>({4}, xv)}});
  }
  std::vector<float> got = s->variable_value(w.node).to_vector<float>();
  std::vector<float> want = rs->variable_value(rw.node).to_vector<float>();
  std::vector<float> got2 = s2->variable_value(w2.node).to_vector<float>();
  // Power-of-two scales make scaling and unscaling exact.
  EXPECT_EQ(got, want);
  EXPECT_EQ(got2, want);
  // Each step moved w by lr times a gradient of norm 1 (not 1/65536 of it).
  EXPECT_LT(want[0], 0.5 - 0.1);
}

TEST_F(LossScaleTest, StateVariablesAndMonitorSummaries) {
  auto opt = std::make_shared<LossScaleOptimizer>(std::make_shared<MomentumOptimizer>(0.1, 0.9));
  opt->minimize(loss);
  EXPECT_EQ(opt->loss_scale().node->name(), "loss_scale");
  EXPECT_EQ(opt->loss_scale().dtype(), DType::F32);
  EXPECT_EQ(opt->growth_tracker().node->name(), "loss_scale_growth_tracker");
  EXPECT_EQ(opt->skipped_steps().node->name(), "loss_scale_skipped_steps");
  EXPECT_EQ(opt->skipped_steps().dtype(), DType::I64);
  EXPECT_EQ(opt->get_slot_names(), std::vector<std::string>{"Momentum"});
  for (const Output& v : trainable_variables("", &env.g))
    EXPECT_NE(v.node->name().rfind("loss_scale", 0), 0u) << v.node->name() << " is trainable";
  std::vector<std::string> summaries;
  for (const Output& o : env.g.get_collection(GraphKeys::SUMMARIES))
    summaries.push_back(o.node->name());
  EXPECT_EQ(summaries, (std::vector<std::string>{"loss_scale-summary",
                                                 "loss_scale_skipped_steps-summary"}));
}

TEST_F(LossScaleTest, BadSettingsAreErrors) {
  auto sgd = std::make_shared<GradientDescentOptimizer>(0.1);
  expect_error([&] { LossScaleOptimizer(nullptr); }, {"LossScaleOptimizer", "null"});
  LossScaleOptions o;
  o.init_scale = 0;
  expect_error([&] { LossScaleOptimizer(sgd, o); }, {"init_scale", "> 0"});
  o = {};
  o.growth_factor = 1;
  expect_error([&] { LossScaleOptimizer(sgd, o); }, {"growth_factor", "> 1"});
  o = {};
  o.backoff_factor = 1;
  expect_error([&] { LossScaleOptimizer(sgd, o); }, {"backoff_factor", "(0, 1)"});
  o = {};
  o.growth_interval = 0;
  expect_error([&] { LossScaleOptimizer(sgd, o); }, {"growth_interval", ">= 1"});
}

}  // namespace
}  // namespace spire::testing
