// Tests of variables and variable scopes (layers/variables.h): full names,
// reuse rules and their errors, inherited reuse, re-entered scope objects,
// name scopes vs variable names, collections, initializer nodes and groups,
// new_variable, and per-graph isolation of the variable store.
#include <algorithm>

#include "layers/variables.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

bool contains(const std::vector<Output>& v, const Output& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

std::vector<std::string> names(const std::vector<Output>& v) {
  std::vector<std::string> out;
  for (const auto& o : v) out.push_back(o.node->name());
  return out;
}

TEST(Variables, FullNamesFromNestedScopes) {
  Graph g;
  DefaultGraphGuard guard(g);
  Variable top = get_variable("t", {2});
  EXPECT_EQ(top.name(), "t");
  VariableScopeGuard outer("outer");
  EXPECT_EQ(current_variable_scope().name, "outer");
  {
    VariableScopeGuard inner("inner");
    Variable w = get_variable("w", {3, 4});
    EXPECT_EQ(w.name(), "outer/inner/w");
    EXPECT_EQ(w.node()->op_type(), "Variable");
    EXPECT_EQ(w.shape(), Shape({3, 4}));
    EXPECT_EQ(w.dtype(), DType::F32);
    EXPECT_TRUE(w.trainable);
    EXPECT_EQ(g.find_node("outer/inner/w"), w.node());
    // Initializer under "<var>/Initializer", Assign under "<var>/".
    ASSERT_NE(w.initializer, nullptr);
    EXPECT_EQ(w.initializer->name(), "outer/inner/w/Assign");
    EXPECT_EQ(w.initializer->op_type(), "Assign");
    EXPECT_EQ(w.initializer->input(0), w.value);
    EXPECT_EQ(w.initializer->input(1).node->name().rfind("outer/inner/w/Initializer/", 0), 0u)
        << w.initializer->input(1).node->name();
  }
  EXPECT_EQ(current_variable_scope().name, "outer");
  EXPECT_EQ(g.name_scope(), "outer/");
}

TEST(Variables, SecondCreationWithoutReuseNamesFirstCallSite) {
  Graph g;
  DefaultGraphGuard guard(g);
  VariableScopeGuard s("a");
  get_variable("w", {2, 2});  // the line recorded below
  const int first_line = __LINE__ - 1;
  expect_error([&] { get_variable("w", {2, 2}); },
               {"variable 'a/w' already exists", "variables_test.cc:" + std::to_string(first_line),
                "name scope 'a/'", "reuse"});
}

TEST(Variables, ReuseReturnsExistingAndChecksShapeAndDtype) {
  Graph g;
  DefaultGraphGuard guard(g);
  Variable w;
  {
    VariableScopeGuard s("a");
    w = get_variable("w", {2, 3});
  }
  {
    VariableScopeGuard s("a", Reuse::kReuse);
    EXPECT_EQ(s.scope().name, "a");
    EXPECT_TRUE(s.scope().reuse);
    EXPECT_EQ(g.name_scope(), "a_1/");  // name scope uniquified, variable scope kept
    Variable again = get_variable("w", {2, 3});
    EXPECT_EQ(again.node(), w.node());
    expect_error([&] { get_variable("w", {3, 2}); },
                 {"variable 'a/w'", "[2, 3]", "[3, 2]"});
    expect_error([&] { get_variable("w", {2, 3}, DType::F64); }, {"variable 'a/w'", "f32", "f64"});
    expect_error([&] { get_variable("nope", {1}); },
                 {"variable 'a/nope' does not exist", "set reuse off to create it"});
  }
  EXPECT_EQ(all_variables(&g).size(), 1u);
}

TEST(Variables, ReuseIsInheritedByInnerScopes) {
  Graph g;
  DefaultGraphGuard guard(g);
  Variable w;
  {
    VariableScopeGuard a("a");
    VariableScopeGuard b("b");
    EXPECT_FALSE(b.scope().reuse);
    w = get_variable("w", {1});
  }
  {
    VariableScopeGuard a("a", Reuse::kReuse);
    VariableScopeGuard b("b");
    EXPECT_TRUE(b.scope().reuse);
    EXPECT_EQ(get_variable("w", {1}).node(), w.node());
    expect_error([&] { get_variable("v", {1}); }, {"'a/b/v' does not exist"});
    // Explicitly turning reuse off inside creates.
    VariableScopeGuard c("c", Reuse::kNoReuse);
    EXPECT_EQ(get_variable("v", {1}).name(), "a/b/c/v");
  }
}

TEST(Variables, ReenteringScopeObjectGivesSameNames) {
  Graph g;
  DefaultGraphGuard guard(g);
  VariableScope saved;
  Variable w;
  {
    NameScope ns(g, "outer_ns");
    VariableScopeGuard s("enc");
    saved = s.scope();
    EXPECT_EQ(saved.original_name_scope, "outer_ns/enc/");
    w = get_variable("w", {2});
  }
  {
    VariableScopeGuard other("other");
    VariableScopeGuard again(saved, Reuse::kReuse);
    EXPECT_EQ(again.scope().name, "enc");  // not "other/enc"
    EXPECT_EQ(g.name_scope(), "outer_ns/enc/");  // the original name scope re-entered
    EXPECT_EQ(get_variable("w", {2}).node(), w.node());
    EXPECT_EQ(ops::scalar(1, DType::F32).node->name(), "outer_ns/enc/Const");
  }
  EXPECT_EQ(current_variable_scope().name, "");
  EXPECT_EQ(g.name_scope(), "");
  {
    // Without reuse, re-entering and creating a new variable works; the old one still clashes.
    VariableScopeGuard again(saved);
    EXPECT_EQ(get_variable("b", {2}).name(), "enc/b");
    expect_error([&] { get_variable("w", {2}); }, {"'enc/w' already exists"});
  }
}

TEST(Variables, NameScopeDoesNotChangeVariableNames) {
  Graph g;
  DefaultGraphGuard guard(g);
  NameScope ns(g, "ns");
  VariableScopeGuard vs("vs");
  EXPECT_EQ(g.name_scope(), "ns/vs/");
  Variable w;
  {
    NameScope inner(g, "deeper");
    w = get_variable("w", {2});
    EXPECT_EQ(ops::scalar(1, DType::F32).node->name(), "ns/vs/deeper/Const");
  }
  EXPECT_EQ(w.name(), "vs/w");
  EXPECT_EQ(w.initializer->name(), "vs/w/Assign");
  EXPECT_EQ(g.name_scope(), "ns/vs/");
}

TEST(Variables, VariableScopeOpensUniquifiedNameScope) {
  Graph g;
  DefaultGraphGuard guard(g);
  {
    VariableScopeGuard a("a");
    EXPECT_EQ(a.scope().original_name_scope, "a/");
    EXPECT_EQ(ops::scalar(1, DType::F32).node->name(), "a/Const");
  }
  {
    VariableScopeGuard a("a", Reuse::kReuse);
    EXPECT_EQ(a.scope().name, "a");
    EXPECT_EQ(a.scope().original_name_scope, "a_1/");
    EXPECT_EQ(ops::scalar(1, DType::F32).node->name(), "a_1/Const");
  }
}

TEST(Variables, NameTakenByOtherNodeThrows) {
  Graph g;
  DefaultGraphGuard guard(g);
  {
    NameScope ns(g, "a");
    ops::scalar(1, DType::F32);  // "a/Const"
  }
  VariableScopeGuard vs("a");
  expect_error([&] { get_variable("Const", {1}); },
               {"'a/Const'", "already used", "op Const"});
}

TEST(Variables, DefaultAndScopeInitializers) {
  Graph g;
  DefaultGraphGuard guard(g);
  Variable f = get_variable("f", {4, 5});
  Variable i = get_variable("i", {3}, DType::I32);
  Variable c = get_variable("c", {2}, DType::F32, init::constant(2.5));
  Variable s;
  {
    VariableScopeGuard scope("s", Reuse::kInherit, init::ones());
    s = get_variable("x", {2, 2});
    VariableScopeGuard inner("in");  // initializer inherited
    Variable y = get_variable("y", {3});
    Session sess(g);
    sess.run({}, {}, {y.initializer});
    expect_tensor(sess.run({y.value})[0], {3}, {1, 1, 1});
  }
  Session sess(g);
  sess.run({}, {}, {global_variables_initializer(&g)});
  auto vals = sess.run({f.value, i.value, c.value, s.value});
  // glorot_uniform for floats: limit sqrt(6 / (4 + 5)).
  double limit = std::sqrt(6.0 / 9.0);
  for (int64_t k = 0; k < vals[0].num_elements(); ++k)
    EXPECT_LE(std::abs(vals[0].element_as_double(k)), limit);
  expect_tensor(vals[1], {3}, {0, 0, 0});
  EXPECT_EQ(vals[1].dtype(), DType::I32);
  expect_tensor(vals[2], {2}, {2.5, 2.5});
  expect_tensor(vals[3], {2, 2}, {1, 1, 1, 1});
}

TEST(Variables, CollectionsMembership) {
  Graph g;
  DefaultGraphGuard guard(g);
  VariableScopeGuard vs("m");
  Variable t = get_variable("t", {1});
  Variable nt = get_variable("nt", {1}, DType::F32, nullptr, /*trainable=*/false);
  Variable mv = get_variable("mv", {1}, DType::F32, nullptr, true, {GraphKeys::MODEL_VARIABLES});
  Variable lv = get_variable("lv", {1}, DType::F32, init::zeros(), false,
                             {GraphKeys::LOCAL_VARIABLES});
  EXPECT_TRUE(contains(global_variables(), t));
  EXPECT_TRUE(contains(trainable_variables(), t));
  EXPECT_TRUE(contains(global_variables(), nt));
  EXPECT_FALSE(contains(trainable_variables(), nt));
  EXPECT_FALSE(nt.trainable);
  EXPECT_TRUE(contains(model_variables(), mv));
  EXPECT_TRUE(contains(global_variables(), mv));
  EXPECT_TRUE(contains(trainable_variables(), mv));
  EXPECT_FALSE(contains(model_variables(), t));
  EXPECT_TRUE(contains(local_variables(), lv));
  EXPECT_FALSE(contains(global_variables(), lv));  // as TF: local variables are not global
  EXPECT_FALSE(contains(trainable_variables(), lv));
  // Reuse does not add the variable twice.
  {
    VariableScopeGuard r("", Reuse::kReuse);
    EXPECT_EQ(get_variable("t", {1}).node(), t.node());
  }
  EXPECT_EQ(global_variables().size(), 3u);
  // The global initializer also covers local variables.
  Node* init = global_variables_initializer();
  EXPECT_EQ(init->op_type(), "NoOp");
  EXPECT_EQ(init->control_inputs().size(), 4u);
  Session sess(g);
  sess.run({}, {}, {init});
  expect_tensor(sess.run({lv.value})[0], {1}, {0});
}

TEST(Variables, ScopePrefixQueries) {
  Graph g;
  DefaultGraphGuard guard(g);
  {
    VariableScopeGuard a("enc");
    get_variable("w", {1});
    VariableScopeGuard b("fc");
    get_variable("w", {1});
  }
  {
    VariableScopeGuard a("dec");
    get_variable("w", {1});
  }
  get_variable("encore", {1});
  EXPECT_EQ(names(global_variables("enc/")),
            (std::vector<std::string>{"enc/w", "enc/fc/w"}));
  EXPECT_EQ(names(trainable_variables("dec")), (std::vector<std::string>{"dec/w"}));
  EXPECT_EQ(global_variables().size(), 4u);
  EXPECT_EQ(all_variables().size(), 4u);
  EXPECT_EQ(all_variables()[3].name(), "encore");
}

TEST(Variables, NewVariableIsNamedByNameScopeAndNeverShared) {
  Graph g;
  DefaultGraphGuard guard(g);
  VariableScopeGuard vs("vs");  // variable scope does not matter, its name scope does
  NameScope ns(g, "ns");
  Variable a = new_variable("step", Tensor::scalar<int64_t>(7));
  Variable b = new_variable("step", Tensor::scalar<int64_t>(0), false, {GraphKeys::LOCAL_VARIABLES});
  EXPECT_EQ(a.name(), "vs/ns/step");
  EXPECT_EQ(b.name(), "vs/ns/step_1");
  EXPECT_NE(a.node(), b.node());
  EXPECT_FALSE(a.trainable);
  EXPECT_TRUE(contains(global_variables(), a));
  EXPECT_FALSE(contains(trainable_variables(), a));
  EXPECT_FALSE(contains(global_variables(), b));
  EXPECT_TRUE(contains(local_variables(), b));
  Variable t = new_variable("w", Tensor::from_vector<float>({2}, {1, 2}), true);
  EXPECT_TRUE(contains(trainable_variables(), t));
  EXPECT_EQ(&variable_of(a.value), &variable_of(a.value));
  EXPECT_EQ(variable_of(t.value).node(), t.node());
  // new_variable names are not get_variable names: get_variable cannot take them over,
  // not even with reuse.
  expect_error([&] { get_variable("ns/step", {}, DType::I64); },
               {"'vs/ns/step'", "already used", "not a variable made by get_variable"});
  {
    VariableScopeGuard r("", Reuse::kReuse);
    expect_error([&] { get_variable("ns/step", {}, DType::I64); }, {"'vs/ns/step' does not exist"});
  }
  Session sess(g);
  sess.run({}, {}, {variables_initializer({a.value, t.value}, "init_some")});
  expect_tensor(sess.run({a.value})[0], {}, {7});
  expect_tensor(sess.run({t.value})[0], {2}, {1, 2});
}

TEST(Variables, VariablesInitializerGroupsAssigns) {
  Graph g;
  DefaultGraphGuard guard(g);
  Variable a = get_variable("a", {2}, DType::F32, init::constant(3));
  Variable b = get_variable("b", {2}, DType::F32, init::constant(4));
  Node* init = variables_initializer({a.value}, "init_a");
  EXPECT_EQ(init->name(), "init_a");
  EXPECT_EQ(init->op_type(), "NoOp");
  ASSERT_EQ(init->control_inputs().size(), 1u);
  EXPECT_EQ(init->control_inputs()[0], a.initializer);
  Session sess(g);
  sess.run({}, {}, {init});
  expect_tensor(sess.run({a.value})[0], {2}, {3, 3});
  EXPECT_ANY_THROW(sess.run({b.value}));  // b is not initialized
  // Variables not made by get_variable/new_variable have no recorded initializer.
  Output raw = ops::variable({1}, DType::F32, "raw");
  expect_error([&] { variables_initializer({raw}); }, {"'raw'", "not a variable made by"});
  expect_error([&] { variable_of(ops::scalar(1, DType::F32)); }, {"not a variable"});
  // Empty list: a plain NoOp.
  EXPECT_EQ(variables_initializer({}, "nothing")->control_inputs().size(), 0u);
}

TEST(Variables, StoresArePerGraph) {
  Graph g1, g2;
  Variable w1, w2;
  {
    DefaultGraphGuard guard(g1);
    VariableScopeGuard s("a");
    w1 = get_variable("w", {1});
    EXPECT_EQ(current_variable_scope(&g2).name, "");  // scopes are per graph
  }
  {
    DefaultGraphGuard guard(g2);
    VariableScopeGuard s("a");
    w2 = get_variable("w", {1});  // no clash with g1
  }
  EXPECT_EQ(w1.name(), w2.name());
  EXPECT_NE(w1.node(), w2.node());
  EXPECT_EQ(all_variables(&g1).size(), 1u);
  EXPECT_EQ(all_variables(&g2).size(), 1u);
  EXPECT_EQ(w1.node()->graph(), &g1);
}

TEST(Variables, InvalidArguments) {
  Graph g;
  DefaultGraphGuard guard(g);
  expect_error([&] { get_variable("", {1}); }, {"empty variable name"});
  expect_error([&] { get_variable("p", {-1, 2}); }, {"'p'", "fully defined"});
  Initializer wrong = [](const Shape&, DType, Graph& gr) {
    return ops::constant(Tensor::from_vector<float>({3}, {1, 2, 3}), "", &gr);
  };
  expect_error([&] { get_variable("q", {2}, DType::F32, wrong); },
               {"initializer of variable 'q'", "f32[3]", "f32[2]"});
}

}  // namespace
}  // namespace spire::testing

namespace spire::testing {
namespace {

TEST(VariableCreation, IgnoresEnclosingControlDependencies) {
  Graph g;
  DefaultGraphGuard guard(g);
  Node* dep = ops::no_op("dep");
  Variable a, b;
  {
    ControlDependencies deps(g, {dep});
    a = get_variable("a", {2}, DType::F32, init::zeros());
    b = new_variable("b", Tensor::zeros(DType::F32, {2}));
    EXPECT_EQ(ops::identity(a.value).node->control_inputs().size(), 1u);  // ordinary nodes still get them
  }
  EXPECT_TRUE(a.node()->control_inputs().empty());
  EXPECT_TRUE(a.initializer->control_inputs().empty());
  EXPECT_TRUE(b.node()->control_inputs().empty());
  EXPECT_TRUE(b.initializer->control_inputs().empty());
}

}  // namespace
}  // namespace spire::testing
