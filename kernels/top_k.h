// InTopK's row test (op in core/ops/nn_ops.cc), one SPIRE_HD function shared by the CPU
// kernel (kernels/cpu/softmax_kernels.cc) and the CUDA kernel
// (kernels/cuda/softmax_kernels.cu), so both devices give the same answer on ties and
// non-finite scores. Plain C++, no CUDA includes.
#pragma once

#include <cstdint>

#include "kernels/functors.h"

namespace spire::kernels {

/// Whether class `target` is among the `k` largest of `row` (`classes` scores), as
/// TensorFlow's in_top_k: it is when fewer than k scores are strictly greater than the
/// target's, so ties at the k-th value count as in. A target outside [0, classes) or with
/// a non-finite score is out; a NaN elsewhere in the row is never greater, an infinity is.
template <typename T>
SPIRE_HD inline bool in_top_k_row(const T* row, int64_t classes, int64_t target, int64_t k) {
  if (target < 0 || target >= classes) return false;
  const T t = row[target];
  // Finite: not NaN (t == t) and not an infinity (t - t is NaN for both).
  if (!(t == t) || !((t - t) == (t - t))) return false;
  int64_t greater = 0;
  for (int64_t j = 0; j < classes && greater < k; ++j)
    if (row[j] > t) ++greater;
  return greater < k;
}

}  // namespace spire::kernels
