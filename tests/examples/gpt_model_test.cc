// Tests of examples/gpt/gpt_model.cc beyond the PyTorch parity (gpt_parity_test.cc): the
// attention path with dropout on the probabilities (nanoGPT's fallback, built from primitive
// ops) against the fused op, dropout itself, the parameter count and the checks of the config
// and inputs.
#include <cmath>
#include <random>
#include <string>

#include "examples/gpt/gpt_model.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

using spire_examples::GptConfig;

GptConfig tiny(DType dtype) {
  GptConfig c;
  c.vocab_size = 11, c.block_size = 9, c.n_layer = 2, c.n_head = 2, c.n_embd = 8, c.dtype = dtype;
  return c;
}

// The loss of a training tower ("") and of an inference tower ("infer") on the same
// variables, for tokens [b, t].
struct TwoTowers {
  Output idx, targets, train_loss, infer_loss;
};
TwoTowers build_two_towers(const GptConfig& c, int64_t b, int64_t t) {
  TwoTowers m;
  m.idx = ops::placeholder(DType::I64, {b, t}, "idx");
  m.targets = ops::placeholder(DType::I64, {b, t}, "targets");
  {
    TowerContext tower("", true);
    m.train_loss = spire_examples::gpt_loss(spire_examples::gpt_logits(m.idx, c), m.targets);
  }
  {
    TowerContext tower("infer", false);
    m.infer_loss = spire_examples::gpt_loss(spire_examples::gpt_logits(m.idx, c), m.targets);
  }
  return m;
}

Tensor tokens(int64_t b, int64_t t, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> pick(0, vocab - 1);
  Tensor x(DType::I64, Shape{b, t});
  for (int64_t i = 0; i < x.num_elements(); ++i) x.data<int64_t>()[i] = pick(rng);
  return x;
}

// The training tower with dropout builds the fallback path; at a rate so small that nothing is
// dropped (1e-12) it must equal the inference tower's fused op on the same variables, in f64
// to rounding: the fallback's scores, mask, softmax and weighted sum are the fused op's math.
TEST(GptModel, AttentionWithDropoutPathEqualsTheFusedOpWhenNothingIsDropped) {
  GptConfig c = tiny(DType::F64);
  c.dropout = 1e-12;
  Graph g;
  DefaultGraphGuard guard(g);
  g.set_seed(3);
  const TwoTowers m = build_two_towers(c, 3, 7);
  bool fallback = false, fused_in_inference = false;
  for (const auto& n : g.nodes()) {
    if (n->name().find("attn_dropout") != std::string::npos && n->name().rfind("infer", 0) != 0) fallback = true;
    if (n->op_type() == "ScaledDotProductAttentionQkvPacked" && n->name().rfind("infer", 0) == 0)
      fused_in_inference = true;
  }
  EXPECT_TRUE(fallback) << "the training tower with dropout should build attn_dropout";
  EXPECT_TRUE(fused_in_inference) << "the inference tower should use the fused op";
  Session s(g);
  s.run_targets({global_variables_initializer(&g)});
  const FeedDict feeds = {{m.idx, tokens(3, 7, c.vocab_size, 1)}, {m.targets, tokens(3, 7, c.vocab_size, 2)}};
  const std::vector<Tensor> out = s.run({m.train_loss, m.infer_loss}, feeds);
  EXPECT_NEAR(out[0].element_as_double(0), out[1].element_as_double(0), 1e-12);
  // And the gradient through the fallback path reaches every variable.
  std::vector<Output> vars = trainable_variables();
  std::vector<Output> grads = gradients({m.train_loss}, vars);
  for (size_t i = 0; i < vars.size(); ++i) EXPECT_TRUE(grads[i].valid()) << vars[i].node->name();
}

TEST(GptModel, DropoutChangesTheTrainingLossOnlyInTraining) {
  GptConfig c = tiny(DType::F32);
  c.dropout = 0.5;
  Graph g;
  DefaultGraphGuard guard(g);
  g.set_seed(5);
  const TwoTowers m = build_two_towers(c, 4, 9);
  Session s(g);
  s.run_targets({global_variables_initializer(&g)});
  const FeedDict feeds = {{m.idx, tokens(4, 9, c.vocab_size, 3)}, {m.targets, tokens(4, 9, c.vocab_size, 4)}};
  const double a = s.run({m.train_loss}, feeds)[0].element_as_double(0);
  const double b = s.run({m.train_loss}, feeds)[0].element_as_double(0);
  const double i1 = s.run({m.infer_loss}, feeds)[0].element_as_double(0);
  const double i2 = s.run({m.infer_loss}, feeds)[0].element_as_double(0);
  EXPECT_TRUE(std::isfinite(a) && std::isfinite(b));
  EXPECT_NE(a, b) << "two training runs should drop different units";
  EXPECT_NE(a, i1);
  EXPECT_EQ(i1, i2) << "inference has no dropout";
}

TEST(GptModel, ParameterCountIsNanoGpts) {
  GptConfig baby;  // 4 layers, 4 heads, 128 wide, context 64, vocabulary 65, no biases
  EXPECT_EQ(baby.num_parameters(), 795904);  // nanoGPT prints 0.80M (wpe excluded)
  EXPECT_EQ(baby.num_parameters(true), 795904 + 64 * 128);
  // And the variables built hold that many elements.
  Graph g;
  DefaultGraphGuard guard(g);
  Output idx = ops::placeholder(DType::I64, {1, 64}, "idx");
  spire_examples::gpt_logits(idx, baby);
  int64_t n = 0;
  for (const Output& v : trainable_variables()) n += v.shape().num_elements();
  EXPECT_EQ(n, baby.num_parameters(true));
}

TEST(GptModel, BadConfigurationsAndInputsAreClearErrors) {
  GptConfig c = tiny(DType::F32);
  c.n_head = 3;
  expect_error([&] { c.check(); }, {"not a multiple of n_head"});
  c = tiny(DType::I32);
  expect_error([&] { c.check(); }, {"dtype must be f32 or f64"});
  c = tiny(DType::F32);
  c.dropout = 1;
  expect_error([&] { c.check(); }, {"dropout must lie in [0, 1)"});
  c = tiny(DType::F32);
  Graph g;
  DefaultGraphGuard guard(g);
  Output too_long = ops::placeholder(DType::I64, {2, 10}, "too_long");
  expect_error([&] { spire_examples::gpt_logits(too_long, c); }, {"must lie in [1, block_size 9]"});
  Output floats = ops::placeholder(DType::F32, {2, 5}, "floats");
  expect_error([&] { spire_examples::gpt_logits(floats, c); }, {"i32 or i64 tokens"});
}

}  // namespace
}  // namespace spire::testing
