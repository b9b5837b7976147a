// Gradient-check cases (f64, central finite differences) of the fused attention ops
// ScaledDotProductAttention and ScaledDotProductAttentionQkvPacked
// (core/ops/attention_ops.cc) and CPU/GPU parity cases of their CUDA kernels
// (kernels/cuda/attention_kernels.cu). The gradient cases use small block
// sizes so that odd lengths (T = 5, 7, 13) span several tiles with a ragged last one,
// causal and not, Tq != Tk (the causal mask aligned to the top left, key tiles past the
// diagonal skipped), Dv != D, and an explicit scale. Cases that also return lse check the
// gradient through it (the dlse input of the gradient op). The gradient cases also run as
// GPU parity cases in f64 and f32; the parity cases below add larger slices (more than one
// 64-wide tile, the default block size) with their gradients.
#include <cmath>

#include "autograd/gradients.h"
#include "core/ops/attention_ops.h"
#include "core/ops/op_util.h"
#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

using In = std::vector<Output>;
using Outs = std::vector<Output>;

// The attention node of q, k, v (inputs 0..2) with the given tile size; returns out, and
// lse too when `with_lse`.
Outs sdpa(const In& x, bool causal, int64_t block, bool with_lse, double scale = 0) {
  Node* n = ops::add_op("ScaledDotProductAttention", {x[0], x[1], x[2]},
                        {{"causal", causal}, {"scale", scale}, {"block_size", block}});
  if (with_lse) return {n->output(0), n->output(1)};
  return {n->output(0)};
}

SPIRE_GRAD_CASE(sdpa_plain, {"ScaledDotProductAttention", "T 5, block 2, out and lse",
  {{1, 2, 5, 3}, {1, 2, 5, 3}, {1, 2, 5, 3}},
  [](const In& x) -> Outs { return sdpa(x, false, 2, true); }});
SPIRE_GRAD_CASE(sdpa_causal7, {"ScaledDotProductAttention", "causal, T 7, block 3",
  {{2, 1, 7, 4}, {2, 1, 7, 4}, {2, 1, 7, 4}},
  [](const In& x) -> Outs { return sdpa(x, true, 3, false); }});
SPIRE_GRAD_CASE(sdpa_causal13, {"ScaledDotProductAttention", "causal, T 13, block 4, out and lse",
  {{1, 1, 13, 2}, {1, 1, 13, 2}, {1, 1, 13, 2}},
  [](const In& x) -> Outs { return sdpa(x, true, 4, true); }});
SPIRE_GRAD_CASE(sdpa_rect, {"ScaledDotProductAttention", "Tq 5, Tk 7, Dv 3 != D 4, block 3",
  {{1, 2, 5, 4}, {1, 2, 7, 4}, {1, 2, 7, 3}},
  [](const In& x) -> Outs { return sdpa(x, false, 3, true); }});
SPIRE_GRAD_CASE(sdpa_causal_tall, {"ScaledDotProductAttention", "causal, Tq 7 > Tk 5, block 2",
  {{1, 1, 7, 3}, {1, 1, 5, 3}, {1, 1, 5, 2}},
  [](const In& x) -> Outs { return sdpa(x, true, 2, true); }});
SPIRE_GRAD_CASE(sdpa_causal_wide, {"ScaledDotProductAttention", "causal, Tq 5 < Tk 8, block 3, scale 0.7",
  {{1, 1, 5, 3}, {1, 1, 8, 3}, {1, 1, 8, 3}},
  [](const In& x) -> Outs { return sdpa(x, true, 3, false, 0.7); }});
SPIRE_GRAD_CASE(sdpa_one_tile, {"ScaledDotProductAttention", "rank 3, one 64-wide tile (default)",
  {{2, 5, 3}, {2, 6, 3}, {2, 6, 2}},
  [](const In& x) -> Outs { return {ops::scaled_dot_product_attention(x[0], x[1], x[2])}; }});

// seq_first: q, k, v [B, T, H, D] (strided slices), lse [B, Tq, H].
Outs sdpa_seq_first(const In& x, bool causal, int64_t block) {
  Node* n = ops::add_op("ScaledDotProductAttention", {x[0], x[1], x[2]},
                        {{"causal", causal}, {"block_size", block}, {"seq_first", true}});
  return {n->output(0), n->output(1)};
}
SPIRE_GRAD_CASE(sdpa_seq_first, {"ScaledDotProductAttention", "seq_first, causal, T 5, H 3, block 2",
  {{2, 5, 3, 4}, {2, 5, 3, 4}, {2, 5, 3, 4}},
  [](const In& x) -> Outs { return sdpa_seq_first(x, true, 2); }});
SPIRE_GRAD_CASE(sdpa_seq_first_rect, {"ScaledDotProductAttention", "seq_first, Tq 4, Tk 7, Dv 2, H 2, block 3",
  {{1, 4, 2, 3}, {1, 7, 2, 3}, {1, 7, 2, 2}},
  [](const In& x) -> Outs { return sdpa_seq_first(x, false, 3); }});

// Packed: qkv [B, T, 3, H, D], out and lse.
Outs sdpa_packed(const In& x, bool causal, int64_t block) {
  Node* n = ops::add_op("ScaledDotProductAttentionQkvPacked", {x[0]},
                        {{"causal", causal}, {"block_size", block}});
  return {n->output(0), n->output(1)};
}
SPIRE_GRAD_CASE(sdpa_packed, {"ScaledDotProductAttentionQkvPacked", "causal, T 5, H 3, block 2",
  {{2, 5, 3, 3, 4}}, [](const In& x) -> Outs { return sdpa_packed(x, true, 2); }});
SPIRE_GRAD_CASE(sdpa_packed_plain, {"ScaledDotProductAttentionQkvPacked", "T 7, H 2, D 3, block 3",
  {{1, 7, 3, 2, 3}}, [](const In& x) -> Outs { return sdpa_packed(x, false, 3); }});

// ---- GPU parity at the default block size, beyond one tile ----------------------------

// out, lse and the gradients of <w, out> w.r.t. q, k and v, w a fixed pattern in [-1, 1].
Outs with_gradients(const In& x, bool causal) {
  Output out = ops::scaled_dot_product_attention(x[0], x[1], x[2], causal);
  Output lse = out.node->output(1);
  Tensor wt(out.dtype(), out.shape());
  for (int64_t i = 0; i < wt.num_elements(); ++i) {
    const double w = std::sin(0.37 * static_cast<double>(i));
    if (out.dtype() == DType::F64) wt.data<double>()[i] = w;
    else wt.data<float>()[i] = static_cast<float>(w);
  }
  Output w = ops::constant(wt);
  Outs r = {out, lse};
  for (const Output& g : gradients({out}, {x[0], x[1], x[2]}, {w})) r.push_back(g);
  return r;
}

SPIRE_PARITY_CASE(sdpa_causal_long, {"ScaledDotProductAttention", "causal B 2 H 3 T 130 D 16",
  {{{2, 3, 130, 16}}, {{2, 3, 130, 16}}, {{2, 3, 130, 16}}},
  [](const In& x) -> Outs { return with_gradients(x, true); }, {DType::F32, DType::F64}, 1e-4, 1e-11});
SPIRE_PARITY_CASE(sdpa_full_long, {"ScaledDotProductAttention", "Tq 70 Tk 129 D 64 Dv 40",
  {{{1, 2, 70, 64}}, {{1, 2, 129, 64}}, {{1, 2, 129, 40}}},
  [](const In& x) -> Outs { return with_gradients(x, false); }, {DType::F32, DType::F64}, 1e-4, 1e-11});

SPIRE_PARITY_CASE(sdpa_seq_first_long, {"ScaledDotProductAttention", "seq_first causal B 2 T 130 H 3 D 16",
  {{{2, 130, 3, 16}}, {{2, 130, 3, 16}}, {{2, 130, 3, 16}}},
  [](const In& x) -> Outs {
    Node* n = ops::add_op("ScaledDotProductAttention", {x[0], x[1], x[2]},
                          {{"causal", true}, {"seq_first", true}});
    Output out = n->output(0);
    Tensor wt(out.dtype(), out.shape());
    for (int64_t i = 0; i < wt.num_elements(); ++i) {
      const double w = std::sin(0.37 * static_cast<double>(i));
      if (out.dtype() == DType::F64) wt.data<double>()[i] = w;
      else wt.data<float>()[i] = static_cast<float>(w);
    }
    Outs r = {out, n->output(1)};
    for (const Output& g : gradients({out}, {x[0], x[1], x[2]}, {ops::constant(wt)})) r.push_back(g);
    return r;
  }, {DType::F32, DType::F64}, 1e-4, 1e-11});

// Packed: qkv [B, T, 3, H, D] beyond one 64-wide tile, with its gradient dqkv.
SPIRE_PARITY_CASE(sdpa_packed_long, {"ScaledDotProductAttentionQkvPacked", "causal B 2 T 130 H 3 D 16",
  {{{2, 130, 3, 3, 16}}},
  [](const In& x) -> Outs {
    Output out = ops::scaled_dot_product_attention_qkv_packed(x[0], true);
    Tensor wt(out.dtype(), out.shape());
    for (int64_t i = 0; i < wt.num_elements(); ++i) {
      const double w = std::sin(0.37 * static_cast<double>(i));
      if (out.dtype() == DType::F64) wt.data<double>()[i] = w;
      else wt.data<float>()[i] = static_cast<float>(w);
    }
    return {out, out.node->output(1), gradients({out}, {x[0]}, {ops::constant(wt)})[0]};
  }, {DType::F32, DType::F64}, 1e-4, 1e-11});

}  // namespace
}  // namespace spire::testing
