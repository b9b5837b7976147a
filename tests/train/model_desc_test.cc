// ModelDesc: signature checks, the cached optimizer, and a model built in a
// training tower and an inference tower sharing variables: in inference
// mode the two inference builds agree exactly and differ from training mode.
#include "layers/layers.h"
#include "tests/support/op_test_util.h"
#include "train/model_desc.h"

namespace spire::testing {
namespace {

class TinyModel : public ModelDesc {
 public:
  std::vector<InputDesc> inputs() const override {
    return {{"x", DType::F64, {-1, 4}}, {"y", DType::I64, {-1}}};
  }
  Output build_graph(const std::vector<Output>& in) override {
    Output h = FullyConnected("fc0", in[0], 6, FullyConnectedOptions().activation(ops::tanh));
    h = BatchNorm("bn", h);
    h = Dropout("drop", h, DropoutOptions().rate(0.5));
    Output logits = FullyConnected("fc1", h, 3);
    return ops::mean(ops::sparse_softmax_cross_entropy_with_logits(logits, in[1]), {}, false, "cost");
  }
  std::shared_ptr<Optimizer> optimizer() override {
    ++optimizer_calls;
    return std::make_shared<MomentumOptimizer>(0.1, 0.9);
  }
  int optimizer_calls = 0;
};

class BadModel : public TinyModel {
 public:
  std::vector<InputDesc> inputs() const override {
    return {{"x", DType::F64, {-1, 4}}, {"x", DType::I64, {-1}}};
  }
};

TEST(ModelDesc, SignatureAndOptimizer) {
  TinyModel m;
  EXPECT_EQ(m.input_names(), (std::vector<std::string>{"x", "y"}));
  Graph g;
  DefaultGraphGuard guard(g);
  auto opt = m.get_optimizer();
  EXPECT_EQ(m.get_optimizer(), opt);
  EXPECT_EQ(m.optimizer_calls, 1);
  BadModel bad;
  expect_error([&] { bad.get_input_signature(); }, {"input name 'x' appears twice"});
  auto phs = m.make_placeholders();
  EXPECT_EQ(phs[0].node->name(), "x");
  EXPECT_EQ(phs[1].dtype(), DType::I64);
}

TEST(ModelDesc, TrainingAndInferenceTowersShareVariables) {
  Graph g;
  DefaultGraphGuard guard(g);
  TinyModel m;
  TowerFunc tf = m.tower_func();
  auto in = m.make_placeholders();
  Output train_cost;
  {
    TowerContext t("", true);
    train_cost = tf(in).outputs[0];
  }
  const size_t vars_after_training = global_variables().size();
  Output c1, c2;
  {
    TowerContext t("pred", false);
    c1 = tf(in).outputs[0];
  }
  {
    TowerContext t("pred2", false);
    c2 = tf(in).outputs[0];
  }
  EXPECT_EQ(global_variables().size(), vars_after_training);  // no new variables
  EXPECT_EQ(tf.towers()[1]->get_variable("fc0/W"), tf.towers()[0]->get_variable("fc0/W"));
  Node* train = m.get_optimizer()->minimize(train_cost);
  Session s(g);
  s.run_targets({global_variables_initializer()});
  std::mt19937_64 rng(3);
  FeedDict feeds = {{in[0], random_tensor(DType::F64, {5, 4}, rng, -1, 1)},
                    {in[1], Tensor::from_vector<int64_t>({5}, {0, 1, 2, 0, 1})}};
  s.run_targets({train}, feeds);
  auto r = s.run({c1, c2, c1, train_cost}, feeds);
  EXPECT_EQ(r[0].item<double>(), r[1].item<double>());  // both inference builds agree exactly
  EXPECT_EQ(r[0].item<double>(), r[2].item<double>());  // and are deterministic
  EXPECT_NE(r[0].item<double>(), r[3].item<double>());  // training mode differs (dropout, batch stats)
}

}  // namespace
}  // namespace spire::testing
