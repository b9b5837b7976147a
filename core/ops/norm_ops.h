// Graph-building functions for the fused normalization ops: LayerNorm over
// the last axis and its gradient op LayerNormGrad (llm.c's fused forward and
// backward). Registered in norm_ops.cc; kernels in
// kernels/cpu/layer_norm_kernels.cc and kernels/cuda/layer_norm_kernels.cu,
// sharing their per-row math (kernels/layer_norm.h). The layer with
// variables is spire::LayerNorm (layers/layers.h).
#pragma once

#include <string>

#include "core/graph.h"

namespace spire::ops {

/// The three outputs of layer_norm.
struct LayerNormOutputs {
  Output y;     // like x
  Output mean;  // x's shape without the last dim
  Output rstd;  // 1 / sqrt(biased variance + epsilon), shaped like mean
};

/// LayerNorm over the last axis of x [..., C]: y = (x - mean) * rstd * gamma
/// + beta, gamma and beta of shape [C]. Pass an invalid Output() as beta for
/// no bias (nanoGPT's bias=False): the node then has no beta input. Also
/// returns the per-row mean and rstd (saved for the backward, as llm.c).
/// torch.nn.functional.layer_norm(x, (C,), gamma, beta, epsilon).
LayerNormOutputs layer_norm(const Output& x, const Output& gamma, const Output& beta = Output(),
                            double epsilon = 1e-5, const std::string& name = "");

/// The three outputs of layer_norm_grad.
struct LayerNormGradOutputs {
  Output dx;      // like x
  Output dgamma;  // [C]
  Output dbeta;   // [C]: the sum of dy over the rows
};

/// The gradient of layer_norm in one fused pass per row, from the mean and
/// rstd the forward saved.
LayerNormGradOutputs layer_norm_grad(const Output& dy, const Output& x, const Output& gamma,
                                     const Output& mean, const Output& rstd,
                                     const std::string& name = "");

}  // namespace spire::ops
