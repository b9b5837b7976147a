// Launch helpers shared by the CUDA kernel files: block size, grid sizing
// for grid-stride loops, and the typed pointer accessors. Every kernel is
// launched on the device context's stream:
//   auto& cc = cuda::context(ctx);
//   my_kernel<<<cuda::blocks_for(cc, n), cuda::kThreads, 0, cc.stream()>>>(...);
//   SPIRE_CUDA_LAUNCH_CHECK();
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cuda_context.h"

namespace spire::cuda {

/// Threads per block of the elementwise-style kernels.
constexpr int kThreads = 256;

/// Blocks for a grid-stride loop over n items: enough to fill the device
/// (a few waves) without one block per item for huge n.
inline int blocks_for(const CudaContext& cc, int64_t n, int threads = kThreads) {
  int64_t want = (n + threads - 1) / threads;
  int64_t cap = static_cast<int64_t>(std::max(cc.sm_count(), 1)) * 32;
  return static_cast<int>(std::max<int64_t>(1, std::min(want, cap)));
}

/// Index of the calling thread in a 1-D grid and the grid's stride.
#define SPIRE_GRID_STRIDE_LOOP(i, n)                                                   \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

}  // namespace spire::cuda
