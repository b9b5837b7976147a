// Session tests: subgraph selection, freeing of intermediates, feeds and
// their checks, errors for missing feeds, unknown ops, cycles and fetches
// from another graph, run hooks, finalize, and variable state.
#include <atomic>

#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

// A test-only op that counts its executions, to observe which nodes run.
std::atomic<int> g_count_runs{0};
SPIRE_REGISTER_OP("TestCountRuns")
    .cpu_only()  // test-only: CPU kernels only
    .input("x")
    .shape_fn([](InferContext& c) { c.set_output(0, c.input_dtype(0), c.input_shape(0)); })
    .no_gradient();
SPIRE_STATIC_INIT(test_count_runs_kernel) {
  KernelRegistry::global().add("TestCountRuns", DeviceType::CPU, DType::F32, [](KernelContext& ctx) {
    ++g_count_runs;
    ctx.set_output(0, ctx.input(0));
  });
}
static const bool count_runs_forward_registered [[maybe_unused]] = register_forward_case("TestCountRuns");

// A test-only op registered without any kernel.
SPIRE_REGISTER_OP("TestNoKernel")
    .cpu_only()  // test-only: CPU kernels only
    .input("x")
    .shape_fn([](InferContext& c) { c.set_output(0, c.input_dtype(0), c.input_shape(0)); })
    .no_gradient();
static const bool no_kernel_forward_registered [[maybe_unused]] = register_forward_case("TestNoKernel");

Output count_runs(const Output& x) {
  return x.graph()->add_node("TestCountRuns", {x})->output(0);
}

TEST(Session, RunsOnlyTheNeededSubgraph) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output a = ops::scalar(1, DType::F32);
  Output used = count_runs(a) + 1.0;
  Output unused = count_runs(a) * 3.0;
  (void)unused;
  g_count_runs = 0;
  Session s(g);
  expect_tensor(s.run({used})[0], {}, {2});
  EXPECT_EQ(g_count_runs.load(), 1);
}

TEST(Session, FeedingAnIntermediateCutsTheGraph) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {}, "x");
  Output mid = count_runs(x);
  Output y = mid * 2.0;
  g_count_runs = 0;
  Session s(g);
  // x is not fed, but mid is: x's placeholder is not needed.
  expect_tensor(s.run({y}, {{mid, Tensor::scalar<float>(4)}})[0], {}, {8});
  EXPECT_EQ(g_count_runs.load(), 0);
}

TEST(Session, FreesIntermediatesAfterLastConsumer) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {1000}, "x");
  Output a = ops::exp(x);
  Output b = ops::neg(a);
  Output c = ops::square(b);
  Tensor xv = Tensor::full(DType::F32, {1000}, 0.0);
  Session s(g);
  // Observe frees through buffer use counts: fetch c and check a hook-free run
  // leaves no extra owners of the fed buffer.
  auto r = s.run({c}, {{x, xv}});
  expect_tensor(r[0].reshaped({1000}).reshaped({10, 100}), {10, 100}, std::vector<double>(1000, 1.0));
  EXPECT_EQ(xv.buffer_use_count(), 1);  // the executor released its reference
  EXPECT_EQ(r[0].buffer_use_count(), 1);
}

TEST(Session, FeedChecks) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {-1, 3}, "x");
  Output y = x * 2.0;
  Session s(g);
  expect_error([&] { s.run({y}); }, {"placeholder 'x'", "must be fed"});
  expect_error([&] { s.run({y}, {{x, Tensor::zeros(DType::F64, {2, 3})}}); },
               {"cannot feed", "f64[2, 3]", "'x:0'", "f32[?, 3]"});
  expect_error([&] { s.run({y}, {{x, Tensor::zeros(DType::F32, {2, 4})}}); },
               {"cannot feed", "f32[2, 4]", "f32[?, 3]"});
  expect_error([&] { s.run({y}, {{x, Tensor::zeros(DType::F32, {3})}}); }, {"cannot feed", "[3]"});
  expect_error([&] { s.run({y}, {{x, Tensor()}}); }, {"undefined"});
  expect_error([&] { s.run({y}, {{x, Tensor::zeros(DType::F32, {1, 3})}, {x, Tensor::zeros(DType::F32, {1, 3})}}); },
               {"fed twice"});
  expect_tensor(s.run({y}, {{x, Tensor::full(DType::F32, {1, 3}, 1)}})[0], {1, 3}, {2, 2, 2});
}

TEST(Session, FetchFromAnotherGraphIsRejected) {
  Graph g1, g2;
  Output a = ops::scalar(1, DType::F32, &g1);
  Output b = ops::scalar(2, DType::F32, &g2);
  Session s(g1);
  expect_error([&] { s.run({b}); }, {"another graph"});
  expect_error([&] { s.run({a}, {{b, Tensor::scalar<float>(1)}}); }, {"not an output of this session's graph"});
  expect_error([&] { ops::add(a, b); }, {"Add", "another graph"});
}

TEST(Session, UnknownOpAndMissingKernel) {
  Graph g;
  DefaultGraphGuard guard(g);
  expect_error([&] { g.add_node("NoSuchOp", {}, {}, "mystery"); }, {"unknown op 'NoSuchOp'", "mystery"});
  Output x = ops::scalar(1, DType::F32);
  Output y = g.add_node("TestNoKernel", {x}, {}, "lonely")->output(0);
  Session s(g);
  expect_error([&] { s.run({y}); }, {"no kernel", "TestNoKernel", "lonely", "f32"});
  // A graph read from JSON with an unknown op is rejected too.
  std::string json = g.to_json();
  auto pos = json.find("\"TestNoKernel\"");
  ASSERT_NE(pos, std::string::npos);
  json.replace(pos, 14, "\"TestNoKernelX\"");
  expect_error([&] { Graph::from_json(json); }, {"unknown op 'TestNoKernelX'"});
}

TEST(Session, CycleIsRejected) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::scalar(1, DType::F32);
  Output a = ops::neg(x, "a");
  Output b = ops::neg(a, "b");
  a.node->add_control_input(b.node);  // a -> b -> a
  Session s(g);
  expect_error([&] { s.run({b}); }, {"cycle", "'a'", "'b'"});
}

TEST(Session, FinalizeForbidsMutation) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::scalar(1, DType::F32);
  g.finalize();
  expect_error([&] { ops::neg(x, "late"); }, {"finalized", "late"});
  expect_error([&] { x.node->add_control_input(x.node); }, {"finalized"});
  Session s(g);
  expect_tensor(s.run({x})[0], {}, {1});
}

TEST(Session, KernelErrorsNameTheNode) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output a = ops::placeholder(DType::F32, {-1}, "a");
  Output b = ops::placeholder(DType::F32, {-1}, "b");
  Output c = ops::add(a, b, "sum_ab");
  Session s(g);
  expect_error([&] { s.run({c}, {{a, Tensor::zeros(DType::F32, {2})}, {b, Tensor::zeros(DType::F32, {3})}}); },
               {"sum_ab", "Add", "[2]", "[3]"});
}

class CountingHook : public SessionRunHook {
 public:
  explicit CountingHook(Output extra) : extra_(extra) {}
  SessionRunArgs before_run(SessionRunContext&) override {
    ++before;
    return {{extra_}, {}, {}};
  }
  void after_run(SessionRunContext& ctx, const SessionRunValues& v) override {
    ++after;
    ASSERT_EQ(v.results.size(), 1u);
    last = v.results[0].item<double>();
    if (last >= 2) ctx.stop_requested = true;  // reads happen before this run's increment
  }
  Output extra_;
  int before = 0, after = 0;
  double last = 0;
};

TEST(Session, RunHooksAddFetchesAndReadThem) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output counter = ops::variable({}, DType::F64, "counter");
  Output init = ops::assign(counter, ops::scalar(0, DType::F64));
  Output step = ops::assign_add(counter, ops::scalar(1, DType::F64));
  Output x = ops::placeholder(DType::F64, {}, "x");
  Session s(g);
  s.run({init});
  CountingHook hook(counter);
  s.add_hook(&hook);
  auto r = s.run({x * 2.0}, {{x, Tensor::scalar<double>(5)}}, {step.node});
  ASSERT_EQ(r.size(), 1u);  // the hook's fetch is not returned to the caller
  expect_tensor(r[0], {}, {10});
  EXPECT_EQ(hook.before, 1);
  EXPECT_EQ(hook.after, 1);
  s.run({}, {}, {step.node});
  EXPECT_FALSE(s.stop_requested());
  s.run({}, {}, {step.node});
  EXPECT_TRUE(s.stop_requested());
  EXPECT_EQ(hook.after, 3);
  s.run_without_hooks({counter});
  EXPECT_EQ(hook.after, 3);
  s.remove_hook(&hook);
  s.run({counter});
  EXPECT_EQ(hook.after, 3);
}

TEST(Session, SetVariableValueChecks) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output v = ops::variable({2}, DType::F32, "v");
  Session s(g);
  s.set_variable_value(v.node, Tensor::from_vector<float>({2}, {1, 2}));
  expect_tensor(s.run({v})[0], {2}, {1, 2});
  expect_error([&] { s.set_variable_value(v.node, Tensor::zeros(DType::F64, {2})); },
               {"variable 'v'", "f32[2]", "f64[2]"});
}

TEST(Session, PlansAreReusedAndInvalidatedOnGraphChange) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {}, "x");
  Output y = x + 1.0;
  Session s(g);
  expect_tensor(s.run({y}, {{x, Tensor::scalar<float>(1)}})[0], {}, {2});
  Output z = y * 10.0;  // graph grows after the first run
  expect_tensor(s.run({z}, {{x, Tensor::scalar<float>(1)}})[0], {}, {20});
  expect_tensor(s.run({y}, {{x, Tensor::scalar<float>(2)}})[0], {}, {3});
}

}  // namespace
}  // namespace spire::testing
