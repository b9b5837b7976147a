// The per-element evaluator of fused programs (kernels/fused_code.h), which the CUDA
// FusedElementwise and epilogue kernels run on the GPU (kernels/cuda/fused_program.cu),
// run here on the host with host function pointers: for the programs the fusion pass makes
// of random expressions (every fusable op; full, scalar, row and general broadcast inputs;
// f32 and f64; 32- and 64-bit indices) it equals the unfused graph bit for bit. Also: the
// per-element evaluator runs exactly the ops the CPU evaluator fuses, and the CUDA backend
// (when built) registers the same ones; a program it cannot run fails with a clear error.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>

#include "core/device_backend.h"
#include "core/fusion.h"
#include "kernels/fused_code.h"
#include "tests/support/fusion_util.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

template <typename T>
struct HostSink {
  std::map<std::string, kernels::FusedFn<T>> table;
  std::map<std::string, int> arity;  // by op
  template <typename W>
  void add(const char* op, const char* key, int n) {
    table[key] = &kernels::fused_call<W, T>;
    arity[op] = n;
  }
};

template <typename T>
const HostSink<T>& host_fns() {
  static const HostSink<T> sink = [] {
    HostSink<T> s;
    kernels::visit_fused_instructions<T>(s);
    return s;
  }();
  return sink;
}

// Output element i of the fused node `fused` over `inputs`, for every i, with index type I.
template <typename T, typename I>
Tensor evaluate(const Node& fused, const std::vector<Tensor>& inputs) {
  KernelContext ctx(fused, Device::cpu(), inputs.data(), nullptr, nullptr);
  std::vector<Shape> shapes;
  std::vector<const T*> ptrs;
  for (const Tensor& t : inputs) {
    shapes.push_back(t.shape());
    ptrs.push_back(t.data<T>());
  }
  const kernels::FusedProgramCode p =
      kernels::decode_fused_program(ctx, shapes, DeviceType::CPU, inputs[0].dtype());
  kernels::FusedCode<T, I> code;
  kernels::make_fused_code(ctx, p, host_fns<T>().table, ptrs, &code);
  Tensor out(inputs[0].dtype(), p.output_shape());
  T* o = out.data<T>();
  for (int64_t i = 0; i < out.num_elements(); ++i) o[i] = kernels::fused_element(code, static_cast<I>(i));
  return out;
}

template <typename T>
void check_random_expressions(DType dt, int* fused, int* strided) {
  std::mt19937_64 rng(20261128 + static_cast<int>(dt));
  for (int trial = 0; trial < 30; ++trial) {
    Graph g;
    DefaultGraphGuard guard(g);
    const int64_t B = 2 + trial % 4, H = 5, C = 19 + trial;
    std::vector<Output> leaves = {ops::placeholder(dt, {-1, H, C}, "full"), ops::placeholder(dt, {C}, "row"),
                                  ops::placeholder(dt, {-1, 1, 1}, "column"), ops::placeholder(dt, {H, 1}, "hcol"),
                                  ops::placeholder(dt, {}, "scalar"), ops::placeholder(dt, {1, H, C}, "mid")};
    Output y = random_expression(rng, leaves, 2 + trial % 4);
    y = ops::add(y, leaves[0] * 0.5, "result");
    FeedDict feeds;
    const std::vector<Shape> shapes = {{B, H, C}, {C}, {B, 1, 1}, {H, 1}, {}, {1, H, C}};
    for (size_t k = 0; k < leaves.size(); ++k) feeds.emplace_back(leaves[k], random_tensor(dt, shapes[k], rng, -2, 2));

    std::vector<Node*> order;
    for (const auto& n : g.nodes()) order.push_back(n.get());
    Graph side;
    const std::vector<FusedGroup> groups = fuse_elementwise(order, {y}, {}, side);
    const FusedGroup* root = nullptr;
    for (const FusedGroup& grp : groups)
      if (grp.nodes.back() == y.node) root = &grp;
    ASSERT_NE(root, nullptr) << "trial " << trial << ": the result's group did not fuse\n" << g.to_text();
    SessionOptions off;
    off.fuse_elementwise = false;
    Session s(g, off);
    std::vector<Output> fetches{y};
    fetches.insert(fetches.end(), root->inputs.begin(), root->inputs.end());
    const std::vector<Tensor> v = s.run(fetches, feeds);
    const std::vector<Tensor> ins(v.begin() + 1, v.end());
    for (const Tensor& t : ins)
      if (t.num_elements() != 1 && t.num_elements() != v[0].num_elements()) ++*strided;
    ++*fused;
    const Tensor got32 = evaluate<T, uint32_t>(*root->fused, ins);
    const Tensor got64 = evaluate<T, uint64_t>(*root->fused, ins);
    ASSERT_TRUE(bit_equal(v[0], got32)) << dtype_name(dt) << " trial " << trial << ":\n" << g.to_text();
    ASSERT_TRUE(bit_equal(v[0], got64)) << dtype_name(dt) << " trial " << trial;
  }
}

TEST(FusedCode, PerElementEvaluationEqualsTheUnfusedGraphBitForBit) {
  int fused = 0, strided = 0;
  check_random_expressions<float>(DType::F32, &fused, &strided);
  check_random_expressions<double>(DType::F64, &fused, &strided);
  EXPECT_EQ(fused, 60);
  EXPECT_GE(strided, 10) << "the broadcast (strided) path should be exercised";
}

TEST(FusedCode, RunsTheOpsTheCpuFusesAndCudaRegistersTheSame) {
  const bool cuda = find_device_backend(DeviceType::CUDA) != nullptr;
  int checked = 0;
  for (DType dt : {DType::F32, DType::F64}) {
    const std::map<std::string, int>& arity =
        dt == DType::F32 ? host_fns<float>().arity : host_fns<double>().arity;
    for (const std::string& op : OpRegistry::global().op_names()) {
      auto it = arity.find(op);
      const int mine = it == arity.end() ? 0 : it->second;
      EXPECT_EQ(mine, fusable_arity(DeviceType::CPU, op, dt)) << op << " " << dtype_name(dt);
      if (cuda) EXPECT_EQ(mine, fusable_arity(DeviceType::CUDA, op, dt)) << op << " " << dtype_name(dt) << " on CUDA";
      checked += mine > 0;
    }
  }
  EXPECT_GE(checked, 40);
}

TEST(FusedCode, AnInstructionWithoutAFunctionFailsNamingItsNode) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output x = ops::placeholder(DType::F32, {3}, "x");
  Output y = ops::tanh(ops::relu(x, "r"), "t");
  std::vector<Node*> order;
  for (const auto& n : g.nodes()) order.push_back(n.get());
  Graph side;
  const std::vector<FusedGroup> groups = fuse_elementwise(order, {y}, {}, side);
  ASSERT_EQ(groups.size(), 1u);
  Tensor in(DType::F32, {3});
  KernelContext ctx(*groups[0].fused, Device::cpu(), &in, nullptr, nullptr);
  const kernels::FusedProgramCode p = kernels::decode_fused_program(ctx, {Shape{3}}, DeviceType::CPU, DType::F32);
  std::map<std::string, kernels::FusedFn<float>> table = host_fns<float>().table;
  table.erase("Tanh");
  kernels::FusedCode<float, uint32_t> code;
  try {
    kernels::make_fused_code(ctx, p, table, {in.data<float>()}, &code);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fused node 't'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Tanh"), std::string::npos) << e.what();
  }
}

// A program input that reaches only a dead instruction and does not broadcast to the result
// (the pass never makes one; a hand-built node may) fails instead of being read out of bounds.
TEST(FusedCode, AnInputThatDoesNotBroadcastToTheResultFails) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output a = ops::placeholder(DType::F32, {1, 5}, "a"), b = ops::placeholder(DType::F32, {4, 1}, "b");
  AttrMap attrs;
  attrs["ops"] = std::vector<std::string>{"Tanh", "Exp"};
  attrs["operands"] = std::vector<int64_t>{1, 0};
  attrs["nodes"] = std::vector<std::string>{"dead", "e"};
  Output y = g.add_node("FusedElementwise", {a, b}, attrs, "fused")->output(0);
  Session s(g);
  try {
    s.run({y}, {{a, Tensor(DType::F32, {1, 5})}, {b, Tensor(DType::F32, {4, 1})}});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not broadcast to the result"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace spire::testing
