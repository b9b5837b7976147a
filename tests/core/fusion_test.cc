// Elementwise fusion (core/fusion.h, SessionOptions::fuse_elementwise): fused plans give the
// unfused graph's results bit for bit (random expressions over every fusable op, with full,
// scalar and broadcast inputs, f32 and f64), fuse what they should and nothing that must stay
// visible (fetches, control edges, other devices, other dtypes), and name the original node
// in errors.
#include <cstring>
#include <random>
#include <set>

#include "tests/support/fusion_util.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

SessionOptions fusion(bool on, SessionOptions o = {}) {
  o.fuse_elementwise = on;
  return o;
}

// The step names of Session::plan_text ("cpu: a, b\ncpu:1: c\n" -> {a, b, c}).
std::set<std::string> step_names(const std::string& plan) {
  std::set<std::string> names;
  size_t line = 0;
  while (line < plan.size()) {
    size_t end = plan.find('\n', line);
    if (end == std::string::npos) end = plan.size();
    size_t p = plan.find(": ", line) + 2;
    while (p < end) {
      size_t q = plan.find(", ", p);
      if (q == std::string::npos || q > end) q = end;
      names.insert(plan.substr(p, q - p));
      p = q + 2;
    }
    line = end + 1;
  }
  return names;
}

SPIRE_FORWARD_TEST(FusedElementwise, RandomExpressionsEqualTheUnfusedGraphBitForBit) {
  std::mt19937_64 rng(20261128);
  int fused_steps = 0;
  for (DType dt : {DType::F32, DType::F64}) {
    for (int trial = 0; trial < 40; ++trial) {
      Graph g;
      DefaultGraphGuard guard(g);
      // Full [B, H, C] (B fed), a row [C], a column [B, 1, 1], [H, 1], a scalar, and a
      // broadcast in the middle ([1, H, C]).
      const int64_t B = 3 + trial % 5, H = 7, C = 37 + trial;
      std::vector<Output> leaves = {ops::placeholder(dt, {-1, H, C}, "full"),
                                    ops::placeholder(dt, {C}, "row"),
                                    ops::placeholder(dt, {-1, 1, 1}, "column"),
                                    ops::placeholder(dt, {H, 1}, "hcol"),
                                    ops::placeholder(dt, {}, "scalar"),
                                    ops::placeholder(dt, {1, H, C}, "mid")};
      Output y = random_expression(rng, leaves, 2 + trial % 4);
      y = ops::add(y, leaves[0] * 0.5, "result");  // the result has the full shape
      FeedDict feeds;
      const std::vector<Shape> shapes = {{B, H, C}, {C}, {B, 1, 1}, {H, 1}, {}, {1, H, C}};
      for (size_t k = 0; k < leaves.size(); ++k)
        feeds.emplace_back(leaves[k], random_tensor(dt, shapes[k], rng, -2, 2));
      SessionOptions threads;
      threads.num_threads = 1 + trial % 2;
      Session off(g, fusion(false, threads)), on(g, fusion(true, threads));
      Tensor want = off.run({y}, feeds)[0];
      StepStats st;
      Tensor got = on.run({y}, feeds, {}, &st)[0];
      ASSERT_TRUE(bit_equal(want, got)) << dtype_name(dt) << " trial " << trial << ":\n" << g.to_text();
      fused_steps += static_cast<int>(op_types(st).count("FusedElementwise"));
    }
  }
  EXPECT_GE(fused_steps, 80) << "every expression should have fused";
}

TEST(Fusion, AChainBecomesOneStepNamedAfterItsLastNode) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {1000}, "x");
  Output b = ops::placeholder(DType::F32, {1000}, "b");
  Output y = ops::tanh(ops::relu(ops::add(x, b, "add"), "relu"), "tanh");
  Output z = ops::sum(y, {0}, false, "sum");
  Session s(g, fusion(true));
  EXPECT_EQ(s.plan_text({z}, {{x, Tensor()}, {b, Tensor()}}), "cpu: tanh, sum\n");
  StepStats st;
  Tensor t = s.run({z}, {{x, Tensor::full(DType::F32, {1000}, 0.5)}, {b, Tensor::full(DType::F32, {1000}, 0.25)}},
                   {}, &st)[0];
  EXPECT_NEAR(t.to_vector<float>()[0], 1000 * std::tanh(0.75f), 1e-2);
  EXPECT_EQ(op_types(st), (std::multiset<std::string>{"FusedElementwise", "Sum"}));
  Session unfused(g, fusion(false));
  EXPECT_EQ(unfused.plan_text({z}, {{x, Tensor()}, {b, Tensor()}}), "cpu: add, relu, tanh, sum\n");
}

// Identity computes nothing (its kernel hands its input on): a chain of Identity nodes alone
// stays as it is, with no fused copy; within a chain that computes, Identity joins.
TEST(Fusion, IdentityNodesAloneAreNoGroup) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {100}, "x");
  Output y = ops::identity(ops::identity(x, "id1"), "y");
  Output z = ops::relu(ops::identity(ops::tanh(x, "tanh"), "id2"), "z");
  Session s(g, fusion(true));
  EXPECT_EQ(s.plan_text({y}, {{x, Tensor()}}), "cpu: id1, y\n");
  EXPECT_EQ(s.plan_text({z}, {{x, Tensor()}}), "cpu: z\n");
  StepStats st;
  const Tensor in = Tensor::full(DType::F32, {100}, -0.5);
  EXPECT_EQ(s.run({y}, {{x, in}}, {}, &st)[0].to_vector<float>(), in.to_vector<float>());
  EXPECT_EQ(op_types(st).count("FusedElementwise"), 0u);
}

TEST(Fusion, FetchedControlledAndOtherDeviceNodesStayVisible) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {16}, "x");
  Output a = ops::exp(x, "a");
  Output b = ops::neg(a, "b");  // fetched below: stays its own value
  Output c = ops::tanh(b, "c");
  Output d;
  {
    DeviceScope dev(g, Device::cpu(1));
    d = ops::square(c, "d");  // another device
  }
  Output e = ops::relu(d, "e");
  Output f = ops::sigmoid(e, "f");
  Output h = ops::abs(f, "h");
  h.node->add_control_input(e.node);  // e is a control input: it must run as itself
  Session s(g, fusion(true, cpus(2)));
  // a fuses into b (a fetched root may absorb its producers); b is read by c too, so c
  // cannot absorb it; d is on cpu:1; e is a control input, h has one.
  EXPECT_EQ(step_names(s.plan_text({b, h}, {{x, Tensor()}})),
            (std::set<std::string>{"b", "c", "c/copy_to_cpu_1", "d", "d/copy_to_cpu", "e", "f", "h"}));
  std::vector<float> xs(16);
  for (int i = 0; i < 16; ++i) xs[static_cast<size_t>(i)] = -1.0f + 0.125f * static_cast<float>(i);
  auto got = s.run({b, h}, {{x, Tensor::from_vector<float>({16}, xs)}});
  Session off(g, fusion(false, cpus(2)));
  auto want = off.run({b, h}, {{x, Tensor::from_vector<float>({16}, xs)}});
  EXPECT_TRUE(bit_equal(got[0], want[0]));
  EXPECT_TRUE(bit_equal(got[1], want[1]));
}

TEST(Fusion, AVariableReadByAFusedGroupIsReadWhenItRuns) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {4}, "x");
  Output w = ops::variable({4}, DType::F32, "w");  // a bias, read directly (by reference)
  Output y = ops::tanh(ops::add(x, w, "add_bias"), "y");
  Output bump = ops::assign(w, w * 2.0, "bump");
  Session s(g, fusion(true));
  s.set_variable_value(w.node, Tensor::from_vector<float>({4}, {0.5f, -0.25f, 1, -1}));
  const FeedDict feeds = {{x, Tensor::from_vector<float>({4}, {1, 2, -3, 0.125f})}};
  StepStats st;
  Tensor a = s.run({y}, feeds, {}, &st)[0];
  EXPECT_EQ(op_types(st).count("FusedElementwise"), 1u);
  s.run_targets({bump.node});
  Tensor b = s.run({y}, feeds)[0];
  Session off(g, fusion(false));
  off.set_variable_value(w.node, Tensor::from_vector<float>({4}, {0.5f, -0.25f, 1, -1}));
  EXPECT_TRUE(bit_equal(a, off.run({y}, feeds)[0]));
  off.run_targets({bump.node});
  EXPECT_TRUE(bit_equal(b, off.run({y}, feeds)[0]));
  EXPECT_FALSE(bit_equal(a, b));
}

TEST(Fusion, OtherDtypesAndComparisonsDoNotFuse) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output i = ops::placeholder(DType::I32, {8}, "i");
  Output j = ops::neg(ops::abs(i, "iabs"), "ineg");  // integers: not registered as fusable
  Output x = ops::placeholder(DType::F32, {8}, "x");
  Output one = ops::constant(Tensor::full(DType::F32, {8}, 1.0), "one");
  Output m = ops::cast(ops::greater(ops::exp(x, "ex"), one, "gt"), DType::F32, "mask");
  Session s(g, fusion(true));
  StepStats st;
  s.run({j, m}, {{i, Tensor::from_vector<int32_t>({8}, {1, -2, 3, -4, 5, -6, 7, -8})},
                 {x, Tensor::full(DType::F32, {8}, 0.5)}},
        {}, &st);
  EXPECT_EQ(op_types(st).count("FusedElementwise"), 0u);
}

TEST(Fusion, AShapeErrorNamesTheFusedNode) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {-1}, "x");
  Output y = ops::placeholder(DType::F32, {-1}, "y");
  Output z = ops::tanh(ops::add(ops::exp(x, "ex"), y, "bad_add"), "out");
  Session s(g, fusion(true));
  expect_error([&] {
    s.run({z}, {{x, Tensor::full(DType::F32, {3}, 1.0)}, {y, Tensor::full(DType::F32, {4}, 1.0)}});
  }, {"bad_add", "[3]", "[4]", "do not broadcast"});
}

TEST(Fusion, TheFusedStepRunsInPlaceWhenItsInputDies) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {4096}, "x");
  Output y = ops::tanh(ops::exp(ops::neg(x)), "y");
  Session s(g);
  StepStats st;
  s.run({y}, {{x, Tensor::full(DType::F32, {4096}, 0.5)}}, {}, &st);
  bool in_place = false;
  for (const TraceEvent& e : st.events)
    for (const auto& [k, v] : e.args) in_place = in_place || (e.name == "y" && k == "in_place" && v == "0");
  EXPECT_TRUE(in_place);
}

TEST(Fusion, EnvironmentSwitch) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {8}, "x");
  Output y = ops::neg(ops::exp(x, "e"), "y");
  ::setenv("SPIRE_FUSE_ELEMENTWISE", "0", 1);
  {
    Session s(g);
    EXPECT_FALSE(s.options().fuse_elementwise);
    EXPECT_EQ(s.plan_text({y}, {{x, Tensor()}}), "cpu: e, y\n");
  }
  ::setenv("SPIRE_FUSE_ELEMENTWISE", "on", 1);
  expect_error([&] { Session s(g); }, {"SPIRE_FUSE_ELEMENTWISE", "'on'", "0 or 1"});
  ::unsetenv("SPIRE_FUSE_ELEMENTWISE");
  Session s(g);
  EXPECT_EQ(s.plan_text({y}, {{x, Tensor()}}), "cpu: y\n");
}

}  // namespace
}  // namespace spire::testing
