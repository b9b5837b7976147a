// Forward tests of the fused attention ops (core/ops/attention_ops.cc):
// ScaledDotProductAttention against the same attention built from primitive ops
// (batch_matmul, an additive causal mask, softmax) and its lse against a direct loop;
// ScaledDotProductAttentionGrad against the gradients of that primitive-op graph; tiles of
// several sizes (ragged last tiles, Tq != Tk, Dv != D, large logits), results independent
// of the thread count, empty dims, and the error messages for bad shapes, dtypes and attrs.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "core/ops/op_util.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

struct Config {
  int64_t b, h, tq, tk, d, dv;
  bool causal;
  int64_t block;
  double scale = 0;      // 0: 1/sqrt(D)
  double range = 1;      // inputs uniform in [-range, range]
};

const std::vector<Config> kConfigs = {
    {2, 3, 13, 13, 8, 8, true, 4},
    {1, 2, 7, 11, 5, 3, false, 4},
    {1, 2, 11, 6, 4, 4, true, 3},        // Tq > Tk, causal: key tiles end at Tk
    {1, 1, 5, 9, 3, 3, true, 2},         // Tq < Tk, causal: keys past Tq never seen
    {2, 1, 70, 70, 16, 16, true, 64},    // default block, ragged second tile
    {1, 1, 9, 9, 4, 4, false, 64, 0.5},  // one tile, explicit scale
    {1, 2, 10, 10, 6, 6, true, 3, 0, 30},  // large logits: the online softmax rescales
};

// softmax(scale q k^T + mask) v from batch_matmul, softmax and an additive 0 / -inf mask.
Output reference_attention(const Output& q, const Output& k, const Output& v, const Config& c) {
  const double scale = c.scale != 0 ? c.scale : 1 / std::sqrt(static_cast<double>(c.d));
  const DType dt = q.dtype();
  Output s = ops::mul(ops::batch_matmul(q, k, false, true),
                      ops::constant(dt == DType::F64 ? Tensor::scalar<double>(scale)
                                                     : Tensor::scalar<float>(static_cast<float>(scale))));
  if (c.causal) {
    Tensor mask(dt, Shape{c.tq, c.tk});
    for (int64_t i = 0; i < c.tq; ++i)
      for (int64_t j = 0; j < c.tk; ++j) {
        const double m = j <= i ? 0 : -std::numeric_limits<double>::infinity();
        if (dt == DType::F64) mask.data<double>()[i * c.tk + j] = m;
        else mask.data<float>()[i * c.tk + j] = static_cast<float>(m);
      }
    s = ops::add(s, ops::constant(mask));
  }
  return ops::batch_matmul(ops::softmax(s), v);
}

Output fused(const Output& q, const Output& k, const Output& v, const Config& c) {
  return ops::add_op("ScaledDotProductAttention", {q, k, v},
                     {{"causal", c.causal}, {"scale", c.scale}, {"block_size", c.block}})
      ->output(0);
}

// The log-sum-exp of each row's scaled, masked scores, by a direct loop (inputs in f64).
std::vector<double> reference_lse(const Tensor& q, const Tensor& k, const Config& c) {
  const double scale = c.scale != 0 ? c.scale : 1 / std::sqrt(static_cast<double>(c.d));
  std::vector<double> out;
  for (int64_t bh = 0; bh < c.b * c.h; ++bh)
    for (int64_t i = 0; i < c.tq; ++i) {
      std::vector<double> s;
      for (int64_t j = 0; j < c.tk && (!c.causal || j <= i); ++j) {
        double acc = 0;
        for (int64_t x = 0; x < c.d; ++x)
          acc += q.element_as_double((bh * c.tq + i) * c.d + x) *
                 k.element_as_double((bh * c.tk + j) * c.d + x);
        s.push_back(scale * acc);
      }
      double mx = -std::numeric_limits<double>::infinity(), sum = 0;
      for (double x : s) mx = std::max(mx, x);
      for (double x : s) sum += std::exp(x - mx);
      out.push_back(s.empty() ? -std::numeric_limits<double>::infinity() : mx + std::log(sum));
    }
  return out;
}

// Max |a - b| / (1 + |b|) over the elements.
double max_rel_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  double worst = 0;
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    const double x = a.element_as_double(i), y = b.element_as_double(i);
    worst = std::max(worst, std::abs(x - y) / (1 + std::abs(y)));
  }
  return worst;
}

struct Inputs {
  Tensor q, k, v, w;  // w weights out in the loss <w, out>
};

Inputs random_inputs(const Config& c, DType dt, uint64_t seed) {
  std::mt19937_64 rng(seed);
  return {random_tensor(dt, {c.b, c.h, c.tq, c.d}, rng, -c.range, c.range),
          random_tensor(dt, {c.b, c.h, c.tk, c.d}, rng, -c.range, c.range),
          random_tensor(dt, {c.b, c.h, c.tk, c.dv}, rng, -1, 1),
          random_tensor(dt, {c.b, c.h, c.tq, c.dv}, rng, -1, 1)};
}

SPIRE_FORWARD_TEST(ScaledDotProductAttention, MatchesPrimitiveOps) {
  for (DType dt : {DType::F64, DType::F32}) {
    const double tol = dt == DType::F64 ? 1e-12 : 2e-6;
    for (size_t n = 0; n < kConfigs.size(); ++n) {
      const Config& c = kConfigs[n];
      SCOPED_TRACE("config " + std::to_string(n) + " " + dtype_name(dt));
      Graph g;
      DefaultGraphGuard guard(g);
      const Inputs in = random_inputs(c, dt, n);
      Output q = ops::constant(in.q), k = ops::constant(in.k), v = ops::constant(in.v);
      Output out = fused(q, k, v, c);
      EXPECT_EQ(out.shape(), Shape({c.b, c.h, c.tq, c.dv}));
      EXPECT_EQ(out.node->output(1).shape(), Shape({c.b, c.h, c.tq}));
      auto got = run({out, out.node->output(1), reference_attention(q, k, v, c)});
      EXPECT_LE(max_rel_diff(got[0], got[2]), tol);
      const std::vector<double> lse = reference_lse(in.q, in.k, c);
      ASSERT_EQ(got[1].num_elements(), static_cast<int64_t>(lse.size()));
      for (size_t i = 0; i < lse.size(); ++i)
        EXPECT_NEAR(got[1].element_as_double(static_cast<int64_t>(i)), lse[i],
                    tol * (1 + std::abs(lse[i])))
            << "lse row " << i;
    }
  }
}

// While alive, new CPU buffers start as NaN, so an output element a kernel leaves unwritten
// shows in the results.
struct PoisonedCpuBuffers {
  PoisonedCpuBuffers() { get_allocator(Device::cpu())->set_poison(true); }
  ~PoisonedCpuBuffers() { get_allocator(Device::cpu())->set_poison(false); }
  PoisonedCpuBuffers(const PoisonedCpuBuffers&) = delete;
  PoisonedCpuBuffers& operator=(const PoisonedCpuBuffers&) = delete;
};

SPIRE_FORWARD_TEST(ScaledDotProductAttentionGrad, MatchesPrimitiveOpGradients) {
  const PoisonedCpuBuffers poisoned;
  for (DType dt : {DType::F64, DType::F32}) {
    const double tol = dt == DType::F64 ? 1e-11 : 1e-5;
    for (size_t n = 0; n < kConfigs.size(); ++n) {
      const Config& c = kConfigs[n];
      SCOPED_TRACE("config " + std::to_string(n) + " " + dtype_name(dt));
      Graph g;
      DefaultGraphGuard guard(g);
      const Inputs in = random_inputs(c, dt, 100 + n);
      Output q = ops::constant(in.q), k = ops::constant(in.k), v = ops::constant(in.v);
      Output w = ops::constant(in.w);
      std::vector<Output> a = gradients({fused(q, k, v, c)}, {q, k, v}, {w});
      std::vector<Output> b = gradients({reference_attention(q, k, v, c)}, {q, k, v}, {w});
      bool has_grad_op = false;
      for (const auto& node : g.nodes())
        has_grad_op = has_grad_op || node->op_type() == "ScaledDotProductAttentionGrad";
      EXPECT_TRUE(has_grad_op);
      auto got = run({a[0], a[1], a[2], b[0], b[1], b[2]});
      for (int i = 0; i < 3; ++i)
        EXPECT_LE(max_rel_diff(got[static_cast<size_t>(i)], got[static_cast<size_t>(i + 3)]), tol)
            << "gradient w.r.t. input " << i;
    }
  }
}

// The gradient op on its own: D_i includes dlse, so a gradient of lse alone flows too
// (d lse_i / d s_ij = p_ij).
SPIRE_FORWARD_TEST(ScaledDotProductAttentionGrad, LseGradientIsTheProbabilities) {
  const Config c{1, 1, 4, 5, 2, 2, true, 2};
  Graph g;
  DefaultGraphGuard guard(g);
  const Inputs in = random_inputs(c, DType::F64, 7);
  Output q = ops::constant(in.q), k = ops::constant(in.k), v = ops::constant(in.v);
  Output out = fused(q, k, v, c);
  Output lse = out.node->output(1);
  Output g_lse = ops::constant(Tensor::full(DType::F64, {1, 1, 4}, 1.0));
  // d sum(lse) / dv = 0; d sum(lse) / dq_i = scale * sum_j p_ij k_j.
  auto grads = ops::scaled_dot_product_attention_grad(q, k, v, out, lse, ops::zeros_like(out),
                                                      g_lse, true, 0, 2);
  auto got = run({grads[0], grads[2]});
  const double scale = 1 / std::sqrt(2.0);
  for (int64_t i = 0; i < 4; ++i) {
    std::vector<double> s;
    for (int64_t j = 0; j <= i; ++j)
      s.push_back(scale * (in.q.data<double>()[i * 2] * in.k.data<double>()[j * 2] +
                           in.q.data<double>()[i * 2 + 1] * in.k.data<double>()[j * 2 + 1]));
    double mx = -1e300, sum = 0;
    for (double x : s) mx = std::max(mx, x);
    for (double x : s) sum += std::exp(x - mx);
    for (int64_t x = 0; x < 2; ++x) {
      double want = 0;
      for (int64_t j = 0; j <= i; ++j)
        want += scale * std::exp(s[static_cast<size_t>(j)] - mx) / sum * in.k.data<double>()[j * 2 + x];
      EXPECT_NEAR(got[0].data<double>()[i * 2 + x], want, 1e-12) << "row " << i;
    }
  }
  for (int64_t i = 0; i < got[1].num_elements(); ++i) EXPECT_EQ(got[1].data<double>()[i], 0);
}

TEST(AttentionOps, ResultsDoNotDependOnTheThreadCount) {
  const Config c{3, 2, 37, 37, 8, 8, true, 8};
  for (DType dt : {DType::F32, DType::F64}) {
    Graph g;
    DefaultGraphGuard guard(g);
    const Inputs in = random_inputs(c, dt, 11);
    Output q = ops::constant(in.q), k = ops::constant(in.k), v = ops::constant(in.v);
    Output out = fused(q, k, v, c);
    std::vector<Output> fetch = gradients({out}, {q, k, v}, {ops::constant(in.w)});
    fetch.push_back(out);
    fetch.push_back(out.node->output(1));
    std::vector<std::vector<Tensor>> results;
    for (int threads : {1, 2, 3}) {
      SessionOptions o;
      o.num_threads = threads;
      Session s(g, o);
      results.push_back(s.run(fetch));
    }
    for (size_t r = 1; r < results.size(); ++r)
      for (size_t i = 0; i < fetch.size(); ++i)
        EXPECT_EQ(0, std::memcmp(results[0][i].raw_data(), results[r][i].raw_data(),
                                 results[0][i].nbytes()))
            << "fetch " << i << " with " << r + 1 << " threads";
  }
}

// seq_first: q, k, v, out [B, T, H, D] and lse [B, Tq, H] give exactly (bit for bit) the
// heads-first op's results on the transposed tensors, forward and gradients, on every config.
TEST(AttentionOps, SeqFirstLayoutEqualsHeadsFirstOnTransposedInputs) {
  for (DType dt : {DType::F32, DType::F64})
    for (size_t ci = 0; ci < kConfigs.size(); ++ci) {
      const Config& c = kConfigs[ci];
      Graph g;
      DefaultGraphGuard guard(g);
      const Inputs in = random_inputs(c, dt, 100 + ci);
      const std::vector<int64_t> swap = {0, 2, 1, 3};
      Output q = ops::constant(in.q), k = ops::constant(in.k), v = ops::constant(in.v);
      Output w = ops::constant(in.w);
      Output out = fused(q, k, v, c);
      Output lse = out.node->output(1);
      Output qs = ops::transpose(q, swap), ks = ops::transpose(k, swap), vs = ops::transpose(v, swap);
      Output outs_node = ops::add_op("ScaledDotProductAttention", {qs, ks, vs},
                                     {{"causal", c.causal}, {"scale", c.scale},
                                      {"block_size", c.block}, {"seq_first", true}})
                             ->output(0);
      Output lses = outs_node.node->output(1);
      EXPECT_EQ(outs_node.shape(), Shape({c.b, c.tq, c.h, c.dv}));
      EXPECT_EQ(lses.shape(), Shape({c.b, c.tq, c.h}));
      // The loss weights both outputs, so dlse is not zero.
      Output lw = ops::tanh(lse);
      std::vector<Output> want = gradients({ops::add(ops::sum(ops::mul(out, w)), ops::sum(lw))}, {q, k, v});
      std::vector<Output> got = gradients(
          {ops::add(ops::sum(ops::mul(outs_node, ops::transpose(w, swap))),
                    ops::sum(ops::tanh(ops::transpose(lses, {0, 2, 1}))))},
          {qs, ks, vs});
      std::vector<Output> fetch = {out, ops::transpose(outs_node, swap), lse,
                                   ops::transpose(lses, {0, 2, 1})};
      for (int i = 0; i < 3; ++i) {
        fetch.push_back(want[static_cast<size_t>(i)]);
        fetch.push_back(ops::transpose(got[static_cast<size_t>(i)], swap));
      }
      SessionOptions o;
      o.num_threads = 2;
      Session s(g, o);
      const std::vector<Tensor> r = s.run(fetch);
      const char* names[] = {"out", "lse", "dq", "dk", "dv"};
      for (size_t i = 0; i < r.size(); i += 2) {
        ASSERT_EQ(r[i].shape(), r[i + 1].shape()) << names[i / 2];
        EXPECT_EQ(0, std::memcmp(r[i].raw_data(), r[i + 1].raw_data(), r[i].nbytes()))
            << names[i / 2] << " differs, config " << ci << " " << dtype_name(dt)
            << ", max rel diff " << max_rel_diff(r[i + 1], r[i]);
      }
    }
}

TEST(AttentionOps, EmptyDims) {
  Graph g;
  DefaultGraphGuard guard(g);
  // No keys: out is 0 and lse -inf; no queries: empty outputs.
  Output q = ops::constant(Tensor::full(DType::F32, {1, 2, 3}, 1.0));
  Output none = ops::constant(Tensor::zeros(DType::F32, {1, 0, 3}));
  Output out = ops::scaled_dot_product_attention(q, none, none);
  auto got = run({out, out.node->output(1)});
  expect_tensor(got[0], {1, 2, 3}, {0, 0, 0, 0, 0, 0});
  EXPECT_EQ(got[1].data<float>()[0], -std::numeric_limits<float>::infinity());
  Output empty_q = ops::scaled_dot_product_attention(none, q, q, true);
  expect_tensor(run1(empty_q), {1, 0, 3}, {});
  // Their gradients: no keys, dq is 0; no queries, dk and dv are 0 (written, not left as
  // the NaN of a poisoned new buffer).
  const PoisonedCpuBuffers poisoned;
  Output ones = ops::constant(Tensor::full(DType::F32, {1, 2, 3}, 1.0));
  auto no_keys = ops::scaled_dot_product_attention_grad(
      q, none, none, out, out.node->output(1), ones, ops::constant(Tensor::zeros(DType::F32, {1, 2})));
  expect_tensor(run1(no_keys[0]), {1, 2, 3}, {0, 0, 0, 0, 0, 0});
  for (bool causal : {false, true}) {
    Output eq = ops::scaled_dot_product_attention(none, q, q, causal);
    auto no_queries = ops::scaled_dot_product_attention_grad(
        none, q, q, eq, eq.node->output(1), ops::zeros_like(eq),
        ops::constant(Tensor::zeros(DType::F32, {1, 0})), causal);
    auto got = run({no_queries[1], no_queries[2]});
    expect_tensor(got[0], {1, 2, 3}, {0, 0, 0, 0, 0, 0});
    expect_tensor(got[1], {1, 2, 3}, {0, 0, 0, 0, 0, 0});
  }
}

TEST(AttentionOps, BadInputsGiveClearErrors) {
  Graph g;
  DefaultGraphGuard guard(g);
  Output q = ops::placeholder(DType::F32, {2, 3, 5, 4}, "q");
  Output k = ops::placeholder(DType::F32, {2, 3, 6, 4}, "k");
  Output v = ops::placeholder(DType::F32, {2, 3, 6, 2}, "v");
  expect_error([&] { ops::scaled_dot_product_attention(q, ops::placeholder(DType::F32, {2, 3, 6, 5}), v); },
               {"ScaledDotProductAttention", "same last dim D", "[2, 3, 6, 5]"});
  expect_error([&] { ops::scaled_dot_product_attention(q, k, ops::placeholder(DType::F32, {2, 3, 7, 2})); },
               {"same number of keys", "[2, 3, 7, 2]"});
  expect_error([&] { ops::scaled_dot_product_attention(q, k, ops::placeholder(DType::F32, {2, 6, 2})); },
               {"same rank >= 2"});
  expect_error([&] { ops::scaled_dot_product_attention(q, ops::placeholder(DType::F32, {2, 4, 6, 4}), v); },
               {"leading (batch, head) dims"});
  expect_error([&] { ops::scaled_dot_product_attention(q, ops::placeholder(DType::F64, {2, 3, 6, 4}), v); },
               {"f64", "f32"});
  Output qi = ops::placeholder(DType::I32, {2, 3, 5, 4});
  expect_error([&] { ops::scaled_dot_product_attention(qi, qi, qi); }, {"ScaledDotProductAttention", "i32"});
  expect_error([&] { ops::add_op("ScaledDotProductAttention", {q, k, v}, {{"dropout_p", 0.1}}); },
               {"dropout_p > 0 is not implemented"});
  expect_error([&] { ops::add_op("ScaledDotProductAttention", {q, k, v}, {{"block_size", 0}}); },
               {"block_size must be positive"});
  // Unknown dims at graph time: the kernel checks the fed shapes.
  Output qu = ops::placeholder(DType::F32, {-1, 5, 4}, "qu");
  Output ku = ops::placeholder(DType::F32, {-1, 6, 4}, "ku");
  Output out = ops::scaled_dot_product_attention(qu, ku, ku);
  expect_error([&] {
    run1(out, {{qu, Tensor::full(DType::F32, {2, 5, 4}, 1.0)}, {ku, Tensor::full(DType::F32, {3, 6, 4}, 1.0)}});
  }, {"ScaledDotProductAttention", "leading (batch, head) dims", "[3, 6, 4]"});
  // The gradient op's extra inputs, and no second derivative.
  Output o = ops::scaled_dot_product_attention(q, k, v);
  expect_error([&] {
    ops::scaled_dot_product_attention_grad(q, k, v, o, o.node->output(1), q, o.node->output(1));
  }, {"ScaledDotProductAttentionGrad", "dout has shape [2, 3, 5, 4], expected [2, 3, 5, 2]"});
  Output dq = gradients({o}, {q})[0];
  expect_error([&] { gradients({dq}, {q}); },
               {"no gradient defined for op ScaledDotProductAttentionGrad"});
}

}  // namespace
}  // namespace spire::testing
