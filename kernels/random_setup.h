// Host-side setup of the random kernels, shared by the CPU kernels
// (kernels/cpu/random_kernels.cc) and the CUDA kernels
// (kernels/cuda/random_kernels.cu): the attr checks of each op and the
// Philox key and stream offset of a run (kernels/random.h), so both devices
// raise the same errors and draw the same numbers. Host code only.
#pragma once

#include <cstdint>

#include "core/kernel_registry.h"

namespace spire::random {

/// Where one run of a random node draws: element i uses Philox counter
/// offset + i under `key`.
struct DrawSetup {
  uint64_t key = 0;
  uint64_t offset = 0;
};

/// The key of ctx's node (derive_key of the graph seed, op seed and node id)
/// and `count` counters of its stream reserved for this run
/// (SessionState::advance_rng; host-side bookkeeping on every device).
DrawSetup draw_setup(KernelContext& ctx, int64_t count);

/// RandomUniform's range [lo, hi) in T; fails unless lo < hi in T.
template <typename T>
struct UniformRange {
  T lo, hi;
};
template <typename T>
UniformRange<T> uniform_range_attrs(KernelContext& ctx) {
  const T lo = static_cast<T>(ctx.attr<double>("minval"));
  const T hi = static_cast<T>(ctx.attr<double>("maxval"));
  if (!(lo < hi)) ctx.fail("minval must be less than maxval in ", dtype_name(dtype_of<T>));
  return {lo, hi};
}

/// Dropout's rate attr; fails unless it lies in [0, 1).
double dropout_rate_attr(KernelContext& ctx);

/// One device's kernels of the random ops for one dtype.
struct RandomKernels {
  KernelFn uniform, normal, truncated_normal, dropout;
};

/// Registers f32 and f64 as the RandomUniform, RandomNormal, TruncatedNormal
/// and Dropout kernels of `device` for those dtypes.
void register_random_kernels(DeviceType device, const RandomKernels& f32,
                             const RandomKernels& f64);

}  // namespace spire::random
