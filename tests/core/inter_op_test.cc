// Inter-op parallelism (SessionOptions::inter_op): nodes of a CPU device that depend on each
// other in no way are planned next to each other as waves and run at the same time, one
// per kernel thread. These tests check which nodes may share a wave (plan_text writes a
// wave "{a | b}"), that waves compute what the plain plan computes (also when two members
// read a value that dies in the wave, which neither may then overwrite), that a failing
// member fails the run without a hang, and that kMeasured settles on a choice.
#include <cmath>
#include <cstdlib>
#include <set>
#include <string>

#include "tests/support/fusion_util.h"

namespace spire::testing {
namespace {

SessionOptions inter_op(InterOp mode, int threads = 2, bool fuse = false) {
  SessionOptions o;
  o.num_threads = threads;
  o.inter_op = mode;
  o.fuse_elementwise = fuse;
  return o;
}

// SPIRE_INTER_OP overrides SessionOptions::inter_op in every session (to run the whole suite
// with waves): the tests that compare the modes then skip.
#define SKIP_IF_MODE_OVERRIDDEN()                                                        \
  if (const char* v = std::getenv("SPIRE_INTER_OP"); v != nullptr && *v != '\0')        \
  GTEST_SKIP() << "SPIRE_INTER_OP=" << v << " overrides the modes this test compares"

std::vector<float> ramp(int64_t n, float lo, float step) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = lo + step * static_cast<float>(i % 997);
  return v;
}

void expect_bits_equal(const Tensor& a, const Tensor& b, const std::string& what) {
  EXPECT_TRUE(bit_equal(a, b)) << what << ": " << a.type_string() << " against " << b.type_string();
}

TEST(InterOp, AMatMulsTwoGradientsFormAWaveAndComputeTheSameBits) {
  SKIP_IF_MODE_OVERRIDDEN();
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {96, 80}, "x");
  Output w = ops::placeholder(DType::F32, {80, 72}, "w");
  Output dy = ops::placeholder(DType::F32, {96, 72}, "dy");
  // y = x w: dx = dy w^T and dw = x^T dy read dy both and do not depend on each other.
  Output dx = ops::matmul(dy, w, false, true, "dx");
  Output dw = ops::matmul(x, dy, true, false, "dw");
  const FeedDict feeds{{x, Tensor::from_vector<float>({96, 80}, ramp(96 * 80, -1.0f, 0.003f))},
                       {w, Tensor::from_vector<float>({80, 72}, ramp(80 * 72, -0.5f, 0.002f))},
                       {dy, Tensor::from_vector<float>({96, 72}, ramp(96 * 72, 0.25f, -0.001f))}};
  Session plain(g, inter_op(InterOp::kOff));
  Session waves(g, inter_op(InterOp::kAlways));
  EXPECT_EQ(plain.plan_text({dx, dw}, feeds), "cpu: dx, dw\n");
  EXPECT_EQ(waves.plan_text({dx, dw}, feeds), "cpu: {dx | dw}\n");
  const auto want = plain.run({dx, dw}, feeds);
  StepStats st;
  const auto got = waves.run({dx, dw}, feeds, {}, &st);
  // The GEMM splits rows and columns, never the sum: one thread gives the same bits.
  expect_bits_equal(got[0], want[0], "dx");
  expect_bits_equal(got[1], want[1], "dw");
  std::set<std::string> members;
  for (const TraceEvent& e : st.events)
    for (const auto& [k, v] : e.args)
      if (k == "inter_op") members.insert(e.name + " " + v);
  EXPECT_EQ(members, (std::set<std::string>{"dx 1 of 2", "dw 2 of 2"}));
  const auto choices = waves.inter_op_waves({dx, dw}, feeds);
  ASSERT_EQ(choices.size(), 1u);
  EXPECT_EQ(choices[0].first, "parallel");
  EXPECT_EQ(choices[0].second, (std::vector<std::string>{"dx", "dw"}));
}

TEST(InterOp, OnlyIndependentPureNodesShareAWave) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {64}, "x");
  Output a = ops::exp(x, "a");
  Output b = ops::tanh(a, "b");  // reads a: never in a's wave
  Output c = ops::neg(x, "c");   // independent of a and b
  Output d = ops::add(b, c, "d");
  const FeedDict feeds{{x, Tensor::from_vector<float>({64}, ramp(64, -1.0f, 0.03f))}};
  // The depth-first order is a, b, c, d: c moves up next to a; b then d follow.
  Session s(g, inter_op(InterOp::kAlways));
  EXPECT_EQ(s.plan_text({d}, feeds), "cpu: {a | c}, b, d\n");
  // A wave takes at most one node per kernel thread: none with one thread.
  Session one(g, inter_op(InterOp::kAlways, 1));
  EXPECT_EQ(one.plan_text({d}, feeds), "cpu: a, b, c, d\n");
  Session seq(g, [] {
    SessionOptions o = inter_op(InterOp::kAlways);
    o.sequential = true;
    return o;
  }());
  EXPECT_EQ(seq.plan_text({d}, feeds), "cpu: a, b, c, d\n") << "sequential mode has no waves";
  expect_tensor(s.run({d}, feeds)[0], {64}, [&] {
    std::vector<double> v;
    for (float f : ramp(64, -1.0f, 0.03f)) v.push_back(std::tanh(std::exp(f)) - f);
    return v;
  }(), 1e-6);
}

// A wave lasts as long as its longest member: nodes pair only when their work estimates
// (OpDef::cost) are within a factor of two.
TEST(InterOp, NodesOfVeryDifferentWorkDoNotPair) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {4096}, "x");
  Output y = ops::placeholder(DType::F32, {16}, "y");
  Output big = ops::exp(x, "big");      // 8192 elements in and out
  Output small = ops::tanh(y, "small"); // 32
  Output big2 = ops::neg(x, "big2");
  const FeedDict feeds{{x, Tensor::from_vector<float>({4096}, ramp(4096, -1.0f, 0.002f))},
                       {y, Tensor::from_vector<float>({16}, ramp(16, -1.0f, 0.1f))}};
  Session s(g, inter_op(InterOp::kAlways));
  EXPECT_EQ(s.plan_text({big, small, big2}, feeds), "cpu: {big | big2}, small\n");
}

TEST(InterOp, WorkEstimatesCountMultiplyAddsOfProducts) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output a = ops::placeholder(DType::F32, {80, 96}, "a");
  Output b = ops::placeholder(DType::F32, {80, 72}, "b");
  Output y = ops::matmul(a, b, true, false, "y");  // [96, 72], k = 80
  EXPECT_DOUBLE_EQ(y.node->op_def().cost(*y.node),
                   80 * 96 + 80 * 72 + 96 * 72 + 96.0 * 72 * 80 * kMultiplyAddCost);
  Output x = ops::placeholder(DType::F32, {2, 8, 8, 3}, "x");
  Output w = ops::placeholder(DType::F32, {3, 3, 3, 5}, "w");
  Output c = ops::conv2d(x, w, {1, 1}, "SAME", {1, 1}, "c");  // [2, 8, 8, 5]: 27 each
  const double conv_io = 2 * 8 * 8 * 3 + 3 * 3 * 3 * 5 + 2 * 8 * 8 * 5;
  EXPECT_DOUBLE_EQ(c.node->op_def().cost(*c.node), conv_io + 2 * 8 * 8 * 5 * 27.0 * kMultiplyAddCost);
  Output e = ops::exp(x, "e");
  EXPECT_DOUBLE_EQ(e.node->op_def().cost(*e.node), 2 * 2 * 8 * 8 * 3);
  Output u = ops::placeholder(DType::F32, Shape({-1, 4}), "u");
  Output eu = ops::exp(u, "eu");
  EXPECT_LT(eu.node->op_def().cost(*eu.node), 0) << "an unknown dimension";
}

TEST(InterOp, StatefulNodesAndControlInputsStayOutOfWaves) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {16}, "x");
  Output r = ops::random_uniform({16}, DType::F32, 0.0, 1.0, 7, "r");  // stateful (its stream)
  Output a = ops::exp(x, "a");
  Output c;
  {
    ControlDependencies deps(g, {a.node});
    c = ops::neg(x, "c");  // ordered after a
  }
  Output e = ops::tanh(x, "e");
  const FeedDict feeds{{x, Tensor::from_vector<float>({16}, ramp(16, -1.0f, 0.1f))}};
  Session s(g, inter_op(InterOp::kAlways));
  const std::string plan = s.plan_text({r, a, c, e}, feeds);
  EXPECT_EQ(plan, "cpu: r, {a | e}, c\n");
  s.run({r, a, c, e}, feeds);
}

// Members of one wave load their inputs before any of them decides which buffers it may
// overwrite: t dies in the wave (at v, its last reader), and u reads it at the same time.
// Were v to write its output into t's buffer, u would read v's results.
TEST(InterOp, AValueTwoMembersReadIsNotOverwrittenByEither) {
  Graph g;
  DefaultGraphGuard guard(g);
  const int64_t n = 1 << 17;
  Output x = ops::placeholder(DType::F32, {n}, "x");
  Output t = ops::exp(x * 0.25, "t");
  Output u = ops::neg(t, "u");
  Output v = ops::tanh(t, "v");
  const std::vector<float> xs = ramp(n, -2.0f, 0.004f);
  const FeedDict feeds{{x, Tensor::from_vector<float>({n}, xs)}};
  Session s(g, inter_op(InterOp::kAlways));
  EXPECT_NE(s.plan_text({u, v}, feeds).find("{u | v}"), std::string::npos) << s.plan_text({u, v}, feeds);
  Session plain(g, inter_op(InterOp::kOff));
  const auto want = plain.run({u, v}, feeds);
  for (int rep = 0; rep < 60; ++rep) {
    const auto got = s.run({u, v}, feeds);
    expect_bits_equal(got[0], want[0], "u, run " + std::to_string(rep));
    expect_bits_equal(got[1], want[1], "v, run " + std::to_string(rep));
    if (::testing::Test::HasFailure()) break;
  }
}

TEST(InterOp, AFailingMemberFailsTheRunNamingItsNode) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output params = ops::placeholder(DType::F32, {4, 3}, "params");
  Output idx = ops::placeholder(DType::I64, {2}, "idx");
  Output x = ops::placeholder(DType::F32, {8}, "x");
  Output bad = ops::gather(params, idx, 0, "bad");
  Output fine = ops::exp(x, "fine");
  const FeedDict feeds{{params, Tensor::from_vector<float>({4, 3}, ramp(12, 0.0f, 1.0f))},
                       {idx, Tensor::from_vector<int64_t>({2}, {1, 9})},
                       {x, Tensor::from_vector<float>({8}, ramp(8, -1.0f, 0.25f))}};
  Session s(g, inter_op(InterOp::kAlways));
  ASSERT_NE(s.plan_text({bad, fine}, feeds).find("{"), std::string::npos) << s.plan_text({bad, fine}, feeds);
  for (int rep = 0; rep < 20; ++rep) {
    try {
      s.run({bad, fine}, feeds);
      ADD_FAILURE() << "an index out of range ran";
      break;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("'bad'"), std::string::npos) << e.what();
    }
  }
}

// A wave member on cpu:0 reads a value made on cpu:1 (through its Copy node), whose lane
// waits for cpu:0's earlier work: the wave waits for it first, and nothing deadlocks.
TEST(InterOp, AWaveWaitsForOtherLanesBeforeItRuns) {
  Graph g;
  DefaultGraphGuard guard(g);
  const int64_t n = 4096;
  Output x = ops::placeholder(DType::F32, {n}, "x");
  Output a = ops::exp(x * 0.5, "a");
  Output b;
  {
    DeviceScope d(g, Device::cpu(1));
    b = ops::neg(a, "b");
  }
  Output u = ops::tanh(b, "u");  // back on cpu:0, reads b through a copy
  Output v = ops::exp(a * -1.0, "v");
  const std::vector<float> xs = ramp(n, -2.0f, 0.004f);
  const FeedDict feeds{{x, Tensor::from_vector<float>({n}, xs)}};
  SessionOptions o = inter_op(InterOp::kAlways, 4);
  o.num_cpu_devices = 2;
  o.timeout_seconds = 60;
  Session s(g, o);
  const std::string plan = s.plan_text({u, v}, feeds);
  EXPECT_NE(plan.find(" | "), std::string::npos) << plan;
  std::vector<double> want_u, want_v;
  for (float f : xs) {
    want_u.push_back(std::tanh(-std::exp(f * 0.5f)));
    want_v.push_back(std::exp(-std::exp(f * 0.5f)));
  }
  for (int rep = 0; rep < 20; ++rep) {
    const auto got = s.run({u, v}, feeds);
    expect_tensor(got[0], {n}, want_u, 1e-6);
    expect_tensor(got[1], {n}, want_v, 1e-6);
  }
}

TEST(InterOp, MeasuredWavesSettleAfterTheirTuningRuns) {
  SKIP_IF_MODE_OVERRIDDEN();
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {64, 64}, "x");
  Output a = ops::matmul(x, x, false, false, "a");
  Output b = ops::matmul(x, x, true, false, "b");
  const FeedDict feeds{{x, Tensor::from_vector<float>({64, 64}, ramp(64 * 64, -1.0f, 0.002f))}};
  Session plain(g, inter_op(InterOp::kOff));
  const auto want = plain.run({a, b}, feeds);
  Session s(g, inter_op(InterOp::kMeasured));
  // Three runs each way, alternating: the sixth run makes the choice.
  for (int run = 1; run <= 6; ++run) {
    const auto waves = s.inter_op_waves({a, b}, feeds);
    ASSERT_EQ(waves.size(), 1u);
    EXPECT_EQ(waves[0].first, "measuring") << "before run " << run;
    const auto got = s.run({a, b}, feeds);
    expect_bits_equal(got[0], want[0], "a");
    expect_bits_equal(got[1], want[1], "b");
  }
  const std::string choice = s.inter_op_waves({a, b}, feeds)[0].first;
  EXPECT_TRUE(choice == "parallel" || choice == "serial") << choice;
  const auto got = s.run({a, b}, feeds);
  expect_bits_equal(got[0], want[0], "a after the choice");
}

}  // namespace
}  // namespace spire::testing
