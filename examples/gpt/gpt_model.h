// nanoGPT's model (karpathy/nanoGPT model.py) as a Spire tower function: token and
// learned position embeddings, n_layer pre-LayerNorm blocks (causal self-attention with
// the fused ScaledDotProductAttentionQkvPacked op, a 4x MLP with GELU), a final LayerNorm and the
// output projection tied to the token embedding. Used by examples/gpt.cc (training and
// sampling), tests/examples/gpt_parity_test.cc (step parity with PyTorch) and
// bench/gpt_step.cc.
//
// Variables (the names tests/examples/gpt_torch.py maps to nanoGPT's parameters):
//   wte/W [V, C], wpe/W [block_size, C],
//   h<i>/ln_1/gamma [C], h<i>/attn/c_attn/W [C, 3C], h<i>/attn/c_proj/W [C, C],
//   h<i>/ln_2/gamma [C], h<i>/mlp/c_fc/W [C, 4C], h<i>/mlp/c_proj/W [4C, C], ln_f/gamma [C]
//   (+ "/b" and LayerNorm "/beta" with bias). Dense weights are [in, out] (Spire's
//   FullyConnected), the transpose of torch's nn.Linear.weight.
// Initialization as nanoGPT's _init_weights: every dense weight and both embeddings
// N(0, 0.02), the two c_proj weights of each block N(0, 0.02 / sqrt(2 n_layer)), biases 0,
// LayerNorm gamma 1 (beta 0).
#pragma once

#include <cstdint>
#include <string>

#include <spire.h>

namespace spire_examples {

struct GptConfig {
  int64_t vocab_size = 65;
  int64_t block_size = 64;  // the longest context (wpe's rows)
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;
  /// Dropout at nanoGPT's four sites: after the embeddings, on the attention
  /// probabilities, after each attention and MLP projection. The fused attention op has no
  /// dropout, so in a training tower with dropout > 0 attention is built from primitive ops
  /// as nanoGPT's fallback path (the [B, H, T, T] scores are materialized); otherwise
  /// (dropout 0, or inference) it is the fused op.
  double dropout = 0.0;
  bool bias = false;  // biases in the dense layers and LayerNorms (nanoGPT's runs: none)
  spire::ops::GeluApproximate gelu = spire::ops::GeluApproximate::kNone;  // exact erf GELU
  /// The variables' (and so the computation's) dtype: F32, or F64 for exact comparisons.
  spire::DType dtype = spire::DType::F32;

  /// Throws spire::Error unless every size is positive, n_embd % n_head == 0,
  /// dropout lies in [0, 1) and dtype is F32 or F64.
  void check() const;
  /// Parameters, excluding wpe as nanoGPT prints them.
  int64_t num_parameters(bool include_wpe = false) const;
};

/// The logits [B, T, V] (in c.dtype) of tokens `idx` [B, T] (i32 or i64, T <= block_size) under
/// the current tower and variable scope. Dropout follows the tower's training flag. Dense
/// products follow the graph's precision policy (layers/mixed_precision.h): under a mixed
/// policy the matmuls (qkv, projections, MLP, the tied output) run in bf16/f16 with f32
/// master weights; embeddings, LayerNorm, attention, GELU and the loss stay f32.
spire::Output gpt_logits(const spire::Output& idx, const GptConfig& c);

/// nanoGPT's loss: the mean cross-entropy of logits [B, T, V] against targets [B, T].
spire::Output gpt_loss(const spire::Output& logits, const spire::Output& targets,
                       const std::string& name = "loss");

}  // namespace spire_examples
