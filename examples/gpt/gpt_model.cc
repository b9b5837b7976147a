// nanoGPT's model as a tower function (see gpt_model.h).
#include "examples/gpt/gpt_model.h"

#include <cmath>
#include <limits>

namespace spire_examples {

using namespace spire;

void GptConfig::check() const {
  if (vocab_size < 1 || block_size < 1 || n_layer < 1 || n_head < 1 || n_embd < 1)
    throw Error("GptConfig: vocab_size, block_size, n_layer, n_head and n_embd must be positive (got " +
                std::to_string(vocab_size) + ", " + std::to_string(block_size) + ", " +
                std::to_string(n_layer) + ", " + std::to_string(n_head) + ", " + std::to_string(n_embd) + ")");
  if (n_embd % n_head != 0)
    throw Error("GptConfig: n_embd " + std::to_string(n_embd) + " is not a multiple of n_head " +
                std::to_string(n_head));
  if (!(dropout >= 0 && dropout < 1))
    throw Error("GptConfig: dropout must lie in [0, 1), got " + std::to_string(dropout));
  if (dtype != DType::F32 && dtype != DType::F64)
    throw Error(std::string("GptConfig: dtype must be f32 or f64, got ") + dtype_name(dtype));
}

int64_t GptConfig::num_parameters(bool include_wpe) const {
  const int64_t C = n_embd, b = bias ? 1 : 0;
  const int64_t ln = C * (1 + b);
  const int64_t block = 2 * ln + C * 3 * C + b * 3 * C + C * C + b * C + C * 4 * C + b * 4 * C +
                        4 * C * C + b * C;
  return vocab_size * C + (include_wpe ? block_size * C : 0) + n_layer * block + ln;
}

namespace {

Output layer_norm(const std::string& name, const Output& x, const GptConfig& c) {
  return LayerNorm(name, x, LayerNormOptions().epsilon(1e-5).use_bias(c.bias));
}

Output dense(const std::string& name, const Output& x, int64_t units, double stddev, const GptConfig& c) {
  return FullyConnected(name, x, units,
                        FullyConnectedOptions()
                            .use_bias(c.bias)
                            .kernel_initializer(init::normal(0.0, stddev))
                            .bias_initializer(init::zeros()));
}

Output dropout(const std::string& name, const Output& x, const GptConfig& c) {
  if (c.dropout == 0) return x;
  return Dropout(name, x, DropoutOptions().rate(c.dropout));
}

bool training() {
  const TowerContext* tower = get_current_tower_context();
  return tower == nullptr || tower->is_training();  // Dropout's default outside a tower
}

// The additive causal mask of attention_with_dropout: 0 on and below the diagonal, -inf
// above (nanoGPT's masked_fill), [T, T]. Made once per model, shared by its blocks.
Output causal_mask(int64_t T, DType dtype) {
  Tensor mask(dtype, Shape{T, T});
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j) {
      const double m = j <= i ? 0.0 : -std::numeric_limits<double>::infinity();
      if (dtype == DType::F64) mask.data<double>()[i * T + j] = m;
      else mask.data<float>()[i * T + j] = static_cast<float>(m);
    }
  return ops::constant(mask, "causal_mask");
}

// nanoGPT's fallback attention (its path without flash attention), for dropout on the
// attention probabilities, which the fused op does not have: the scaled scores q k^T
// [B, H, T, T] plus the causal mask, softmax, dropout, the weighted sum of v.
Output attention_with_dropout(const Output& q, const Output& k, const Output& v, const Output& mask,
                              const GptConfig& c) {
  const int64_t D = c.n_embd / c.n_head;
  Output att = ops::mul(autocast_batch_matmul(q, k, false, /*adj_b=*/true),
                        ops::scalar(1.0 / std::sqrt(static_cast<double>(D)), c.dtype));
  att = ops::softmax(ops::add(att, mask));
  att = Dropout("attn_dropout", att, DropoutOptions().rate(c.dropout));
  return autocast_batch_matmul(att, v);
}

// Causal self-attention of x [B*T, C]: q, k, v from one projection (in that order). The
// fused attention op reads them in place from that projection, reshaped to
// [B, T, 3, H, D] (its packed layout: no split, and one gradient tensor, no concat), and
// returns the heads already joined; with dropout in a training tower (given a causal
// mask), attention_with_dropout on heads [B, H, T, D]. Then the output projection.
Output attention(const Output& x, int64_t T, const Output& mask, const GptConfig& c) {
  const int64_t C = c.n_embd, H = c.n_head, D = C / H;
  VariableScopeGuard scope("attn");
  Output qkv = dense("c_attn", x, 3 * C, 0.02, c);
  Output y;
  if (mask.valid()) {
    std::vector<Output> parts = ops::split(qkv, 3, 1);
    auto heads = [&](const Output& t) {
      return ops::transpose(ops::reshape(t, Shape{-1, T, H, D}), {0, 2, 1, 3});
    };
    y = attention_with_dropout(heads(parts[0]), heads(parts[1]), heads(parts[2]), mask, c);
    y = ops::transpose(y, {0, 2, 1, 3});
  } else {
    y = ops::scaled_dot_product_attention_qkv_packed(ops::reshape(qkv, Shape{-1, T, 3, H, D}),
                                                     /*causal=*/true);
  }
  y = ops::reshape(y, Shape{-1, C});
  y = dense("c_proj", y, C, 0.02 / std::sqrt(2.0 * static_cast<double>(c.n_layer)), c);
  return dropout("resid_dropout", y, c);
}

Output mlp(const Output& x, const GptConfig& c) {
  VariableScopeGuard scope("mlp");
  Output h = ops::gelu(dense("c_fc", x, 4 * c.n_embd, 0.02, c), c.gelu);
  h = dense("c_proj", h, c.n_embd, 0.02 / std::sqrt(2.0 * static_cast<double>(c.n_layer)), c);
  return dropout("dropout", h, c);
}

}  // namespace

Output gpt_logits(const Output& idx, const GptConfig& c) {
  c.check();
  const Shape& s = idx.shape();
  if (s.rank() != 2 || (idx.dtype() != DType::I32 && idx.dtype() != DType::I64))
    throw Error("gpt_logits: idx must be a [B, T] tensor of i32 or i64 tokens, got " + s.to_string() + " " +
                dtype_name(idx.dtype()));
  const int64_t T = s.dim(1), C = c.n_embd;
  if (T < 1 || T > c.block_size)
    throw Error("gpt_logits: sequence length " + std::to_string(T) + " must lie in [1, block_size " +
                std::to_string(c.block_size) + "]");
  Output wte, wpe;
  {
    VariableScopeGuard scope("wte");
    wte = get_variable("W", Shape{c.vocab_size, C}, c.dtype, init::normal(0.0, 0.02));
  }
  {
    VariableScopeGuard scope("wpe");
    wpe = get_variable("W", Shape{c.block_size, C}, c.dtype, init::normal(0.0, 0.02));
  }
  // tok_emb [B, T, C] + pos_emb [T, C], then the residual stream as [B*T, C].
  Output pos = T == c.block_size ? wpe : ops::slice(wpe, {0, 0}, {T, C});
  Output x = ops::add(ops::gather(wte, idx), pos);
  x = dropout("drop", ops::reshape(x, Shape{-1, C}), c);
  const Output mask = c.dropout > 0 && training() ? causal_mask(T, c.dtype) : Output{};
  for (int64_t i = 0; i < c.n_layer; ++i) {
    VariableScopeGuard scope("h" + std::to_string(i));
    x = ops::add(x, attention(layer_norm("ln_1", x, c), T, mask, c));
    x = ops::add(x, mlp(layer_norm("ln_2", x, c), c));
  }
  x = layer_norm("ln_f", x, c);
  // lm_head, tied to wte: logits = x @ wte^T (the tied variable gets both gradients).
  Output logits = autocast_matmul(x, wte, false, /*transpose_b=*/true);
  return ops::reshape(logits, Shape{-1, T, c.vocab_size}, "logits");
}

Output gpt_loss(const Output& logits, const Output& targets, const std::string& name) {
  const int64_t V = logits.shape().dim(logits.shape().rank() - 1);
  Output flat = ops::reshape(logits, Shape{-1, V});
  Output labels = ops::reshape(targets, Shape{-1});
  return ops::mean(ops::sparse_softmax_cross_entropy_with_logits(flat, labels), {}, false, name);
}

}  // namespace spire_examples
