// Registrations of the fused attention ops declared in attention_ops.h:
// ScaledDotProductAttention (outputs out and lse) and its gradient op
// ScaledDotProductAttentionGrad (FlashAttention-2's backward: recomputes the
// probabilities tile by tile from lse instead of storing the Tq x Tk matrix),
// and the same on one packed input, ScaledDotProductAttentionQkvPacked (qkv
// [..., T, 3, H, D], read in place) with ScaledDotProductAttentionQkvPackedGrad
// (one output dqkv): no split of a [B, T, 3C] projection, no concat of its
// gradient.
// Kernels: kernels/cpu/attention_kernels.cc, kernels/cuda/attention_kernels.cu.
//
// The gradient ops have no gradient function: a second derivative through
// attention fails in gradients() with "no gradient defined for op
// ScaledDotProductAttentionGrad" (or ScaledDotProductAttentionQkvPackedGrad;
// build attention from batch_matmul and softmax where one is needed).
#include "core/ops/attention_ops.h"

#include "core/ops/op_util.h"

namespace spire::ops {
namespace {

using Grads = std::vector<Output>;

// Dims a and b agree unless both are known and differ.
bool dims_agree(int64_t a, int64_t b) { return a < 0 || b < 0 || a == b; }

// Fails unless `s` is compatible with `want` (unknown dims match anything).
void expect_like(const InferContext& c, const char* what, const Shape& s, const Shape& want) {
  bool ok = s.rank() == want.rank();
  for (int i = 0; ok && i < s.rank(); ++i) ok = dims_agree(s[i], want[i]);
  if (!ok) c.fail(what, " has shape ", s.to_string(), ", expected ", want.to_string());
}

void check_block_size(const InferContext& c) {
  if (c.attr<int64_t>("block_size") < 1)
    c.fail("block_size must be positive, got ", c.attr<int64_t>("block_size"));
}

// Checks q, k, v (inputs 0..2) and the attrs; returns the shape of out.
Shape check_qkv(const InferContext& c) {
  c.expect_dtype(0, {DType::F32, DType::F64});
  c.expect_same_dtype(0, 1);
  c.expect_same_dtype(0, 2);
  const Shape& q = c.input_shape(0);
  const Shape& k = c.input_shape(1);
  const Shape& v = c.input_shape(2);
  const int r = q.rank();
  const bool seq_first = c.attr<bool>("seq_first");
  // The dims after the leading (batch) ones: [T, D] or, seq_first, [T, H, D].
  const int inner = seq_first ? 3 : 2;
  if (r < inner || k.rank() != r || v.rank() != r)
    c.fail(seq_first ? "q, k and v must have the same rank >= 3 ([..., T, H, D] with seq_first)"
                     : "q, k and v must have the same rank >= 2 ([..., T, D], e.g. [B, H, T, D])");
  for (int i = 0; i < r - inner; ++i)
    if (!dims_agree(q[i], k[i]) || !dims_agree(q[i], v[i]))
      c.fail("q, k and v must have the same leading (batch, head) dims");
  if (seq_first && (!dims_agree(q[r - 2], k[r - 2]) || !dims_agree(q[r - 2], v[r - 2])))
    c.fail("q, k and v must have the same number of heads (dim -2 with seq_first)");
  if (!dims_agree(q[r - 1], k[r - 1])) c.fail("q and k must have the same last dim D");
  if (!dims_agree(k[r - inner], v[r - inner])) c.fail("k and v must have the same number of keys");
  check_block_size(c);
  const double p = c.attr<double>("dropout_p");
  if (p != 0)
    c.fail("dropout_p > 0 is not implemented (dropout_p = ", p,
           "); use dropout_p = 0 (nanoGPT's baby configuration has dropout 0)");
  std::vector<int64_t> out = q.dims();
  out.back() = v[r - 1];
  return Shape(std::move(out));
}

Shape lse_shape(const Shape& q) {
  return Shape(std::vector<int64_t>(q.dims().begin(), q.dims().end() - 1));
}

AttrMap attention_attrs(bool causal, double scale, int64_t block_size, bool seq_first) {
  return {{"causal", causal},
          {"scale", scale},
          {"block_size", block_size},
          {"dropout_p", 0.0},
          {"seq_first", seq_first}};
}

// Work estimate (OpDef::cost) of node n: `products` multiply-adds per element of q and key
// (QK^T and PV forward: 2; the backward's recomputed scores and four products: 5), half of
// them when causal.
double attention_work(const Node& n, double io, double q_elements, double keys, double products) {
  double macs = q_elements * keys * products;
  if (n.attr<bool>("causal")) macs /= 2;
  return io + macs * kMultiplyAddCost;
}

CostFn attention_cost(double products) {
  return [products](const Node& n) {
    const Shape& q = n.inputs()[0].shape();
    const Shape& k = n.inputs()[1].shape();
    const double io = io_elements(n);
    const int seq_axis = k.rank() - (n.attr<bool>("seq_first") ? 3 : 2);
    if (io < 0 || seq_axis < 0 || !q.is_fully_defined()) return -1.0;
    return attention_work(n, io, static_cast<double>(q.num_elements()),
                          static_cast<double>(k.dim(seq_axis)), products);
  };
}

// Checks qkv [..., T, 3, H, D] (input 0) and the attrs; returns the shape of out,
// [..., T, H, D].
Shape check_packed(const InferContext& c) {
  c.expect_dtype(0, {DType::F32, DType::F64});
  const Shape& qkv = c.input_shape(0);
  const int r = qkv.rank();
  if (r < 4 || !dims_agree(qkv[r - 3], 3))
    c.fail("qkv must be [..., T, 3, H, D] (rank >= 4, dim -3 of size 3); got ", qkv.to_string());
  check_block_size(c);
  std::vector<int64_t> out = qkv.dims();
  out.erase(out.end() - 3);
  return Shape(std::move(out));
}

AttrMap packed_attrs(bool causal, double scale, int64_t block_size) {
  return {{"causal", causal}, {"scale", scale}, {"block_size", block_size}};
}

// attention_cost for a packed node: q has a third of qkv's elements, T keys.
CostFn packed_attention_cost(double products) {
  return [products](const Node& n) {
    const Shape& qkv = n.inputs()[0].shape();
    const double io = io_elements(n);
    if (io < 0 || qkv.rank() < 4 || !qkv.is_fully_defined()) return -1.0;
    return attention_work(n, io, static_cast<double>(qkv.num_elements()) / 3,
                          static_cast<double>(qkv.dim(qkv.rank() - 4)), products);
  };
}

}  // namespace

SPIRE_REGISTER_OP("ScaledDotProductAttention")
    .input("q").input("k").input("v")
    .attr("causal", false).attr("scale", 0.0).attr("block_size", 64).attr("dropout_p", 0.0)
    .attr("seq_first", false)
    .shape_fn([](InferContext& c) {
      const Shape out = check_qkv(c);
      c.set_output(0, c.input_dtype(0), out);
      c.set_output(1, c.input_dtype(0), lse_shape(c.input_shape(0)));
    })
    .cost(attention_cost(2))
    .grad([](GradContext& c) -> Grads {
      // dlse is zeros when only out has a gradient (the usual case).
      Node* g = add_op("ScaledDotProductAttentionGrad",
                       {c.input(0), c.input(1), c.input(2), c.output(0), c.output(1), c.grad(0),
                        c.grad(1)},
                       attention_attrs(c.attr<bool>("causal"), c.attr<double>("scale"),
                                       c.attr<int64_t>("block_size"), c.attr<bool>("seq_first")));
      return {g->output(0), g->output(1), g->output(2)};
    })
    .doc("out = softmax(scale * q k^T, causal mask j <= i when causal) v, for q [..., Tq, D], "
         "k [..., Tk, D], v [..., Tk, Dv]; scale 0 means 1/sqrt(D). Output 1 is the per-row "
         "log-sum-exp [..., Tq] of the scaled scores (-inf for a row that sees no key, whose "
         "out is 0). Tiled with an online softmax (block_size x block_size tiles of the "
         "scores); dropout_p must be 0 (dropout is not implemented). With seq_first, q, k, v "
         "and out are [..., T, H, D] (sequence before heads, as a [B, T, C] projection "
         "reshaped) and lse is [..., Tq, H]: no transposes around the op.");

SPIRE_REGISTER_OP("ScaledDotProductAttentionGrad")
    .input("q").input("k").input("v").input("out").input("lse").input("dout").input("dlse")
    .attr("causal", false).attr("scale", 0.0).attr("block_size", 64).attr("dropout_p", 0.0)
    .attr("seq_first", false)
    .shape_fn([](InferContext& c) {
      const Shape out = check_qkv(c);
      for (int i = 3; i < 7; ++i) c.expect_same_dtype(0, i);
      const Shape lse = lse_shape(c.input_shape(0));
      expect_like(c, "out", c.input_shape(3), out);
      expect_like(c, "lse", c.input_shape(4), lse);
      expect_like(c, "dout", c.input_shape(5), out);
      expect_like(c, "dlse", c.input_shape(6), lse);
      for (int i = 0; i < 3; ++i) c.set_output(i, c.input_dtype(0), c.input_shape(i));
    })
    .cost(attention_cost(5))
    .doc("Gradients {dq, dk, dv} of ScaledDotProductAttention from its inputs, its outputs "
         "out and lse and their gradients dout and dlse (FlashAttention-2's backward: "
         "D_i = rowsum(dout * out) - dlse_i; P recomputed per tile from lse; dV += P^T dO; "
         "dS = P * (dO V^T - D_i); dQ += scale dS K; dK += scale dS^T Q). Not differentiable: "
         "gradients() through it fails with 'no gradient defined'.");

SPIRE_REGISTER_OP("ScaledDotProductAttentionQkvPacked")
    .input("qkv")
    .attr("causal", false).attr("scale", 0.0).attr("block_size", 64)
    .shape_fn([](InferContext& c) {
      const Shape out = check_packed(c);
      c.set_output(0, c.input_dtype(0), out);
      c.set_output(1, c.input_dtype(0), lse_shape(out));
    })
    .cost(packed_attention_cost(2))
    .grad([](GradContext& c) -> Grads {
      Node* g = add_op("ScaledDotProductAttentionQkvPackedGrad",
                       {c.input(0), c.output(0), c.output(1), c.grad(0), c.grad(1)},
                       packed_attrs(c.attr<bool>("causal"), c.attr<double>("scale"),
                                    c.attr<int64_t>("block_size")));
      return {g->output(0)};
    })
    .doc("ScaledDotProductAttention with seq_first on q, k, v packed in one tensor qkv "
         "[..., T, 3, H, D] (a [B, T, 3 * H * D] projection reshaped; Tq = Tk = T, "
         "Dv = D) and read in place: out [..., T, H, D], lse [..., T, H]. Its gradient is one "
         "tensor dqkv of qkv's shape (flash_attn_qkvpacked_func's interface).");

SPIRE_REGISTER_OP("ScaledDotProductAttentionQkvPackedGrad")
    .input("qkv").input("out").input("lse").input("dout").input("dlse")
    .attr("causal", false).attr("scale", 0.0).attr("block_size", 64)
    .shape_fn([](InferContext& c) {
      const Shape out = check_packed(c);
      for (int i = 1; i < 5; ++i) c.expect_same_dtype(0, i);
      const Shape lse = lse_shape(out);
      expect_like(c, "out", c.input_shape(1), out);
      expect_like(c, "lse", c.input_shape(2), lse);
      expect_like(c, "dout", c.input_shape(3), out);
      expect_like(c, "dlse", c.input_shape(4), lse);
      c.set_output(0, c.input_dtype(0), c.input_shape(0));
    })
    .cost(packed_attention_cost(5))
    .doc("The gradient dqkv [..., T, 3, H, D] of ScaledDotProductAttentionQkvPacked from qkv, "
         "out, lse, dout and dlse: ScaledDotProductAttentionGrad's dq, dk and dv written in "
         "place. Not differentiable.");

Output scaled_dot_product_attention(const Output& q, const Output& k, const Output& v, bool causal,
                                    double scale, const std::string& name) {
  return scaled_dot_product_attention(q, k, v, AttentionLayout::kHeadsFirst, causal, scale, name);
}

Output scaled_dot_product_attention(const Output& q, const Output& k, const Output& v,
                                    AttentionLayout layout, bool causal, double scale,
                                    const std::string& name) {
  return add_op("ScaledDotProductAttention", {q, k, v},
                attention_attrs(causal, scale, 64, layout == AttentionLayout::kSeqFirst), name)
      ->output(0);
}

std::vector<Output> scaled_dot_product_attention_grad(
    const Output& q, const Output& k, const Output& v, const Output& out, const Output& lse,
    const Output& dout, const Output& dlse, bool causal, double scale, int64_t block_size,
    const std::string& name, AttentionLayout layout) {
  Node* n = add_op("ScaledDotProductAttentionGrad", {q, k, v, out, lse, dout, dlse},
                   attention_attrs(causal, scale, block_size, layout == AttentionLayout::kSeqFirst),
                   name);
  return {n->output(0), n->output(1), n->output(2)};
}

Output scaled_dot_product_attention_qkv_packed(const Output& qkv, bool causal, double scale,
                                               const std::string& name) {
  return add_op("ScaledDotProductAttentionQkvPacked", {qkv}, packed_attrs(causal, scale, 64), name)
      ->output(0);
}

}  // namespace spire::ops
