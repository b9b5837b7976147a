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

TEST(Graph, JsonRoundTripKeepsUnsetAndSetDtypeAttrs) {
  // MatMul's compute_dtype is unset (DType::Invalid) unless a mixed-precision product sets it.
  Graph g;
  DefaultGraphGuard guard(g);
  Output a = ops::placeholder(DType::F32, {2, 3}, "a");
  ops::matmul(a, a, false, true, "plain");
  ops::matmul(a, a, false, true, DType::BF16, "mixed");
  const std::string json = g.to_json();
  auto g2 = Graph::from_json(json);
  EXPECT_EQ(g2->to_json(), json);
  EXPECT_EQ(g2->find_node("plain")->attr<DType>("compute_dtype"), DType::Invalid);
  EXPECT_EQ(g2->find_node("mixed")->attr<DType>("compute_dtype"), DType::BF16);
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

// The format version: to_json writes 1; a newer one is refused (as
// checkpoints refuse newer versions), an absent one is the first format.
TEST(Graph, JsonFormatVersion) {
  Graph g;
  DefaultGraphGuard guard(g);
  ops::placeholder(DType::F32, {2}, "x");
  std::string json = g.to_json();
  ASSERT_NE(json.find("\"version\": 1"), std::string::npos);
  EXPECT_NO_THROW(Graph::from_json(json));
  auto with_version = [&](const std::string& v) {
    std::string t = json;
    t.replace(t.find("\"version\": 1"), 12, "\"version\": " + v);
    return t;
  };
  EXPECT_NO_THROW(Graph::from_json(with_version("1")));
  expect_error([&] { Graph::from_json(with_version("999")); },
               {"graph JSON: format version 999 is newer than this Spire supports (1)"});
  expect_error([&] { Graph::from_json(with_version("2")); }, {"format version 2 is newer"});
  expect_error([&] { Graph::from_json(with_version("0")); }, {"bad format version 0"});
  expect_error([&] { Graph::from_json(with_version("\"1\"")); }, {"\"version\" must be an integer"});
  EXPECT_NO_THROW(Graph::from_json("{\"format\":\"spire-graph\",\"nodes\":[]}"));
}

// Malformed graphs are refused in Spire's words, naming what is wrong and
// where (the node, its index, the field or attribute), never with the JSON
// library's exception text.
TEST(Graph, MalformedJsonErrorsSayWhatIsWrong) {
  auto fails_with = [](const std::string& text, const std::vector<std::string>& words) {
    try {
      Graph::from_json(text);
      ADD_FAILURE() << "no error for " << text;
    } catch (const Error& e) {
      const std::string msg = e.what();
      for (const auto& w : words) EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' not in: " << msg;
      EXPECT_EQ(msg.find("json.exception"), std::string::npos) << msg;
      EXPECT_EQ(msg.find("type must be"), std::string::npos) << msg;
    }
  };
  const std::string head = "{\"format\":\"spire-graph\",\"nodes\":[";
  auto node = [](const std::string& fields) {
    return "{\"name\":\"p\",\"op\":\"Placeholder\",\"inputs\":[],\"control_inputs\":[]," + fields + "}";
  };
  const std::string attrs_ok =
      "\"attrs\":{\"dtype\":{\"type\":\"dtype\",\"value\":\"f32\"},\"shape\":{\"type\":\"shape\",\"value\":[2]}}";
  EXPECT_NO_THROW(Graph::from_json(head + node(attrs_ok) + "]}"));
  // Not JSON: where it stops, in lines and columns.
  fails_with("{\"format\":\n  \"spire-graph\",, }", {"graph JSON: parse error at line 2, column 17: not valid JSON: '  \"spire-graph\",,' <- here"});
  fails_with("{\"format\": \"spire-graph\"", {"parse error at line 1, column 25: the text ends early"});
  fails_with("", {"graph JSON: parse error at line 1, column 1: the text ends early"});
  // The document and its lists.
  fails_with("[1, 2]", {"graph JSON: malformed graph: expected an object", "got a list"});
  fails_with("{\"format\":\"spire-graph\"}", {"malformed graph: it has no \"nodes\""});
  fails_with("{\"format\":\"spire-graph\",\"nodes\":{}}", {"\"nodes\" must be a list, got an object"});
  fails_with(head + "7]}", {"malformed nodes[0]: expected an object, got the number 7"});
  fails_with(head + "{\"op\":\"Neg\"}]}", {"malformed node nodes[0]: it has no \"name\""});
  fails_with(head + "{\"name\":5}]}", {"nodes[0] \"name\" must be a string, got the number 5"});
  fails_with(head + "{\"name\":\"a\"}]}", {"malformed node 'a' (nodes[0]): it has no \"op\""});
  fails_with(head + "{\"name\":\"a\",\"op\":[]}]}", {"node 'a' (nodes[0]) \"op\" must be a string, got a list"});
  fails_with(head + "{\"name\":\"a\",\"op\":\"Neg\",\"inputs\":\"x\"}]}",
             {"node 'a' (nodes[0]) \"inputs\" must be a list, got the string \"x\""});
  fails_with(head + "{\"name\":\"a\",\"op\":\"Neg\",\"inputs\":[3]}]}",
             {"node 'a' (nodes[0]) input must be a string, got the number 3"});
  fails_with(head + "{\"name\":\"a\",\"op\":\"Neg\",\"inputs\":[\"b:0\"],\"attrs\":{}}]}",
             {"node 'a' (nodes[0]) input 'b:0': no node named 'b'", "must come before it"});
  fails_with(head + "{\"name\":\"a\",\"op\":\"NoOp\",\"inputs\":[]}]}",
             {"malformed node 'a' (nodes[0]): it has no \"attrs\""});
  fails_with(head + "{\"name\":\"a\",\"op\":\"NoOp\",\"inputs\":[],\"attrs\":[]}]}",
             {"node 'a' (nodes[0]) \"attrs\" must be an object, got a list"});
  fails_with(head + "{\"name\":\"a\",\"op\":\"NoOp\",\"inputs\":[],\"attrs\":{}}]}",
             {"malformed node 'a' (nodes[0]): it has no \"control_inputs\""});
  fails_with(head + "{\"name\":\"a\",\"op\":\"NoOp\",\"inputs\":[],\"attrs\":{},\"control_inputs\":[\"zz\"]}]}",
             {"node 'a' (nodes[0]): unknown control input 'zz'"});
  fails_with(head + node(attrs_ok + ",\"device\":\"tpu:0\"") + "]}", {"node 'p' (nodes[0]): bad device 'tpu:0'"});
  fails_with(head + node(attrs_ok + ",\"device\":1") + "]}", {"node 'p' (nodes[0]) \"device\" must be a string"});
  // Attributes: named with their node.
  auto attr = [&](const std::string& a) {
    return head + node("\"attrs\":{\"dtype\":{\"type\":\"dtype\",\"value\":\"f32\"},\"shape\":" + a + "}") + "]}";
  };
  fails_with(attr("[2]"), {"graph JSON: node 'p' (nodes[0]), attribute 'shape': malformed attribute: expected an object"});
  fails_with(attr("{\"value\":[2]}"), {"attribute 'shape': malformed attribute: it has no \"type\""});
  fails_with(attr("{\"type\":\"shape\"}"), {"attribute 'shape': malformed attribute: it has no \"value\""});
  fails_with(attr("{\"type\":\"vector\",\"value\":[2]}"), {"attribute 'shape': unknown attribute type 'vector'"});
  fails_with(attr("{\"type\":\"shape\",\"value\":\"2\"}"),
             {"attribute 'shape': shape attribute must be a list of integers, got the string \"2\""});
  fails_with(attr("{\"type\":\"bool\",\"value\":1}"), {"attribute 'shape': bool attribute must be true or false"});
  fails_with(attr("{\"type\":\"string\",\"value\":1}"), {"string attribute must be a string"});
  fails_with(attr("{\"type\":\"float\",\"value\":\"x\"}"), {"float attribute must be a number"});
  fails_with(attr("{\"type\":\"floats\",\"value\":[1,\"x\"]}"), {"floats attribute element must be a number"});
  fails_with(attr("{\"type\":\"strings\",\"value\":\"x\"}"), {"strings attribute must be a list"});
  fails_with(attr("{\"type\":\"dtype\",\"value\":\"f8\"}"), {"attribute 'shape': unknown dtype name 'f8'"});
  fails_with(attr("{\"type\":\"tensor\",\"value\":{\"dtype\":\"f32\",\"shape\":[1]}}"),
             {"attribute 'shape': malformed tensor attribute: it has no \"hex\""});
  fails_with(attr("{\"type\":\"tensor\",\"value\":{\"dtype\":\"f32\",\"shape\":[1],\"hex\":\"zz00803f\"}}"),
             {"attribute 'shape': bad hex digit in tensor data"});
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
