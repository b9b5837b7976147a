// Graph-building functions for the fused attention ops: scaled dot-product
// attention as one op (FlashAttention-style; PyTorch's
// torch.nn.functional.scaled_dot_product_attention) and its gradient op, and
// the same on q, k, v packed in one tensor (flash_attn_qkvpacked_func's
// interface).
// Registered in attention_ops.cc; kernels in kernels/cpu/attention_kernels.cc
// and kernels/cuda/attention_kernels.cu (shared tiling in kernels/attention.h).
#pragma once

#include <string>
#include <vector>

#include "core/graph.h"

namespace spire::ops {

/// softmax(scale * q k^T [+ causal mask]) v for q [..., Tq, D], k [..., Tk, D],
/// v [..., Tk, Dv] (PyTorch's [B, H, T, D] layout; the leading dims must be
/// equal): returns out [..., Tq, Dv]. scale 0 means 1/sqrt(D). With `causal`,
/// query i sees keys j <= i (PyTorch's is_causal, aligned to the top left
/// when Tq != Tk). The node's second output, out.node->output(1), is the
/// per-row natural log-sum-exp of the scaled (masked) scores, [..., Tq],
/// which the gradient reuses. Never materializes more than a block_size x
/// block_size tile of the Tq x Tk scores per slice (attr "block_size",
/// default 64). Dropout on the probabilities is not implemented (attr
/// "dropout_p" must be 0).
Output scaled_dot_product_attention(const Output& q, const Output& k, const Output& v,
                                    bool causal = false, double scale = 0,
                                    const std::string& name = "");

/// Where the sequence and head dims of q, k, v and out are.
enum class AttentionLayout {
  kHeadsFirst,  // [..., H, T, D] (PyTorch's SDPA; the leading dims are any batch dims)
  kSeqFirst,    // [..., T, H, D]: a [B, T, H * D] projection reshaped, no transposes needed;
                // lse is then [..., Tq, H]
};
/// The same with the layout given (attr "seq_first").
Output scaled_dot_product_attention(const Output& q, const Output& k, const Output& v,
                                    AttentionLayout layout, bool causal = false, double scale = 0,
                                    const std::string& name = "");

/// Causal (or not) self-attention on q, k and v packed in one tensor qkv [..., T, 3, H, D]
/// (a [B, T, 3 * H * D] projection reshaped, as flash_attn_qkvpacked_func takes it): the
/// seq_first layout's result, out [..., T, H, D] (lse: out.node->output(1), [..., T, H]),
/// with q, k and v read in place and one gradient tensor dqkv, so neither a split of qkv
/// nor a concat of dq, dk, dv is needed (op ScaledDotProductAttentionQkvPacked).
Output scaled_dot_product_attention_qkv_packed(const Output& qkv, bool causal = false,
                                               double scale = 0, const std::string& name = "");

/// The gradient op of scaled_dot_product_attention (FlashAttention-2's
/// backward): given its inputs, its outputs out and lse, and their gradients
/// dout and dlse, returns {dq, dk, dv} (`layout` as the forward's). Not itself differentiable.
std::vector<Output> scaled_dot_product_attention_grad(
    const Output& q, const Output& k, const Output& v, const Output& out, const Output& lse,
    const Output& dout, const Output& dlse, bool causal = false, double scale = 0,
    int64_t block_size = 64, const std::string& name = "",
    AttentionLayout layout = AttentionLayout::kHeadsFirst);

}  // namespace spire::ops
