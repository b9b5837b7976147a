// Graph IR tests: unique hierarchical names from name scopes, inference at
// node creation, device scopes, default-graph guards, text printing and
// JSON round trips.
#include <cmath>
#include <limits>

#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

TEST(Graph, UniqueNamesAndNameScopes) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output a = ops::scalar(1, DType::F32);
  Output b = ops::scalar(2, DType::F32);
  EXPECT_EQ(a.node->name(), "Const");
  EXPECT_EQ(b.node->name(), "Const_1");
  {
    NameScope s1(g, "layer");
    Output c = ops::add(a, b);
    EXPECT_EQ(c.node->name(), "layer/Add");
    {
      NameScope s2(g, "inner");
      EXPECT_EQ(ops::neg(c, "n").node->name(), "layer/inner/n");
    }
  }
  {
    NameScope s1(g, "layer");  // re-entering a used name gives a fresh scope
    EXPECT_EQ(s1.scope(), "layer_1/");
    EXPECT_EQ(ops::neg(a).node->name(), "layer_1/Neg");
    NameScope abs(g, "layer/");  // trailing slash: exact absolute scope
    EXPECT_EQ(ops::neg(a).node->name(), "layer/Neg");
  }
  EXPECT_EQ(g.find_node("layer/inner/n")->op_type(), "Neg");
  EXPECT_EQ(g.output_by_name("layer/Add:0").node->name(), "layer/Add");
  expect_error([&] { g.output_by_name("nope:0"); }, {"no node named 'nope'"});
}

TEST(Graph, ShapeInferenceAtCreation) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {-1, 3}, "x");
  Output y = ops::placeholder(DType::F32, {1, 3}, "y");
  Output z = x * y;
  EXPECT_EQ(z.shape(), Shape({-1, 3}));
  EXPECT_EQ(z.dtype(), DType::F32);
  Output w = ops::placeholder(DType::F32, {4, 1}, "w");
  expect_error([&] { ops::mul(x, ops::placeholder(DType::F32, {2}, "v"), "bad"); },
               {"Mul", "'bad'", "[?, 3]", "[2]"});
  EXPECT_EQ(ops::add(w, y).shape(), Shape({4, 3}));
  expect_error([&] { g.add_node("Neg", {}, {}, "no_inputs"); }, {"Neg", "expected 1 inputs, got 0"});
  expect_error([&] { g.add_node("LeakyRelu", {x}, {{"alhpa", 0.1}}, "typo"); }, {"unknown attribute 'alhpa'"});
  expect_error([&] { g.add_node("Cast", {x}, {}, "nodtype"); }, {"missing required attribute 'dtype'"});
  expect_error([&] { g.add_node("Neg", {Output()}, {}, "null_in"); }, {"invalid"});
}

TEST(Graph, DefaultGraphGuardNests) {
  Graph g1, g2;
  {
    DefaultGraphGuard a(g1);
    ops::scalar(1, DType::F32);
    {
      DefaultGraphGuard b(g2);
      ops::scalar(1, DType::F32);
      ops::scalar(1, DType::F32);
    }
    ops::scalar(1, DType::F32);
  }
  EXPECT_EQ(g1.num_nodes(), 2);
  EXPECT_EQ(g2.num_nodes(), 2);
  EXPECT_NE(&default_graph(), &g1);
}

TEST(Graph, DeviceScope) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output a = ops::scalar(1, DType::F32);
  {
    DeviceScope d(g, Device::cuda(1));
    EXPECT_EQ(ops::neg(a).node->device(), Device::cuda(1));
  }
  EXPECT_TRUE(ops::neg(a).node->device().is_cpu());
  EXPECT_EQ(Device::parse("/gpu:2"), Device::cuda(2));
  EXPECT_EQ(Device::parse("cuda"), Device::cuda(0));
  expect_error([] { Device::parse("tpu:0"); }, {"bad device 'tpu:0'"});
}

TEST(Graph, TextListing) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {-1, 2}, "x");
  ops::leaky_relu(x, 0.25, "act");
  std::string text = g.to_text();
  EXPECT_NE(text.find("x = Placeholder() {dtype=f32, shape=[?, 2]} -> f32[?, 2]"), std::string::npos) << text;
  EXPECT_NE(text.find("act = LeakyRelu(x:0) {alpha=0.25} -> f32[?, 2]"), std::string::npos) << text;
}

TEST(Graph, JsonRoundTripRunsTheSame) {
  Graph g;
  DefaultGraphGuard guard(g);
  g.set_seed(42);
  Output x = ops::placeholder(DType::F64, {-1}, "x");
  Tensor c = Tensor::from_vector<double>({3}, {0.1, std::numeric_limits<double>::infinity(), std::nan("")});
  Output k = ops::constant(c, "k");
  Output v = ops::variable({3}, DType::F64, "v");
  Output init = ops::assign(v, k, "init");
  Output y;
  {
    NameScope s(g, "block");
    ControlDependencies deps(g, {init.node});
    y = ops::add(ops::mul(x, ops::identity(v)), ops::scalar(1, DType::F64), "y");
  }
  std::string json = g.to_json();
  auto g2 = Graph::from_json(json);
  EXPECT_EQ(g2->to_json(), json);
  EXPECT_EQ(g2->to_text(), g.to_text());
  EXPECT_EQ(g2->seed(), 42);
  Output x2 = g2->output_by_name("x:0");
  Output y2 = g2->output_by_name("block/y:0");
  Tensor xv = Tensor::from_vector<double>({3}, {2, 0, 1});
  Session s1(g), s2(*g2);
  Tensor r1 = s1.run({y}, {{x, xv}})[0];
  Tensor r2 = s2.run({y2}, {{x2, xv}})[0];
  ASSERT_EQ(std::memcmp(r1.raw_data(), r2.raw_data(), r1.nbytes()), 0);
  Tensor kv = s2.run({g2->output_by_name("k")})[0];
  EXPECT_TRUE(std::isinf(kv.data<double>()[1]));
  EXPECT_TRUE(std::isnan(kv.data<double>()[2]));
}

TEST(Graph, MalformedJsonIsRejected) {
  expect_error([] { Graph::from_json("{not json"); }, {"graph JSON", "parse error"});
  expect_error([] { Graph::from_json("{\"format\":\"other\"}"); }, {"format"});
  expect_error([] { Graph::from_json("{\"format\":\"spire-graph\",\"nodes\":[{\"name\":\"a\"}]}"); },
               {"malformed"});
  expect_error([] {
    Graph::from_json("{\"format\":\"spire-graph\",\"nodes\":[{\"name\":\"a\",\"op\":\"Neg\","
                     "\"inputs\":[\"missing:0\"],\"control_inputs\":[],\"attrs\":{}}]}");
  }, {"no node named 'missing'"});
}

// Found by fuzzing: numbers that do not fit an integer must be errors, not
// undefined conversions (a huge floating-point dimension used to be cast).
TEST(Graph, JsonNumbersThatAreNotIntegersAreRejected) {
  auto node_with_shape = [](const std::string& dims) {
    return "{\"format\":\"spire-graph\",\"nodes\":[{\"name\":\"p\",\"op\":\"Placeholder\","
           "\"inputs\":[],\"control_inputs\":[],\"attrs\":{\"dtype\":{\"type\":\"dtype\","
           "\"value\":\"f32\"},\"shape\":{\"type\":\"shape\",\"value\":[" + dims + "]}}}]}";
  };
  EXPECT_NO_THROW(Graph::from_json(node_with_shape("2,-1")));
  expect_error([&] { Graph::from_json(node_with_shape("1e300")); }, {"graph JSON", "shape attribute must be an integer", "1e+300"});
  expect_error([&] { Graph::from_json(node_with_shape("2.5")); }, {"must be an integer"});
  expect_error([&] { Graph::from_json(node_with_shape("18446744073709551615")); }, {"does not fit in a 64-bit integer"});
  expect_error([&] { Graph::from_json(node_with_shape("-7")); }, {"dimension -7"});
  expect_error([&] { Graph::from_json(node_with_shape("\"x\"")); }, {"must be an integer"});
  // Seeds, int attrs and tensor shapes go through the same checks.
  expect_error([] { Graph::from_json("{\"format\":\"spire-graph\",\"seed\":1e99,\"nodes\":[]}"); }, {"seed must be an integer"});
  const std::string tensor_node =
      "{\"format\":\"spire-graph\",\"nodes\":[{\"name\":\"c\",\"op\":\"Const\",\"inputs\":[],"
      "\"control_inputs\":[],\"attrs\":{\"value\":{\"type\":\"tensor\",\"value\":{\"dtype\":\"f32\","
      "\"shape\":SHAPE,\"hex\":\"0000803f\"}}}}]}";
  auto with = [&](const std::string& shape) {
    std::string t = tensor_node;
    t.replace(t.find("SHAPE"), 5, shape);
    return t;
  };
  EXPECT_NO_THROW(Graph::from_json(with("[1]")));
  expect_error([&] { Graph::from_json(with("[4294967296,4294967296,4294967296]")); }, {"more elements than fit"});
  expect_error([&] { Graph::from_json(with("[3]")); }, {"tensor data has 4 bytes, but f32[3] needs 12"});
  expect_error([&] { Graph::from_json(with("[1e20]")); }, {"must be an integer"});
}

}  // namespace
}  // namespace spire::testing

namespace spire::testing {
namespace {

TEST(Graph, CollectionsAndExtensions) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output a, b;
  {
    NameScope s(g, "tower0");
    a = ops::scalar(1, DType::F32);
  }
  b = ops::scalar(2, DType::F32);
  g.add_to_collection("losses", a);
  g.add_to_collection("losses", b);
  g.add_to_collection("losses", a);  // no duplicates
  EXPECT_EQ(g.get_collection("losses").size(), 2u);
  ASSERT_EQ(g.get_collection("losses", "tower0/").size(), 1u);
  EXPECT_EQ(g.get_collection("losses", "tower0/")[0], a);
  EXPECT_TRUE(g.get_collection("nothing").empty());
  g.finalize();
  Node* op = b.node;
  g.add_to_collection("ops", Output(op, 0));  // allowed after finalize
  EXPECT_EQ(g.collection_keys(), (std::vector<std::string>{"losses", "ops"}));
  g.clear_collection("ops");
  EXPECT_TRUE(g.get_collection("ops").empty());
  Graph other;
  expect_error([&] { other.add_to_collection("x", a); }, {"add_to_collection('x')", "not a node of this graph"});

  struct Counter { int n = 0; };
  g.extension<Counter>().n += 2;
  EXPECT_EQ(g.extension<Counter>().n, 2);
  EXPECT_EQ(other.extension<Counter>().n, 0);
}

}  // namespace
}  // namespace spire::testing
