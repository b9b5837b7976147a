// The per-row math of LayerNorm and LayerNormGrad (ops in core/ops/norm_ops.cc)
// as __host__ __device__ helpers, shared by the CPU kernels
// (kernels/cpu/layer_norm_kernels.cc) and the CUDA kernels
// (kernels/cuda/layer_norm_kernels.cu), so both devices compute each element
// the same way. llm.c's formulas (doc/layernorm/layernorm.md):
//   forward:  mean = sum(x) / C, var = sum((x - mean)^2) / C (biased, two
//             passes), rstd = 1 / sqrt(var + eps),
//             y = (x - mean) * rstd * gamma + beta;
//   backward: norm = (x - mean) * rstd, dnorm = gamma * dy,
//             dx = rstd * (dnorm - mean_C(dnorm) - norm * mean_C(dnorm * norm)),
//             dgamma = sum over rows of norm * dy, dbeta = sum over rows of dy.
// The row sums are reduced by the device kernels (in 8 interleaved lanes on
// the CPU, by warps on the GPU) in an accumulator type Acc; these helpers give the
// value each element contributes and the value each element ends with.
// The host-side shape checks both devices' kernels run first are in
// kernels/layer_norm_attrs.h.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/functors.h"  // SPIRE_HD

namespace spire::kernels {

/// 1 / sqrt(var + eps) in Acc.
template <typename Acc>
SPIRE_HD inline Acc layer_norm_rstd(Acc sum_sq_centered, int64_t c, double eps) {
  using std::sqrt;
  return Acc(1) / sqrt(sum_sq_centered / static_cast<Acc>(c) + static_cast<Acc>(eps));
}

/// The normalized value (x - mean) * rstd.
template <typename T>
SPIRE_HD inline T layer_norm_norm(T x, T mean, T rstd) {
  return (x - mean) * rstd;
}

/// One output element: (x - mean) * rstd * gamma + beta (beta 0 without a bias).
template <typename T>
SPIRE_HD inline T layer_norm_value(T x, T mean, T rstd, T gamma, T beta) {
  return layer_norm_norm(x, mean, rstd) * gamma + beta;
}

/// One element's dnorm = gamma * dy, in the accumulator type.
template <typename Acc, typename T>
SPIRE_HD inline Acc layer_norm_dnorm(T gamma, T dy) {
  return static_cast<Acc>(gamma) * static_cast<Acc>(dy);
}

/// The two row sums of the backward: sum(dnorm) and sum(dnorm * norm).
template <typename Acc>
struct LayerNormGradSums {
  Acc dnorm = 0;
  Acc dnorm_norm = 0;
  /// Adds one element's contribution (dnorm = gamma * dy).
  template <typename T>
  SPIRE_HD void add(T x, T dy, T gamma, T mean, T rstd) {
    const Acc dnorm_i = layer_norm_dnorm<Acc>(gamma, dy);
    dnorm += dnorm_i;
    dnorm_norm += dnorm_i * static_cast<Acc>(layer_norm_norm(x, mean, rstd));
  }
};

/// One dx element, given the row's mean_C(dnorm) and mean_C(dnorm * norm).
template <typename T, typename Acc>
SPIRE_HD inline T layer_norm_dx(T x, T dy, T gamma, T mean, T rstd, Acc mean_dnorm,
                                Acc mean_dnorm_norm) {
  const Acc norm = static_cast<Acc>(layer_norm_norm(x, mean, rstd));
  const Acc dnorm = static_cast<Acc>(gamma) * static_cast<Acc>(dy);
  return static_cast<T>(static_cast<Acc>(rstd) * (dnorm - mean_dnorm - norm * mean_dnorm_norm));
}

/// Rows per block of LayerNormGrad's dgamma/dbeta partial column sums: a
/// function of the row count alone (at most 256 blocks of at least 16 rows),
/// so the blocks, summed in order, give the same result for any number of
/// threads. The CPU and CUDA kernels cut the rows the same way.
SPIRE_HD inline int64_t layer_norm_grad_block_rows(int64_t rows) {
  constexpr int64_t kMaxBlocks = 256, kMinBlockRows = 16;
  const int64_t per = (rows + kMaxBlocks - 1) / kMaxBlocks;
  return per > kMinBlockRows ? per : kMinBlockRows;
}

}  // namespace spire::kernels
