// Tests of BatchNorm (layers/batch_norm.cc) in f64: variables and
// collections, batch statistics in training (channels last and another
// axis), the EMA recursion over three update steps (known and unknown batch
// size), towers (main training tower makes the update ops, a second training
// tower and inference towers reuse the variables and make none, inference uses
// the EMAs), ema_update modes; and an end-to-end finite-difference gradient
// check of small networks built from the layers.
#include <cmath>
#include <random>

#include "layers/layers.h"
#include "tests/layers/layer_test_util.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

std::vector<Node*> update_ops(Graph& g) {
  std::vector<Node*> v;
  for (const Output& o : g.get_collection(GraphKeys::UPDATE_OPS)) v.push_back(o.node);
  return v;
}

/// Per-channel (last axis) mean and variance of x viewed as [rows, c]; biased or unbiased.
void channel_stats(const std::vector<double>& x, int64_t c, bool unbiased,
                   std::vector<double>* mean, std::vector<double>* var) {
  const int64_t rows = static_cast<int64_t>(x.size()) / c;
  mean->assign(static_cast<size_t>(c), 0.0);
  var->assign(static_cast<size_t>(c), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < c; ++k)
      (*mean)[static_cast<size_t>(k)] += x[static_cast<size_t>(r * c + k)] / rows;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < c; ++k) {
      double d = x[static_cast<size_t>(r * c + k)] - (*mean)[static_cast<size_t>(k)];
      (*var)[static_cast<size_t>(k)] += d * d;
    }
  for (double& v : *var) v /= unbiased ? static_cast<double>(rows - 1) : static_cast<double>(rows);
}

/// (x - mean) / sqrt(var + eps) * gamma + beta per channel (last axis).
std::vector<double> normalize(const std::vector<double>& x, const std::vector<double>& mean,
                              const std::vector<double>& var, const std::vector<double>& gamma,
                              const std::vector<double>& beta, double eps) {
  const size_t c = mean.size();
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    size_t k = i % c;
    y[i] = (x[i] - mean[k]) / std::sqrt(var[k] + eps) * gamma[k] + beta[k];
  }
  return y;
}

TEST(BatchNorm, VariablesCollectionsAndDefaults) {
  GraphEnv env;
  Output x = ops::placeholder(DType::F64, {4, 3}, "x");
  Output y = BatchNorm("bn", x);
  EXPECT_EQ(y.node->name(), "bn/output");
  EXPECT_EQ(y.shape(), (Shape{4, 3}));
  EXPECT_EQ(names_of(trainable_variables()), (std::vector<std::string>{"bn/beta", "bn/gamma"}));
  EXPECT_EQ(names_of(model_variables()),
            (std::vector<std::string>{"bn/mean/EMA", "bn/variance/EMA"}));
  EXPECT_EQ(global_variables().size(), 4u);
  for (const char* v : {"bn/beta", "bn/gamma", "bn/mean/EMA", "bn/variance/EMA"})
    EXPECT_EQ(var_node(env.g, v)->output_shape(0), (Shape{3})) << v;
  EXPECT_EQ(names_of(env.g.get_collection(GraphKeys::UPDATE_OPS)),
            (std::vector<std::string>{"bn/mean_ema_op", "bn/var_ema_op"}));
  auto s = init_session(env.g);
  expect_tensor(s->variable_value(var_node(env.g, "bn/beta")), {3}, {0, 0, 0}, 0);
  expect_tensor(s->variable_value(var_node(env.g, "bn/gamma")), {3}, {1, 1, 1}, 0);
  expect_tensor(s->variable_value(var_node(env.g, "bn/mean/EMA")), {3}, {0, 0, 0}, 0);
  expect_tensor(s->variable_value(var_node(env.g, "bn/variance/EMA")), {3}, {1, 1, 1}, 0);
}

TEST(BatchNorm, TrainingNormalizesWithBatchStatistics) {
  GraphEnv env;
  Output x = ops::placeholder(DType::F64, {2, 2, 2, 3}, "x");
  Output y = BatchNorm("bn", x, BatchNormOptions().epsilon(1e-3));
  auto s = init_session(env.g);
  std::vector<double> gamma = {1.5, -0.5, 2}, beta = {0.1, 0.2, -0.3};
  s->set_variable_value(var_node(env.g, "bn/gamma"), f64({3}, gamma));
  s->set_variable_value(var_node(env.g, "bn/beta"), f64({3}, beta));
  std::mt19937_64 rng(11);
  Tensor xv = random_tensor(DType::F64, {2, 2, 2, 3}, rng, -2, 3);
  std::vector<double> mean, var;
  channel_stats(vals(xv), 3, false, &mean, &var);
  expect_tensor(s->run({y}, {{x, xv}})[0], {2, 2, 2, 3},
                normalize(vals(xv), mean, var, gamma, beta, 1e-3), 1e-12);
}

TEST(BatchNorm, ChannelAxisNotLast) {
  GraphEnv env;
  Output x = ops::placeholder(DType::F64, {2, 3, 2}, "x");  // channels on axis 1
  Output y = BatchNorm("bn", x, BatchNormOptions().axis(1).scale(false));
  EXPECT_EQ(env.g.find_node("bn/gamma"), nullptr);
  EXPECT_EQ(var_node(env.g, "bn/beta")->output_shape(0), (Shape{3}));
  auto s = init_session(env.g);
  s->set_variable_value(var_node(env.g, "bn/beta"), f64({3}, {1, 2, 3}));
  std::vector<double> xv = {1, 2, 3, 5, -1, 0, 4, 4, 0, 1, 2, 7};
  // Per channel c: elements x[n, c, w] over n, w.
  std::vector<double> expect(12);
  for (int c = 0; c < 3; ++c) {
    double m = 0, v = 0;
    for (int n = 0; n < 2; ++n)
      for (int w = 0; w < 2; ++w) m += xv[static_cast<size_t>(n * 6 + c * 2 + w)] / 4;
    for (int n = 0; n < 2; ++n)
      for (int w = 0; w < 2; ++w)
        v += std::pow(xv[static_cast<size_t>(n * 6 + c * 2 + w)] - m, 2) / 4;
    for (int n = 0; n < 2; ++n)
      for (int w = 0; w < 2; ++w) {
        size_t i = static_cast<size_t>(n * 6 + c * 2 + w);
        expect[i] = (xv[i] - m) / std::sqrt(v + 1e-5) + (c + 1);
      }
  }
  expect_tensor(s->run({y}, {{x, f64({2, 3, 2}, xv)}})[0], {2, 3, 2}, expect, 1e-12);
}

TEST(BatchNorm, EmaAfterThreeTrainingSteps) {
  GraphEnv env;
  Output x = ops::placeholder(DType::F64, {4, 2}, "x");
  Output xu = ops::placeholder(DType::F64, {-1, 2}, "xu");  // batch size known only at run time
  BatchNorm("bn", x);
  BatchNorm("bn_unknown", xu, BatchNormOptions().momentum(0.7));
  ASSERT_EQ(update_ops(env.g).size(), 4u);
  auto s = init_session(env.g);
  std::vector<double> m = {0, 0}, v = {1, 1}, mu = {0, 0}, vu = {1, 1};
  std::mt19937_64 rng(3);
  for (int step = 0; step < 3; ++step) {
    Tensor batch = random_tensor(DType::F64, {4, 2}, rng, -1, 4);
    Tensor batch_u = random_tensor(DType::F64, {static_cast<int64_t>(3 + step), 2}, rng, -2, 2);
    s->run({}, {{x, batch}, {xu, batch_u}}, update_ops(env.g));
    std::vector<double> bm, bv;
    channel_stats(vals(batch), 2, true, &bm, &bv);  // the EMA tracks the unbiased variance
    for (size_t k = 0; k < 2; ++k) {
      m[k] = m[k] * 0.9 + bm[k] * 0.1;
      v[k] = v[k] * 0.9 + bv[k] * 0.1;
    }
    channel_stats(vals(batch_u), 2, true, &bm, &bv);
    for (size_t k = 0; k < 2; ++k) {
      mu[k] = mu[k] * 0.7 + bm[k] * 0.3;
      vu[k] = vu[k] * 0.7 + bv[k] * 0.3;
    }
  }
  expect_tensor(s->variable_value(var_node(env.g, "bn/mean/EMA")), {2}, m, 1e-12);
  expect_tensor(s->variable_value(var_node(env.g, "bn/variance/EMA")), {2}, v, 1e-12);
  expect_tensor(s->variable_value(var_node(env.g, "bn_unknown/mean/EMA")), {2}, mu, 1e-12);
  expect_tensor(s->variable_value(var_node(env.g, "bn_unknown/variance/EMA")), {2}, vu, 1e-12);
}

TEST(BatchNorm, TowersShareVariablesAndOnlyMainTowerUpdates) {
  GraphEnv env;
  Output x = ops::placeholder(DType::F64, {4, 2}, "x");
  Output y_train, y_train1, y_pred;
  {
    TowerContext tower0("tower0", true);
    y_train = BatchNorm("bn", x);
  }
  ASSERT_EQ(update_ops(env.g).size(), 2u);
  EXPECT_EQ(names_of(env.g.get_collection(GraphKeys::UPDATE_OPS)),
            (std::vector<std::string>{"tower0/bn/mean_ema_op", "tower0/bn/var_ema_op"}));
  {
    TowerContext tower1("tower1", true, "", 1, 2);
    y_train1 = BatchNorm("bn", x);
  }
  {
    TowerContext pred("pred", false);
    y_pred = BatchNorm("bn", x);
  }
  EXPECT_EQ(y_pred.node->name(), "pred/bn/output");
  EXPECT_EQ(update_ops(env.g).size(), 2u);   // tower1 and pred add none
  EXPECT_EQ(global_variables().size(), 4u);  // all towers share bn/*
  auto s = init_session(env.g);
  std::vector<double> gamma = {2, 0.5}, beta = {1, -1}, m = {0.5, -0.25}, v = {4, 0.09};
  s->set_variable_value(var_node(env.g, "bn/gamma"), f64({2}, gamma));
  s->set_variable_value(var_node(env.g, "bn/beta"), f64({2}, beta));
  s->set_variable_value(var_node(env.g, "bn/mean/EMA"), f64({2}, m));
  s->set_variable_value(var_node(env.g, "bn/variance/EMA"), f64({2}, v));
  std::vector<double> xv = {1, 2, 3, -4, 0.5, 0, -2, 1};
  auto r = s->run({y_train, y_train1, y_pred}, {{x, f64({4, 2}, xv)}});
  std::vector<double> bm, bv;
  channel_stats(xv, 2, false, &bm, &bv);
  std::vector<double> train_expect = normalize(xv, bm, bv, gamma, beta, 1e-5);
  expect_tensor(r[0], {4, 2}, train_expect, 1e-12);
  expect_tensor(r[1], {4, 2}, train_expect, 1e-12);
  expect_tensor(r[2], {4, 2}, normalize(xv, m, v, gamma, beta, 1e-5), 1e-12);
  // Running the second tower's output does not move the EMAs; the main tower's update ops do.
  expect_tensor(s->variable_value(var_node(env.g, "bn/mean/EMA")), {2}, m, 0);
  s->run({}, {{x, f64({4, 2}, xv)}}, update_ops(env.g));
  std::vector<double> ubm, ubv;
  channel_stats(xv, 2, true, &ubm, &ubv);
  expect_tensor(s->variable_value(var_node(env.g, "bn/mean/EMA")), {2},
                {m[0] * 0.9 + bm[0] * 0.1, m[1] * 0.9 + bm[1] * 0.1}, 1e-12);
  expect_tensor(s->variable_value(var_node(env.g, "bn/variance/EMA")), {2},
                {v[0] * 0.9 + ubv[0] * 0.1, v[1] * 0.9 + ubv[1] * 0.1}, 1e-12);
}

TEST(BatchNorm, EmaUpdateModes) {
  GraphEnv env;
  Output x = ops::placeholder(DType::F64, {2, 1}, "x");
  Output internal =
      BatchNorm("internal", x, BatchNormOptions().ema_update(EmaUpdate::kInternal).momentum(0.5));
  BatchNorm("skip", x, BatchNormOptions().ema_update(EmaUpdate::kSkip));
  BatchNorm("infer", x, BatchNormOptions().training(false));
  BatchNorm("forced", x, BatchNormOptions().training(false));  // makes the variables
  EXPECT_TRUE(update_ops(env.g).empty());
  {
    // tensorpack: a BatchNorm forced to train inside an inference tower does update.
    TowerContext pred("pred", false);
    BatchNorm("forced", x, BatchNormOptions().training(true));
  }
  EXPECT_EQ(update_ops(env.g).size(), 2u);
  auto s = init_session(env.g);
  s->run({internal}, {{x, f64({2, 1}, {1, 3})}});  // mean 2, unbiased var 2
  expect_tensor(s->variable_value(var_node(env.g, "internal/mean/EMA")), {1}, {1}, 1e-12);
  expect_tensor(s->variable_value(var_node(env.g, "internal/variance/EMA")), {1}, {1.5}, 1e-12);
}

// ---- end-to-end gradient check ----------------------------------------------------------------

/// Checks d loss / d v for every trainable variable against central differences.
void check_network_gradients(Graph& g, const Output& loss, const FeedDict& feeds, uint64_t seed) {
  std::vector<Output> vars = trainable_variables("", &g);
  ASSERT_FALSE(vars.empty());
  std::vector<Output> grads = gradients({loss}, vars);
  auto s = init_session(g);
  std::mt19937_64 rng(seed);
  // Non-trivial values everywhere (biases, beta, gamma included).
  for (const Output& v : vars) {
    const bool is_gamma = v.node->name().find("gamma") != std::string::npos;
    s->set_variable_value(v.node, random_tensor(DType::F64, v.shape(), rng, is_gamma ? 0.5 : -0.7,
                                                is_gamma ? 1.5 : 0.7));
  }
  std::vector<Output> fetches = grads;
  std::vector<Tensor> analytic = s->run(fetches, feeds);
  const double eps = 1e-6;
  int checked = 0;
  for (size_t vi = 0; vi < vars.size(); ++vi) {
    ASSERT_TRUE(grads[vi].valid()) << vars[vi].node->name();
    Tensor base = s->variable_value(vars[vi].node).clone();
    std::vector<double> a = vals(analytic[vi]);
    for (int64_t i = 0; i < base.num_elements(); ++i) {
      Tensor plus = base.clone(), minus = base.clone();
      plus.data<double>()[i] += eps;
      minus.data<double>()[i] -= eps;
      s->set_variable_value(vars[vi].node, plus);
      double lp = s->run({loss}, feeds)[0].item<double>();
      s->set_variable_value(vars[vi].node, minus);
      double lm = s->run({loss}, feeds)[0].item<double>();
      double numeric = (lp - lm) / (2 * eps);
      double an = a[static_cast<size_t>(i)];
      EXPECT_NEAR(an, numeric, 1e-5 * std::max({1.0, std::abs(an), std::abs(numeric)}))
          << vars[vi].node->name() << "[" << i << "]";
      ++checked;
    }
    s->set_variable_value(vars[vi].node, base);
  }
  EXPECT_GT(checked, 0);
}

TEST(LayerGradient, ConvBatchNormReluPoolFullyConnected) {
  GraphEnv env;
  env.g.set_seed(1);
  Output x = ops::placeholder(DType::F64, {2, 5, 5, 2}, "x");
  Output h = Conv2D("conv", x, 3, 3);
  h = BatchNorm("bn", h);  // training (outside any tower)
  h = ops::relu(h);
  h = MaxPooling("pool", h, 2);
  Output out = FullyConnected("fc", h, 4);
  Output loss = ops::sum(ops::square(out));
  EXPECT_EQ(names_of(trainable_variables()),
            (std::vector<std::string>{"conv/W", "conv/b", "bn/beta", "bn/gamma", "fc/W", "fc/b"}));
  std::mt19937_64 rng(21);
  check_network_gradients(env.g, loss, {{x, random_tensor(DType::F64, {2, 5, 5, 2}, rng, -1, 1)}},
                          5);
}

TEST(BatchNorm, ModeNamesParse) {
  // ema_update: tensorpack's "default" is "collection".
  EXPECT_EQ(parse_ema_update("collection"), EmaUpdate::kCollection);
  EXPECT_EQ(parse_ema_update("default"), EmaUpdate::kCollection);
  EXPECT_EQ(parse_ema_update("internal"), EmaUpdate::kInternal);
  EXPECT_EQ(parse_ema_update("skip"), EmaUpdate::kSkip);
  for (EmaUpdate m : {EmaUpdate::kCollection, EmaUpdate::kInternal, EmaUpdate::kSkip})
    EXPECT_EQ(parse_ema_update(ema_update_name(m)), m) << ema_update_name(m);
  expect_error([] { parse_ema_update(""); },
               {"BatchNorm: unknown ema_update ''", "(accepted: collection, internal, skip, default)"});
  // sync_statistics: tensorpack's "nccl" and "horovod" are "towers"; None is "" or "none".
  EXPECT_EQ(parse_sync_statistics(""), SyncStatistics::kNone);
  EXPECT_EQ(parse_sync_statistics("none"), SyncStatistics::kNone);
  EXPECT_EQ(parse_sync_statistics("towers"), SyncStatistics::kTowers);
  EXPECT_EQ(parse_sync_statistics("nccl"), SyncStatistics::kTowers);
  EXPECT_EQ(parse_sync_statistics("horovod"), SyncStatistics::kTowers);
  for (SyncStatistics m : {SyncStatistics::kNone, SyncStatistics::kTowers})
    EXPECT_EQ(parse_sync_statistics(sync_statistics_name(m)), m) << sync_statistics_name(m);
  expect_error([] { parse_sync_statistics("mpi"); },
               {"BatchNorm: unknown sync_statistics 'mpi'", "(accepted: none, towers, nccl, horovod, \"\")"});
}

TEST(LayerGradient, TransposedConvPoolingAndActivations) {
  GraphEnv env;
  env.g.set_seed(2);
  Output x = ops::placeholder(DType::F64, {2, 3, 3, 2}, "x");
  Output h =
      Conv2DTranspose("up", x, 2, 3, Conv2DTransposeOptions().strides(2).activation(ops::tanh));
  h = BatchNorm("bn", h, BatchNormOptions().axis(3));
  h = AvgPooling("pool", h, 2, PoolingOptions().strides(1).padding("SAME"));
  Output g1 = GlobalAvgPooling("gap", h);
  Output c = Conv2D("conv", h, 2, 2, Conv2DOptions().strides(2).activation(activations::gelu()));
  Output f =
      FullyConnected("fc", Flatten("flat", c), 3, FullyConnectedOptions().activation(ops::sigmoid));
  Output loss = ops::sum(ops::square(f)) + ops::sum(g1 * g1) * 3.0;
  std::mt19937_64 rng(22);
  check_network_gradients(env.g, loss, {{x, random_tensor(DType::F64, {2, 3, 3, 2}, rng, -1, 1)}},
                          6);
}

}  // namespace
}  // namespace spire::testing
