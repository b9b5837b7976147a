// Forward tests of ScaledDotProductAttentionQkvPacked and its gradient op
// (core/ops/attention_ops.cc): on qkv [B, T, 3, H, D], out, lse and the gradient dqkv
// must be the bits of the seq_first op on the split q, k, v (whose gradients are
// concatenated back), at 1 and 2 threads, causal or not, tiles of several sizes (ragged
// last tiles, the default 64-wide tile), large logits; empty dims; clear errors for bad
// shapes (at graph build time and, for dims fed at run time, in the kernel); and no
// second derivative.
// The op's finite-difference gradient checks are in attention_ops_cases.cc.
#include <cmath>
#include <cstring>
#include <random>

#include "core/ops/attention_ops.h"
#include "core/ops/op_util.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

struct PackedConfig {
  int64_t b, t, h, d;
  bool causal;
  int64_t block;
  double range = 1;  // qkv uniform in [-range, range]
};

const std::vector<PackedConfig> kPackedConfigs = {
    {2, 13, 3, 8, true, 4},
    {1, 11, 2, 5, false, 4},
    {2, 70, 1, 16, true, 64},  // default block, ragged second tile
    {1, 10, 2, 6, true, 3, 30},  // large logits: the online softmax rescales
};

Output packed_attention(const Output& qkv, const PackedConfig& c) {
  return ops::add_op("ScaledDotProductAttentionQkvPacked", {qkv},
                     {{"causal", c.causal}, {"block_size", c.block}})
      ->output(0);
}

Output split_attention(const Output& qkv, const PackedConfig& c) {
  std::vector<Output> parts = ops::split(qkv, 3, 2);
  for (Output& p : parts) p = ops::reshape(p, Shape{c.b, c.t, c.h, c.d});
  return ops::add_op("ScaledDotProductAttention", {parts[0], parts[1], parts[2]},
                     {{"causal", c.causal}, {"block_size", c.block}, {"seq_first", true}})
      ->output(0);
}

// For every config, dtype and thread count: the packed op's {out, lse} (or, with
// `gradient`, its dqkv) and the seq_first op's on the split inputs must be the same bits.
void expect_packed_equals_split(bool gradient) {
  for (DType dt : {DType::F32, DType::F64})
    for (int threads : {1, 2})
      for (size_t ci = 0; ci < kPackedConfigs.size(); ++ci) {
        const PackedConfig& c = kPackedConfigs[ci];
        SCOPED_TRACE("config " + std::to_string(ci) + " " + dtype_name(dt) + ", " +
                     std::to_string(threads) + " threads");
        Graph g;
        DefaultGraphGuard guard(g);
        std::mt19937_64 rng(40 + ci);
        Output qkv = ops::constant(random_tensor(dt, {c.b, c.t, 3, c.h, c.d}, rng, -c.range, c.range));
        Output w = ops::constant(random_tensor(dt, {c.b, c.t, c.h, c.d}, rng));
        Output packed = packed_attention(qkv, c), split = split_attention(qkv, c);
        EXPECT_EQ(packed.shape(), Shape({c.b, c.t, c.h, c.d}));
        EXPECT_EQ(packed.node->output(1).shape(), Shape({c.b, c.t, c.h}));
        std::vector<Output> fetch = {packed, split, packed.node->output(1), split.node->output(1)};
        std::vector<const char*> names = {"out", "lse"};
        if (gradient) {
          // The loss weights both outputs, so dlse is not zero.
          auto loss = [&](const Output& out) {
            return ops::add(ops::sum(ops::mul(out, w)), ops::sum(ops::tanh(out.node->output(1))));
          };
          fetch = {gradients({loss(packed)}, {qkv})[0], gradients({loss(split)}, {qkv})[0]};
          names = {"dqkv"};
          bool has_grad_op = false;
          for (const auto& node : g.nodes())
            has_grad_op = has_grad_op || node->op_type() == "ScaledDotProductAttentionQkvPackedGrad";
          EXPECT_TRUE(has_grad_op);
        }
        SessionOptions o;
        o.num_threads = threads;
        Session s(g, o);
        const std::vector<Tensor> r = s.run(fetch);
        for (size_t i = 0; i < r.size(); i += 2) {
          ASSERT_EQ(r[i].shape(), r[i + 1].shape()) << names[i / 2];
          EXPECT_EQ(0, std::memcmp(r[i].raw_data(), r[i + 1].raw_data(), r[i].nbytes()))
              << names[i / 2] << " differs";
        }
      }
}

SPIRE_FORWARD_TEST(ScaledDotProductAttentionQkvPacked, EqualsTheSeqFirstOpOnSplitInputs) {
  expect_packed_equals_split(false);
}

SPIRE_FORWARD_TEST(ScaledDotProductAttentionQkvPackedGrad, EqualsTheSplitGradientsConcatenated) {
  expect_packed_equals_split(true);
}

SPIRE_FORWARD_TEST(ScaledDotProductAttentionQkvPacked, EmptyDims) {
  // T = 0, B = 0: empty outputs and gradient; D = 0: out empty, lse = log(T_visible)
  // of zero scores (each query sees its causal prefix), dqkv empty.
  for (const Shape& s : {Shape{1, 0, 3, 2, 4}, Shape{0, 5, 3, 2, 4}, Shape{1, 3, 3, 1, 0}}) {
    SCOPED_TRACE(s.to_string());
    Graph g;
    DefaultGraphGuard guard(g);
    Output qkv = ops::constant(Tensor::zeros(DType::F32, s));
    Output out = ops::scaled_dot_product_attention_qkv_packed(qkv, true);
    Output dqkv = gradients({ops::sum(out)}, {qkv})[0];
    auto got = run({out, out.node->output(1), dqkv});
    EXPECT_EQ(got[0].num_elements(), 0);
    EXPECT_EQ(got[2].shape(), s);
    if (s.dim(4) == 0)
      for (int64_t i = 0; i < 3; ++i)
        EXPECT_NEAR(got[1].data<float>()[i], std::log(static_cast<double>(i + 1)), 1e-6) << i;
    else
      EXPECT_EQ(got[1].num_elements(), 0);
  }
}

SPIRE_FORWARD_TEST(ScaledDotProductAttentionQkvPacked, BadShapesGiveClearErrors) {
  Graph g;
  DefaultGraphGuard guard(g);
  expect_error([&] { ops::scaled_dot_product_attention_qkv_packed(ops::placeholder(DType::F32, {5, 3, 4}), true, 0, "att"); },
               {"ScaledDotProductAttentionQkvPacked", "att", "[..., T, 3, H, D]", "[5, 3, 4]"});
  expect_error([&] { ops::scaled_dot_product_attention_qkv_packed(ops::placeholder(DType::F32, {2, 5, 4, 3, 4})); },
               {"ScaledDotProductAttentionQkvPacked", "[..., T, 3, H, D]", "[2, 5, 4, 3, 4]"});
  expect_error([&] { ops::scaled_dot_product_attention_qkv_packed(ops::placeholder(DType::F32, {1, 5, 2, 2, 4})); },
               {"dim -3 of size 3", "[1, 5, 2, 2, 4]"});
  expect_error([&] { ops::scaled_dot_product_attention_qkv_packed(ops::placeholder(DType::I32, {1, 5, 3, 2, 4})); },
               {"ScaledDotProductAttentionQkvPacked", "i32"});
  Output qkv = ops::placeholder(DType::F32, {1, 5, 3, 2, 4}, "qkv");
  Output out = ops::scaled_dot_product_attention_qkv_packed(qkv);
  Output lse = out.node->output(1);
  expect_error([&] {
    ops::add_op("ScaledDotProductAttentionQkvPackedGrad", {qkv, out, lse, lse, lse}, {}, "g");
  }, {"ScaledDotProductAttentionQkvPackedGrad", "dout", "[1, 5, 2]", "[1, 5, 2, 4]"});
  // Unknown dims: the kernel checks the fed shape.
  Output u = ops::placeholder(DType::F32, {1, 5, -1, 2, 4}, "u");
  Output uo = ops::scaled_dot_product_attention_qkv_packed(u, false, 0, "att_rt");
  expect_error([&] { run1(uo, {{u, Tensor::zeros(DType::F32, {1, 5, 2, 2, 4})}}); },
               {"att_rt", "[..., T, 3, H, D]", "[1, 5, 2, 2, 4]"});
}

TEST(AttentionOps, PackedGradientHasNoGradient) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output qkv = ops::placeholder(DType::F64, {1, 4, 3, 1, 2}, "qkv");
  Output dqkv = gradients({ops::sum(ops::scaled_dot_product_attention_qkv_packed(qkv, true))}, {qkv})[0];
  expect_error([&] { gradients({ops::sum(dqkv)}, {qkv}); },
               {"no gradient defined for op ScaledDotProductAttentionQkvPackedGrad"});
}

}  // namespace
}  // namespace spire::testing
