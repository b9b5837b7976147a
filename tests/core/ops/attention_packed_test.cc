// Forward tests of ScaledDotProductAttentionQkvPacked and its gradient op
// (core/ops/attention_ops.cc): on qkv [B, T, 3, H, D], out, lse and the gradient dqkv
// must be the bits of the seq_first op on the split q, k, v (whose gradients are
// concatenated back), at 1 and 2 threads, causal or not, tiles of several sizes (ragged
// last tiles, the default 64-wide tile), large logits; and clear errors for bad shapes.
// The op's finite-difference gradient checks are in attention_ops_cases.cc.
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

SPIRE_FORWARD_TEST(ScaledDotProductAttentionQkvPacked, EqualsTheSeqFirstOpOnSplitInputs) {
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
        // The loss weights both outputs, so dlse is not zero.
        auto loss = [&](const Output& out) {
          return ops::add(ops::sum(ops::mul(out, w)), ops::sum(ops::tanh(out.node->output(1))));
        };
        const Output dp = gradients({loss(packed)}, {qkv})[0];
        const Output ds = gradients({loss(split)}, {qkv})[0];
        bool has_grad_op = false;
        for (const auto& node : g.nodes())
          has_grad_op = has_grad_op || node->op_type() == "ScaledDotProductAttentionQkvPackedGrad";
        EXPECT_TRUE(has_grad_op);
        SessionOptions o;
        o.num_threads = threads;
        Session s(g, o);
        const std::vector<Tensor> r =
            s.run({packed, split, packed.node->output(1), split.node->output(1), dp, ds});
        const char* names[] = {"out", "lse", "dqkv"};
        for (size_t i = 0; i < r.size(); i += 2) {
          ASSERT_EQ(r[i].shape(), r[i + 1].shape()) << names[i / 2];
          EXPECT_EQ(0, std::memcmp(r[i].raw_data(), r[i + 1].raw_data(), r[i].nbytes()))
              << names[i / 2] << " differs";
        }
      }
}

SPIRE_FORWARD_TEST(ScaledDotProductAttentionQkvPackedGrad, BadShapesGiveClearErrors) {
  Graph g;
  DefaultGraphGuard guard(g);
  expect_error([&] { ops::scaled_dot_product_attention_qkv_packed(ops::placeholder(DType::F32, {2, 5, 3, 4}), true, 0, "att"); },
               {"ScaledDotProductAttentionQkvPacked", "att", "[..., T, 3, H, D]", "[2, 5, 3, 4]"});
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
}

}  // namespace
}  // namespace spire::testing
