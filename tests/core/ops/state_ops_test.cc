// Forward tests of sources, state and control ops: placeholders, constants,
// variables and their updates (state kept in the Session), identity,
// stop_gradient, zeros/ones_like and no_op/group with control inputs.
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

SPIRE_FORWARD_TEST(Placeholder, FedValueAndPartialShape) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {-1, 2}, "x");
  EXPECT_EQ(x.shape(), Shape({-1, 2}));
  Session s(g);
  Tensor v = Tensor::from_vector<float>({3, 2}, {1, 2, 3, 4, 5, 6});
  expect_tensor(s.run({x * 2.0}, {{x, v}})[0], {3, 2}, {2, 4, 6, 8, 10, 12});
  Tensor e = Tensor::from_vector<float>({0, 2}, {});
  expect_tensor(s.run({x * 2.0}, {{x, e}})[0], {0, 2}, {});
}

SPIRE_FORWARD_TEST(Const, ValuesAndDtypes) {
  Graph g;
  DefaultGraphGuard guard(g);
  expect_tensor(run1(ops::constant(Tensor::from_vector<int64_t>({2}, {7, -8}))), {2}, {7, -8});
  Tensor t = run1(ops::constant(Tensor::from_vector<double>({}, {2.5})));
  EXPECT_EQ(t.dtype(), DType::F64);
  expect_tensor(t, {}, {2.5});
  expect_tensor(run1(ops::constant(Tensor::from_vector<bool>({2}, {true, false}))), {2}, {1, 0});
}

SPIRE_FORWARD_TEST(Variable, KeepsValueAcrossRuns) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output v = ops::variable({2}, DType::F32, "v");
  Output init = ops::assign(v, ops::constant(Tensor::from_vector<float>({2}, {1, 2})));
  Output inc = ops::assign_add(v, ops::constant(Tensor::from_vector<float>({2}, {10, 20})));
  Session s(g);
  expect_error([&] { s.run({v}); }, {"variable 'v' is uninitialized"});
  expect_error([&] { s.run({v * 2.0}); }, {"variable 'v' is uninitialized", "Mul"});
  s.run({init});
  EXPECT_TRUE(s.is_initialized(v.node));
  s.run({inc});
  s.run({inc});
  expect_tensor(s.run({v})[0], {2}, {21, 42});
  // A second session on the same graph has its own state.
  Session s2(g);
  EXPECT_FALSE(s2.is_initialized(v.node));
}

SPIRE_FORWARD_TEST(Variable, FetchedValueIsASnapshot) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output v = ops::variable({2}, DType::F64, "v");
  Output init = ops::assign(v, ops::constant(Tensor::from_vector<double>({2}, {1, 2})));
  Output inc = ops::assign_add(v, ops::scalar(1, DType::F64));
  Session s(g);
  s.run({init});
  Tensor before = s.run({v})[0];
  s.run({inc});
  expect_tensor(before, {2}, {1, 2});  // copy-on-write: the fetched tensor is not mutated
  expect_tensor(s.run({v})[0], {2}, {2, 3});
}

SPIRE_FORWARD_TEST(Assign, ShapeChecks) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output v = ops::variable({2, 2}, DType::F32, "w");
  expect_error([&] { ops::assign(v, ops::constant(Tensor::zeros(DType::F32, {3}))); },
               {"Assign", "[3]", "[2, 2]"});
  Output p = ops::placeholder(DType::F32, {-1, 2}, "p");
  Output a = ops::assign(v, p);
  Session s(g);
  expect_error([&] { s.run({a}, {{p, Tensor::zeros(DType::F32, {3, 2})}}); }, {"assign", "w"});
  s.run({a}, {{p, Tensor::from_vector<float>({2, 2}, {1, 2, 3, 4})}});
  expect_tensor(s.run({v})[0], {2, 2}, {1, 2, 3, 4});
  expect_error([&] { ops::assign(p, p); }, {"must be a variable"});
}

SPIRE_FORWARD_TEST(AssignAdd, BroadcastDelta) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output v = ops::variable({2, 2}, DType::I32, "v");
  Output init = ops::assign(v, ops::constant(Tensor::from_vector<int32_t>({2, 2}, {1, 2, 3, 4})));
  Output up = ops::assign_add(v, ops::constant(Tensor::from_vector<int32_t>({2}, {10, 100})));
  Session s(g);
  s.run({init});
  expect_tensor(s.run({up})[0], {2, 2}, {11, 102, 13, 104});
}

SPIRE_FORWARD_TEST(AssignSub, Values) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output v = ops::variable({2}, DType::F32, "v");
  Output init = ops::assign(v, ops::constant(Tensor::from_vector<float>({2}, {1, 2})));
  Output down = ops::assign_sub(v, ops::scalar(0.5, DType::F32));
  Session s(g);
  expect_error([&] { s.run({down}); }, {"uninitialized"});
  s.run({init});
  s.run({down});
  expect_tensor(s.run({v})[0], {2}, {0.5, 1.5});
}

SPIRE_FORWARD_TEST(Identity, PassesThrough) {
  Graph g;
  DefaultGraphGuard guard(g);
  expect_tensor(run1(ops::identity(ops::constant(Tensor::from_vector<float>({2}, {1, 2})))), {2}, {1, 2});
}

SPIRE_FORWARD_TEST(StopGradient, ForwardIdentityBlocksGradient) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F64, {2}, "x");
  Output y = ops::stop_gradient(x) * x;
  Output gx = gradient(y, x);
  Tensor xv = Tensor::from_vector<double>({2}, {3, 4});
  auto r = run({y, gx}, {{x, xv}});
  expect_tensor(r[0], {2}, {9, 16});
  expect_tensor(r[1], {2}, {3, 4});  // only the non-stopped path contributes
}

SPIRE_FORWARD_TEST(ZerosLike, RuntimeShape) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {-1}, "x");
  expect_tensor(run1(ops::zeros_like(x), {{x, Tensor::from_vector<float>({3}, {1, 2, 3})}}), {3}, {0, 0, 0});
}

SPIRE_FORWARD_TEST(OnesLike, RuntimeShape) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::I64, {-1}, "x");
  expect_tensor(run1(ops::ones_like(x), {{x, Tensor::from_vector<int64_t>({2}, {5, 6})}}), {2}, {1, 1});
}

SPIRE_FORWARD_TEST(NoOp, GroupRunsControlInputs) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output a = ops::variable({}, DType::F32, "a");
  Output b = ops::variable({}, DType::F32, "b");
  Node* init = ops::group({ops::assign(a, ops::scalar(1, DType::F32)).node,
                           ops::assign(b, ops::scalar(2, DType::F32)).node},
                          "init");
  EXPECT_EQ(init->num_outputs(), 0);
  Session s(g);
  s.run_targets({init});
  auto r = s.run({a, b});
  expect_tensor(r[0], {}, {1});
  expect_tensor(r[1], {}, {2});
}

SPIRE_FORWARD_TEST(NoOp, ControlDependenciesScope) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output v = ops::variable({}, DType::F32, "v");
  Output init = ops::assign(v, ops::scalar(5, DType::F32));
  Output read;
  {
    ControlDependencies deps(g, {init.node});
    read = ops::identity(v, "read");
  }
  EXPECT_EQ(read.node->control_inputs().size(), 1u);
  Session s(g);
  expect_tensor(s.run({read})[0], {}, {5});
}

// An update nobody else watches writes the variable's buffer in place; one
// whose old value is held (here: fetched) writes a new buffer instead.
uint64_t cpu_allocs() { return cpu_allocator()->memory_stats().num_allocs; }

TEST(StateOps, AssignAddWritesInPlaceUnlessTheValueIsHeld) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output v = ops::variable({1000}, DType::F32, "v");
  Output init = ops::assign(v, ops::constant(Tensor::zeros(DType::F32, {1000})));
  Output add = ops::assign_add(v, ops::scalar(1.0, DType::F32));
  // A reader of v whose value is still held (fetched) when the update runs.
  Output snap = ops::identity(v, "snap");
  Output add_after_snap;
  {
    ControlDependencies deps(g, {snap.node});
    add_after_snap = ops::assign_add(v, ops::scalar(1.0, DType::F32));
  }
  Session s(g);
  s.run({}, {}, {init.node});
  s.run({}, {}, {add.node});  // the first update copies the buffer shared with the constant
  uint64_t before = cpu_allocs();
  s.run({}, {}, {add.node});
  EXPECT_EQ(cpu_allocs(), before) << "the update copied a buffer nobody else holds";
  // Fetched values are copies: holding one does not stop in-place updates.
  Tensor fetched = s.run({v})[0];
  before = cpu_allocs();
  s.run({}, {}, {add.node});
  EXPECT_EQ(cpu_allocs(), before);
  EXPECT_EQ(fetched.data<float>()[0], 2.0f);
  // A value read earlier in the same run is still held: the update copies.
  before = cpu_allocs();
  auto r = s.run({snap}, {}, {add_after_snap.node});
  EXPECT_EQ(r[0].data<float>()[0], 3.0f);
  EXPECT_EQ(s.variable_value(v.node).data<float>()[0], 4.0f);
  EXPECT_GE(cpu_allocs(), before + 1) << "the update wrote into a value held by a reader";
}

}  // namespace
}  // namespace spire::testing
