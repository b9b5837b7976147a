// Placement and Copy nodes: where the graph puts nodes (DeviceScope,
// colocation of ops that write a variable, the CPU-only fallback), the Copy
// nodes it inserts where a node reads another device's tensor (shared per
// source and device, per reader for variables, visible in the listing),
// gradients colocated with their forward nodes, and the error a session gives
// when a node's device has no backend or no hardware. All of this is graph
// building, so it runs without a GPU.
#include <gtest/gtest.h>

#include "core/device_backend.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

// A CPU-only op for the fallback test: requested on a GPU, placed on the CPU.
SPIRE_REGISTER_OP("TestCpuOnlyNeg")
    .input("x")
    .shape_fn([](InferContext& c) { c.set_output(0, c.input_dtype(0), c.input_shape(0)); })
    .no_gradient()
    .cpu_only();
SPIRE_REGISTER_KERNEL("TestCpuOnlyNeg", DeviceType::CPU, [](KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.allocate_output(0, x.shape());
  for (int64_t i = 0; i < x.num_elements(); ++i) y.data<float>()[i] = -x.data<float>()[i];
}, DType::F32);

int count_op(const Graph& g, const std::string& op) {
  int n = 0;
  for (const auto& node : g.nodes()) n += node->op_type() == op;
  return n;
}

TEST(Placement, ReadsAcrossDevicesGoThroughOneSharedCopyNode) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {2, 3}, "x");  // on the CPU
  Output a, b;
  {
    DeviceScope gpu(g, Device::cuda(0));
    a = ops::relu(x);
    b = ops::exp(x);
  }
  EXPECT_EQ(a.node->device(), Device::cuda(0));
  EXPECT_EQ(count_op(g, "Copy"), 1);
  Output copied = a.node->input(0);
  EXPECT_EQ(copied.node->op_type(), "Copy");
  EXPECT_EQ(copied.node->name(), "x/copy_to_cuda_0");
  EXPECT_EQ(copied.node->device(), Device::cuda(0));
  EXPECT_EQ(b.node->input(0), copied);
  // Back on the CPU: a second copy, the other way.
  Output c = ops::add(a, x);
  EXPECT_EQ(c.node->device(), Device::cpu());
  EXPECT_EQ(c.node->input(0).node->op_type(), "Copy");
  EXPECT_EQ(c.node->input(1), x);
  EXPECT_EQ(count_op(g, "Copy"), 2);
  // The listing shows the copies and the devices.
  std::string text = g.to_text();
  EXPECT_NE(text.find("x/copy_to_cuda_0 = Copy(x:0)"), std::string::npos) << text;
  EXPECT_NE(text.find("@cuda:0"), std::string::npos) << text;
}

TEST(Placement, CopiesIgnoreTheReadersControlDependenciesUnlessTheyReadAVariable) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {2}, "x");
  Node* dep = ops::no_op("dep");
  Output v = ops::variable({2}, DType::F32, "v");
  Output r1, r2, r3;
  {
    DeviceScope gpu(g, Device::cuda(0));
    ControlDependencies cd(g, {dep});
    r1 = ops::neg(x);
    r2 = ops::neg(v);
    r3 = ops::exp(v);
  }
  Node* xcopy = r1.node->input(0).node;
  EXPECT_TRUE(xcopy->control_inputs().empty());
  // Each read of a variable gets its own copy that waits like its reader.
  Node* v1 = r2.node->input(0).node;
  Node* v2 = r3.node->input(0).node;
  EXPECT_EQ(v1->op_type(), "Copy");
  EXPECT_NE(v1, v2);
  ASSERT_EQ(v1->control_inputs().size(), 1u);
  EXPECT_EQ(v1->control_inputs()[0], dep);
}

TEST(Placement, AssignRunsWhereItsVariableLives) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output v = ops::variable({2}, DType::F32, "v");
  DeviceScope gpu(g, Device::cuda(0));
  Output t = ops::exp(v);
  Output upd = ops::assign(v, t);
  EXPECT_EQ(upd.node->device(), Device::cpu());
  EXPECT_EQ(upd.node->input(0), v);                      // the reference itself, not a copy
  EXPECT_EQ(upd.node->input(1).node->op_type(), "Copy");  // the value comes back to the CPU
}

TEST(Placement, GradientsAreColocatedWithTheirForwardNodes) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F64, {3}, "x");
  Output y;
  {
    DeviceScope gpu(g, Device::cuda(0));
    y = ops::sum(ops::mul(ops::exp(x), ops::exp(x)));
  }
  Output dx = gradient(y, x);  // built outside any device scope
  // Every gradient node that is not a copy back runs on the GPU, except the
  // final one feeding the CPU input x, which reads through a Copy.
  int gpu_grad_nodes = 0;
  for (const auto& n : g.nodes())
    if (n->id() > y.node->id() && n->op_type() != "Copy")  // the backward nodes
      gpu_grad_nodes += n->device() == Device::cuda(0);
  EXPECT_GT(gpu_grad_nodes, 3);
  EXPECT_EQ(dx.node->op_type(), "Copy");
  EXPECT_EQ(dx.node->device(), Device::cpu());
}

TEST(Placement, CopyNodesAndDevicesSurviveAJsonRoundTrip) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {2, 3}, "x");
  Output y;
  {
    DeviceScope gpu(g, Device::cuda(0));
    y = ops::relu(ops::exp(x));
  }
  ops::add(y, x, "back_on_cpu");
  const std::string json = g.to_json();
  auto g2 = Graph::from_json(json);
  EXPECT_EQ(g2->to_json(), json);  // no extra copies, same devices
  EXPECT_EQ(g2->to_text(), g.to_text());
  EXPECT_EQ(count_op(*g2, "Copy"), 2);
}

TEST(Placement, SessionNamesTheDeviceWhenItCannotRunThere) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::constant(Tensor::from_vector<float>({2}, {1, 2}));
  Output y;
  {
    DeviceScope gpu(g, Device::cuda(0));
    y = ops::neg(x);
  }
  if (device_count(DeviceType::CUDA) > 0) GTEST_SKIP() << "a GPU is present; covered by the GPU tests";
  Session s(g);
  // Without the CUDA backend in the build, or without a GPU, the error says which.
  expect_error([&] { s.run({y}); }, {"cuda:0"});
}

TEST(Placement, CopyKernelOnTheCpuIsAnIdentityForCpuTensors) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {3}, "x");
  Output y = g.add_node("Copy", {x}, {}, "")->output(0);
  Tensor in = Tensor::from_vector<float>({3}, {1.5f, -2, 3});
  Tensor out = run1(y, {{x, in}});
  expect_tensor(out, {3}, {1.5, -2, 3});
}

SPIRE_FORWARD_TEST(TestCpuOnlyNeg, RequestedOnAGpuRunsOnTheCpu) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {3}, "x");
  Output y;
  {
    DeviceScope gpu(g, Device::cuda(0));
    y = g.add_node("TestCpuOnlyNeg", {x}, {}, "")->output(0);
  }
  EXPECT_EQ(y.node->device(), Device::cpu());
  EXPECT_EQ(y.node->input(0), x);  // no copy: both on the CPU
  expect_tensor(run1(y, {{x, Tensor::from_vector<float>({3}, {1, -2, 0.5f})}}), {3}, {-1, 2, -0.5});
}

SPIRE_FORWARD_TEST(Copy, CpuToCpuKeepsValues) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::constant(Tensor::from_vector<int32_t>({2, 2}, {1, -2, 3, 4}));
  Output y = g.add_node("Copy", {x}, {}, "")->output(0);
  expect_tensor(run1(y), {2, 2}, {1, -2, 3, 4});
}

SPIRE_GRAD_CASE(copy_cpu, {"Copy", "cpu to cpu", {{2, 3}},
  [](const std::vector<Output>& x) -> std::vector<Output> {
    Graph& g = *x[0].graph();
    return {ops::mul(g.add_node("Copy", {x[0]}, {}, "")->output(0), x[0])};
  }, nullptr, 2e-6, true});

TEST(Placement, ANodeWhoseShapeInferenceFailsLeavesNoCopyNodes) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output a = ops::placeholder(DType::F32, {2, 3}, "a");
  Output b;
  {
    DeviceScope d(g, Device::cpu(1));
    b = ops::placeholder(DType::F32, {3, 4}, "b");
  }
  const int before = g.num_nodes();
  expect_error([&] { ops::matmul(b, a); }, {"MatMul"});  // placed on cpu:0, reads b from cpu:1
  EXPECT_EQ(g.num_nodes(), before) << g.to_text();
  EXPECT_EQ(g.find_node("b/copy_to_cpu"), nullptr);
  // A valid reader still gets (and shares) its copy.
  Output ok = ops::matmul(a, b);
  EXPECT_NE(g.find_node("b/copy_to_cpu"), nullptr);
  (void)ok;
}

}  // namespace
}  // namespace spire::testing
