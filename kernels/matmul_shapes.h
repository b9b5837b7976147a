// Shape checks and batch broadcasting of MatMul and BatchMatMul, shared by the CPU kernels
// (kernels/cpu/matmul_kernels.cc) and the CUDA kernels (kernels/cuda/matmul_kernels.cu):
// both read the same attrs, raise the same errors and broadcast batch dims by the same
// (NumPy) rules. Host code only; no device code.
#pragma once

#include <cstdint>
#include <vector>

#include "core/kernel_registry.h"

namespace spire::kernels {

/// One GEMM of a MatMul or BatchMatMul node: C[m, n] = op(A) op(B) with op(A) [m, k] and
/// op(B) [k, n]; ta/tb say whether A/B are transposed.
struct MatMulDims {
  bool ta = false, tb = false;
  int64_t m = 0, n = 0, k = 0;
};

/// Checks a MatMul node's inputs (two matrices with matching inner dims under the
/// transpose_a/transpose_b attrs) and returns its dims; fails through ctx.
MatMulDims matmul_dims(KernelContext& ctx);

/// The shapes of a BatchMatMul node: the per-entry GEMM dims, the operands' matrix dims
/// (rows, columns as stored), their batch dims and the broadcast batch.
struct BatchMatMulShapes {
  MatMulDims d;
  int64_t ar = 0, ac = 0, br = 0, bc = 0;  // a is [..., ar, ac], b is [..., br, bc]
  std::vector<int64_t> batch_a, batch_b;   // the batch dims of a and b
  Shape batch;                             // their broadcast
  int64_t count_a = 1, count_b = 1;        // matrices in a and in b
  int64_t total = 1;                       // entries of the broadcast batch
  /// The output shape: batch + [m, n].
  Shape out_shape() const;
};

/// Checks a BatchMatMul node's inputs (rank >= 2, matching inner dims under the adj_a/adj_b
/// attrs, broadcastable batch dims) and returns its shapes; fails through ctx.
BatchMatMulShapes batch_matmul_shapes(KernelContext& ctx);

/// Strides (in matrices) of an operand with batch dims `s` along each dim of the broadcast
/// batch `out` (s right-aligned against out; 0 where s has size 1 or no dim).
std::vector<int64_t> batch_strides(const std::vector<int64_t>& s, const std::vector<int64_t>& out);

}  // namespace spire::kernels
