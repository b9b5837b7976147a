// Tests of tower contexts and tower functions (layers/tower.h): name and
// variable scopes of towers, reuse between training and inference towers,
// the tower-function rules (reserved "tower" prefix, tf.Variable in towers,
// new variables in towers that do not own them, changing the reuse of outside
// scopes, nested towers) and TowerFunc signatures and handle lookups.
#include <algorithm>

#include "layers/tower.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

/// A tiny model: one dense layer in variable scope "fc", output named "fc/out".
Output dense(const Output& x, int64_t units) {
  VariableScopeGuard s("fc");
  Variable w = get_variable("W", {x.shape()[1], units});
  Variable b = get_variable("b", {units}, DType::F32, init::zeros());
  return ops::add(ops::matmul(x, w.value), b.value, "out");
}

TEST(Tower, ContextScopesAndCurrentContext) {
  Graph g;
  DefaultGraphGuard guard(g);
  EXPECT_EQ(get_current_tower_context(), nullptr);
  {
    TowerContext ctx("tower0", true);
    EXPECT_EQ(get_current_tower_context(), &ctx);
    EXPECT_EQ(get_current_tower_context(&g), &ctx);
    EXPECT_TRUE(ctx.is_training());
    EXPECT_TRUE(ctx.is_main_training_tower());
    EXPECT_TRUE(ctx.has_own_variables());
    EXPECT_EQ(ctx.name(), "tower0");
    EXPECT_EQ(&ctx.graph(), &g);
    EXPECT_EQ(g.name_scope(), "tower0/");
    EXPECT_EQ(current_variable_scope().name, "");
    EXPECT_FALSE(current_variable_scope().reuse);
    EXPECT_EQ(ops::scalar(1, DType::F32).node->name(), "tower0/Const");
    EXPECT_EQ(get_variable("w", {1}).name(), "w");  // variables ignore the tower name scope
  }
  EXPECT_EQ(get_current_tower_context(), nullptr);
  EXPECT_EQ(g.name_scope(), "");
  {
    TowerContext ctx("", true);
    EXPECT_EQ(g.name_scope(), "");  // no name scope
    EXPECT_EQ(ops::scalar(1, DType::F32).node->name(), "Const");
  }
  {
    // Entered twice with the same name: the exact same name scope.
    TowerContext ctx("tower0", true);
    EXPECT_EQ(g.name_scope(), "tower0/");
  }
  // Another graph has no tower.
  Graph other;
  TowerContext ctx("tower0", true, "", 0, 1, &other);
  EXPECT_EQ(get_current_tower_context(&other), &ctx);
  EXPECT_EQ(get_current_tower_context(&g), nullptr);
}

TEST(Tower, TrainingThenInferenceTowerShareVariables) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {-1, 3}, "x");
  Output train_out, pred_out;
  Variable w_train;
  {
    TowerContext ctx("tower0", true);
    train_out = dense(x, 2);
    w_train = variable_of(g.find_node("fc/W")->output(0));
  }
  bool inference_saw_training = true;
  Variable w_pred;
  {
    TowerContext ctx("predict", false);
    EXPECT_FALSE(ctx.has_own_variables());
    EXPECT_TRUE(current_variable_scope().reuse);
    inference_saw_training = get_current_tower_context()->is_training();
    pred_out = dense(x, 2);
    VariableScopeGuard s("fc");
    w_pred = get_variable("W", {3, 2});
  }
  EXPECT_FALSE(inference_saw_training);
  EXPECT_EQ(w_pred.node(), w_train.node());
  EXPECT_EQ(train_out.node->name(), "tower0/fc/out");
  EXPECT_EQ(pred_out.node->name(), "predict/fc/out");
  EXPECT_EQ(all_variables().size(), 2u);
  EXPECT_EQ(trainable_variables().size(), 2u);
  // Both towers compute the same values from the shared variables.
  Session s(g);
  s.run({}, {}, {global_variables_initializer()});
  Tensor xv = Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  auto r = s.run({train_out, pred_out}, {{x, xv}});
  EXPECT_EQ(r[0].to_vector<float>(), r[1].to_vector<float>());
}

TEST(Tower, ReplicaTrainingTowersReuseUnlessOwnVariableScope) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {2, 3}, "x");
  {
    TowerContext t0("tower0", true, "", 0, 2);
    dense(x, 4);
  }
  {
    TowerContext t1("tower1", true, "", 1, 2);
    EXPECT_FALSE(t1.is_main_training_tower());
    EXPECT_FALSE(t1.has_own_variables());
    EXPECT_TRUE(current_variable_scope().reuse);
    EXPECT_EQ(dense(x, 4).node->name(), "tower1/fc/out");
  }
  EXPECT_EQ(all_variables().size(), 2u);
  {
    // A replica with its own variable scope owns (creates) its variables.
    TowerContext t1("tower1", true, "tower1", 1, 2);
    EXPECT_TRUE(t1.has_own_variables());
    EXPECT_FALSE(current_variable_scope().reuse);
    EXPECT_EQ(current_variable_scope().name, "tower1");
    EXPECT_EQ(g.name_scope(), "tower1/");  // the tower's name scope, not the vs's "tower1_1/"
    dense(x, 4);
  }
  EXPECT_EQ(g.name_scope(), "");
  EXPECT_EQ(current_variable_scope().name, "");
  EXPECT_NE(g.find_node("tower1/fc/W"), nullptr);
  EXPECT_EQ(trainable_variables("tower1/").size(), 2u);
  EXPECT_EQ(all_variables().size(), 4u);
}

TEST(Tower, InferenceTowerReadsTrainingVariablesAcrossOwnVariableScope) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {2, 3}, "x");
  {
    TowerContext t("gen", true, "gen");
    dense(x, 2);
  }
  {
    TowerContext p("gen_predict", false, "gen");
    EXPECT_TRUE(current_variable_scope().reuse);
    EXPECT_EQ(dense(x, 2).node->name(), "gen_predict/fc/out");
  }
  EXPECT_EQ(all_variables().size(), 2u);
}

TEST(Tower, RuleReservedTowerPrefix) {
  Graph g;
  DefaultGraphGuard guard(g);
  TowerContext ctx("tower0", true);
  // Legal: ordinary names, and "tower" not at the start of a component.
  {
    VariableScopeGuard s("mytower");
    get_variable("w_tower", {1});
  }
  expect_error([&] { VariableScopeGuard s("tower1"); },
               {"variable scope 'tower1'", "inside tower 'tower0'", "reserved"});
  expect_error([&] { VariableScopeGuard s("a/towerx"); }, {"'towerx'", "reserved"});
  expect_error([&] { get_variable("tower_w", {1}); },
               {"variable 'tower_w'", "'tower_w'", "tower 'tower0'", "reserved"});
  {
    NameScope ns(g, "tower2");
    expect_error([&] { get_variable("v", {1}); }, {"name scope 'tower0/tower2/'", "reserved"});
  }
  EXPECT_EQ(current_variable_scope().name, "");  // failed guards left no scope behind
  EXPECT_EQ(g.name_scope(), "tower0/");
}

TEST(Tower, ReservedPrefixAllowedOutsideTowers) {
  Graph g;
  DefaultGraphGuard guard(g);
  VariableScopeGuard s("tower5");
  EXPECT_EQ(get_variable("tower_w", {1}).name(), "tower5/tower_w");
}

TEST(Tower, RuleNewVariableInsideTower) {
  Graph g;
  DefaultGraphGuard guard(g);
  Variable outside = new_variable("global_step", Tensor::scalar<int64_t>(0));
  EXPECT_EQ(outside.name(), "global_step");
  TowerContext ctx("tower0", true);
  expect_error([&] { new_variable("counter", Tensor::scalar<int64_t>(0)); },
               {"new_variable 'counter'", "inside tower 'tower0'", "use get_variable"});
  // get_variable works for the same purpose.
  EXPECT_EQ(get_variable("counter", {}, DType::I64, nullptr, false).name(), "counter");
}

TEST(Tower, RuleNewTrainableVariableInTowerWithoutOwnVariables) {
  Graph g;
  DefaultGraphGuard guard(g);
  {
    TowerContext t0("tower0", true);
    get_variable("w", {1});
  }
  {
    TowerContext p("predict", false);
    // Under the tower's reuse: the variable must exist.
    expect_error([&] { get_variable("v", {1}); }, {"'v' does not exist"});
    // Turning reuse off does not let an inference tower create trainable variables.
    VariableScopeGuard s("extra", Reuse::kNoReuse);
    expect_error([&] { get_variable("v", {1}); },
                 {"cannot create new trainable variable 'extra/v'", "inference tower 'predict'",
                  "does not own variables"});
    // Non-trainable state is allowed.
    EXPECT_EQ(get_variable("stat", {1}, DType::F32, nullptr, false).name(), "extra/stat");
  }
  {
    TowerContext t1("tower1", true, "", 1, 2);
    VariableScopeGuard s("", Reuse::kNoReuse);
    expect_error([&] { get_variable("u", {1}); },
                 {"cannot create new trainable variable 'u'", "training tower 'tower1'"});
  }
}

TEST(Tower, RuleChangingReuseOfOutsideScope) {
  Graph g;
  DefaultGraphGuard guard(g);
  VariableScope outside, outside_reuse;
  {
    VariableScopeGuard s("enc");
    outside = s.scope();
    get_variable("w", {1});
  }
  {
    VariableScopeGuard s("enc", Reuse::kReuse);
    outside_reuse = s.scope();
  }
  {
    TowerContext p("predict", false);
    // Legal: re-entering keeps the tower's reuse (inherit, or the same explicit value).
    {
      VariableScopeGuard s(outside);
      EXPECT_TRUE(s.scope().reuse);
      EXPECT_EQ(s.scope().name, "enc");
      get_variable("w", {1});
    }
    { VariableScopeGuard s(outside, Reuse::kReuse); }
    // Illegal: turning reuse off on a scope made outside the tower.
    expect_error([&] { VariableScopeGuard s(outside, Reuse::kNoReuse); },
                 {"re-entering variable scope 'enc'", "tower 'predict'", "reuse",
                  "created outside the tower"});
    EXPECT_EQ(current_variable_scope().name, "");
    EXPECT_EQ(g.name_scope(), "predict/");
  }
  {
    TowerContext t("tower0", true);
    // Illegal: a scope object saved with reuse on would turn reuse on in the main tower.
    expect_error([&] { VariableScopeGuard s(outside_reuse); },
                 {"'enc'", "from off to on", "tower 'tower0'"});
    // Legal: a scope the tower function created itself may change reuse.
    VariableScope mine;
    {
      VariableScopeGuard s("dec");
      mine = s.scope();
      get_variable("w", {1});
    }
    VariableScopeGuard again(mine, Reuse::kReuse);
    EXPECT_EQ(get_variable("w", {1}).name(), "dec/w");
  }
}

TEST(Tower, RuleNoNestedTowers) {
  Graph g;
  DefaultGraphGuard guard(g);
  TowerContext outer("tower0", true);
  expect_error([&] { TowerContext inner("tower1", true, "", 1, 2); },
               {"cannot open tower 'tower1' inside tower 'tower0'"});
  EXPECT_EQ(get_current_tower_context(), &outer);
  EXPECT_EQ(g.name_scope(), "tower0/");
  expect_error([&] { TowerContext bad("x", true, "", 2, 2); }, {"TowerContexts cannot be nested"});
}

TEST(Tower, BadIndexRejected) {
  Graph g;
  DefaultGraphGuard guard(g);
  expect_error([&] { TowerContext bad("x", true, "", 2, 2); }, {"index 2", "total 2"});
  EXPECT_EQ(get_current_tower_context(), nullptr);
}

TEST(Tower, CollectionInTower) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output outside = ops::scalar(0, DType::F32);
  g.add_to_collection(GraphKeys::UPDATE_OPS, outside);
  TowerContext t("tower0", true);
  Output inside = ops::scalar(1, DType::F32);
  g.add_to_collection(GraphKeys::UPDATE_OPS, inside);
  auto items = t.get_collection_in_tower(GraphKeys::UPDATE_OPS);
  ASSERT_EQ(items.size(), 1u);
  EXPECT_EQ(items[0], inside);
}

TEST(TowerFunc, HandlesAndLookups) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {-1, 3}, "input");
  TowerFunc fn(
      [](const std::vector<Output>& in) {
        Output y = dense(in[0], 2);
        Output c = ops::identity(y, "cost");
        get_current_tower_context()->graph().add_to_collection(GraphKeys::UPDATE_OPS, c);
        return std::vector<Output>{c};
      },
      {{"input", DType::F32, {-1, 3}}});
  expect_error([&] { fn({x}); }, {"must be called inside a TowerContext"});
  {
    TowerContext t("tower0", true);
    const TowerHandle& h = fn({x});
    EXPECT_EQ(h.ns_name, "tower0");
    EXPECT_TRUE(h.is_training);
    EXPECT_EQ(h.outputs.size(), 1u);
    EXPECT_EQ(h.graph, &g);
  }
  {
    TowerContext p("predict", false);
    fn({x});
  }
  ASSERT_EQ(fn.towers().size(), 2u);
  EXPECT_EQ(fn.training_towers().size(), 1u);
  ASSERT_EQ(fn.inference_towers().size(), 1u);
  const TowerHandle& train = fn.tower("tower0");
  const TowerHandle& pred = fn.tower("predict");
  EXPECT_FALSE(pred.is_training);
  EXPECT_EQ(train.get_tensor("cost:0"), train.outputs[0]);
  EXPECT_EQ(train.get_tensor("cost").node->name(), "tower0/cost");
  EXPECT_EQ(pred.get_tensor("fc/out:0").node->name(), "predict/fc/out");
  EXPECT_EQ(pred.get_tensor("input:0"), x);  // by signature name
  EXPECT_EQ(pred.get_tensor("input"), x);
  EXPECT_EQ(pred.get_tensor("tower0/cost:0").node->name(), "tower0/cost");  // absolute
  expect_error([&] { pred.get_tensor("nothing:0"); }, {"tower 'predict'", "no tensor 'nothing:0'"});
  EXPECT_EQ(pred.get_variable("fc/W").node->name(), "fc/W");
  EXPECT_EQ(pred.get_variable("fc/W:0"), train.get_variable("fc/W"));
  expect_error([&] { pred.get_variable("fc/nope"); }, {"no variable 'fc/nope'"});
  auto ups = pred.get_collection(GraphKeys::UPDATE_OPS);
  ASSERT_EQ(ups.size(), 1u);
  EXPECT_EQ(ups[0].node->name(), "predict/cost");
  expect_error([&] { fn.tower("tower7"); }, {"no tower 'tower7'", "'tower0', 'predict'"});
}

TEST(TowerFunc, VariableLookupThroughTowerVariableScope) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {2, 3}, "x");
  TowerFunc fn([](const std::vector<Output>& in) { return std::vector<Output>{dense(in[0], 2)}; },
               {{"x", DType::F32, {2, 3}}});
  TowerContext t("gen", true, "gen");
  const TowerHandle& h = fn({x});
  EXPECT_EQ(h.vs_name, "gen");
  EXPECT_EQ(h.get_variable("fc/W").node->name(), "gen/fc/W");
  EXPECT_EQ(h.get_variable("gen/fc/b").node->name(), "gen/fc/b");
}

TEST(TowerFunc, SignatureChecks) {
  Graph g;
  DefaultGraphGuard guard(g);
  int calls = 0;
  TowerFunc fn([&](const std::vector<Output>& in) { ++calls; return in; },
               {{"img", DType::F32, {-1, 28, 28}}, {"label", DType::I32, {-1}}});
  TowerContext t("tower0", true);
  Output img = ops::placeholder(DType::F32, {8, 28, 28}, "img");
  Output img_unknown = ops::placeholder(DType::F32, {-1, -1, 28}, "img2");
  Output label = ops::placeholder(DType::I32, {8}, "label");
  fn({img, label});
  fn({img_unknown, label});  // unknown dims are compatible
  EXPECT_EQ(calls, 2);
  expect_error([&] { fn({img}); }, {"expected 2 inputs", "got 1"});
  expect_error([&] { fn({img, ops::placeholder(DType::I64, {8})}); },
               {"input 1 ('label')", "i64", "expects i32"});
  expect_error([&] { fn({ops::placeholder(DType::F32, {8, 28, 27}), label}); },
               {"input 0 ('img')", "[8, 28, 27]", "[?, 28, 28]"});
  expect_error([&] { fn({ops::placeholder(DType::F32, {8, 784}), label}); }, {"input 0 ('img')"});
  EXPECT_EQ(calls, 2);
}

TEST(TowerFunc, RejectsReservedNameScopeInsideFunction) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {2}, "x");
  TowerFunc good([](const std::vector<Output>& in) {
    NameScope s(*in[0].graph(), "head");
    return std::vector<Output>{ops::neg(in[0])};
  }, {{"x", DType::F32, {2}}});
  TowerFunc bad([](const std::vector<Output>& in) {
    NameScope s(*in[0].graph(), "tower3");
    return std::vector<Output>{ops::neg(in[0])};
  }, {{"x", DType::F32, {2}}});
  TowerContext t("tower0", true);
  good({x});
  expect_error([&] { bad({x}); }, {"name scope 'tower0/tower3/'", "inside tower 'tower0'", "reserved"});
}

TEST(Tower, StripTowerPrefix) {
  EXPECT_EQ(strip_tower_prefix("tower3/conv0/W"), "conv0/W");
  EXPECT_EQ(strip_tower_prefix("tower12/bn"), "bn");
  EXPECT_EQ(strip_tower_prefix("tower0"), "");
  EXPECT_EQ(strip_tower_prefix("conv0/W"), "conv0/W");
  EXPECT_EQ(strip_tower_prefix("tower/x"), "tower/x");
  EXPECT_EQ(strip_tower_prefix("towerA/x"), "towerA/x");
  EXPECT_EQ(strip_tower_prefix("tower1x/y"), "tower1x/y");
  EXPECT_EQ(strip_tower_prefix("tower-pred-cpu/x"), "tower-pred-cpu/x");
}

TEST(Tower, TrainingTowerNames) {
  EXPECT_EQ(training_tower_name(0), "tower0");
  EXPECT_EQ(training_tower_name(12), "tower12");
  EXPECT_EQ(training_tower_index("tower3/conv0/W"), 3);
  EXPECT_EQ(training_tower_index("tower12"), 12);
  EXPECT_EQ(training_tower_index(training_tower_name(7) + "/x"), 7);
  for (const char* other : {"conv0/W", "tower/x", "towerA/x", "tower1x/y", "tower-pred-cpu/x", "", "x/tower1/y"})
    EXPECT_EQ(training_tower_index(other), -1) << other;
  // Every name starting with "tower" is reserved inside a tower function, not only tower prefixes.
  for (const char* reserved : {"tower", "tower0", "towerx", "tower_w", "tower-pred-cpu"})
    EXPECT_TRUE(is_reserved_tower_name(reserved)) << reserved;
  for (const char* free : {"Tower0", "my_tower", "", "towe"}) EXPECT_FALSE(is_reserved_tower_name(free)) << free;
}

}  // namespace
}  // namespace spire::testing
