// Graph-building functions for fused batch normalization in training mode:
// FusedBatchNorm (normalize with the batch statistics, returning them too)
// and its gradient op FusedBatchNormGrad, as TensorFlow's FusedBatchNormV3
// and FusedBatchNormGradV3. Registered in batch_norm_ops.cc; kernels in
// kernels/cpu/batch_norm_kernels.cc and kernels/cuda/batch_norm_kernels.cu.
// The BatchNorm layer (layers/batch_norm.cc) uses them unless its statistics
// are synchronized across towers or it is asked for fused(false).
#pragma once

#include <string>
#include <vector>

#include "core/graph.h"

namespace spire::ops {

/// The outputs of fused_batch_norm.
struct FusedBatchNormOutputs {
  Output y;         // like x
  Output mean;      // [C]: the batch mean per channel
  Output variance;  // [C]: the biased batch variance per channel
};

/// Batch normalization of x over every axis but `axis` (the channel axis, C
/// = x.shape[axis]) with its batch statistics: y = (x - mean) / sqrt(var +
/// epsilon) * gamma + beta, gamma and beta of shape [C]. Differentiable in
/// x, gamma and beta (also through the returned mean and variance); the
/// gradient op FusedBatchNormGrad has no gradient of its own (second order
/// needs the unfused layer: BatchNorm with fused(false)).
FusedBatchNormOutputs fused_batch_norm(const Output& x, const Output& gamma, const Output& beta,
                                       double epsilon = 1e-5, int64_t axis = -1,
                                       const std::string& name = "");

/// The gradient of FusedBatchNorm's y: {dx, dgamma, dbeta} from dy, the
/// forward's x and gamma and its batch mean and variance.
std::vector<Output> fused_batch_norm_grad(const Output& dy, const Output& x, const Output& gamma,
                                          const Output& mean, const Output& variance,
                                          double epsilon, int64_t axis,
                                          const std::string& name = "");

}  // namespace spire::ops
