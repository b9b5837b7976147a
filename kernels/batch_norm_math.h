// The arithmetic of the fused batch-normalization kernels (FusedBatchNorm and
// FusedBatchNormGrad, core/ops/batch_norm_ops.h), written once for the CPU
// kernels (kernels/cpu/batch_norm_kernels.cc) and the CUDA kernels
// (kernels/cuda/batch_norm_kernels.cu).
//
// The input is seen as [outer, channels, inner] around the channel axis
// (NHWC with the channel axis last: inner = 1). Both kernels first reduce
// per channel (in double, whatever the element type), then finish with one
// elementwise pass in the element type whose per-channel coefficients come
// from the sums:
//   forward:  mean = S(x) / n, var = S((x - mean)^2) / n (biased),
//             rstd = 1 / sqrt(var + eps), y = (x - mean) * scale + beta
//             with scale = gamma * rstd;
//   backward: with sdy = S(dy) and sdyx = S(dy * (x - mean)),
//             dbeta = sdy, dgamma = sdyx * rstd and
//             dx = a * dy - b - c * (x - mean), a = gamma * rstd,
//             b = a * sdy / n, c = a * rstd^2 * sdyx / n
// (d/dx of gamma * (x - mean) * rstd + beta with the batch mean and variance).
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/functors.h"

namespace spire::kernels {

/// The [outer, channels, inner] view of a batch-norm input.
struct BatchNormView {
  int64_t outer = 1, channels = 1, inner = 1;
  /// Elements per channel (outer * inner).
  int64_t per_channel() const { return outer * inner; }
};

/// A channel's forward scale from its biased batch variance.
SPIRE_HD inline double batch_norm_scale(double var, double gamma, double epsilon) {
  return gamma / sqrt(var + epsilon);
}

/// Per-channel backward coefficients; see the header comment.
struct BatchNormBackwardCoef {
  double a, b, c, mean;
  SPIRE_HD static BatchNormBackwardCoef make(double mean, double var, double gamma, double sdy,
                                             double sdyx, double n, double epsilon) {
    const double rstd = 1.0 / sqrt(var + epsilon);
    const double a = gamma * rstd;
    const double inv_n = n > 0 ? 1.0 / n : 0.0;
    return {a, a * sdy * inv_n, a * rstd * rstd * sdyx * inv_n, mean};
  }
  SPIRE_HD static double dgamma(double var, double sdyx, double epsilon) {
    return sdyx / sqrt(var + epsilon);
  }
};

/// y of one element, with its channel's mean, scale and beta in the element type.
template <typename T>
SPIRE_HD inline T batch_norm_y(T x, T mean, T scale, T beta) {
  return (x - mean) * scale + beta;
}

/// dx of one element, with its channel's a, b, c and mean in the element type.
template <typename T>
SPIRE_HD inline T batch_norm_dx(T dy, T x, T a, T b, T c, T mean) {
  return a * dy - b - c * (x - mean);
}

}  // namespace spire::kernels
