// Index math of the CUDA elementwise kernels (kernels/cuda/elementwise.cu),
// as SPIRE_HD inline functions with no CUDA includes so the host test
// tests/kernels/elementwise_index_test.cc runs the very same code:
//  - BroadcastIndex: NumPy broadcasting of N inputs to an output, with
//    adjacent dimensions coalesced, and the per-input element offsets of an
//    output index (broadcast_offsets);
//  - the path choice of an elementwise launch (flat: every input has the
//    output's layout or one element; general: strided offsets);
//  - the split of a flat launch into 16-byte vectors and a scalar tail.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "core/shape.h"
#include "kernels/functors.h"  // SPIRE_HD

namespace spire::kernels {

/// Largest (coalesced) output rank the strided broadcast path handles.
constexpr int kMaxBroadcastRank = 8;

/// Output dimensions and, per input, the element stride along each output
/// dimension (0 where the input is broadcast). I is the index type: 32-bit
/// when the output has fewer than 2^32 elements (cheaper division on GPUs),
/// else 64-bit. Passed to kernels by value.
template <int N, typename I>
struct BroadcastIndex {
  int rank = 0;
  I dims[kMaxBroadcastRank] = {};
  I strides[N][kMaxBroadcastRank] = {};
};

/// Fills `bi` for inputs of shapes `ins` broadcast to `out` (a fully defined
/// shape that the inputs broadcast to). Dimensions of size 1 are dropped and
/// adjacent dimensions are merged where every input is contiguous (or
/// broadcast) across both, so e.g. [5,3,7] + [3,7] becomes rank 2.
/// Returns false when the coalesced rank exceeds kMaxBroadcastRank.
template <int N, typename I>
inline bool make_broadcast_index(const Shape& out, const std::array<Shape, N>& ins,
                                 BroadcastIndex<N, I>* bi) {
  const int r = out.rank();
  // Full-rank strides, outermost first.
  std::array<std::array<int64_t, 64>, N> st{};
  if (r > 64) return false;
  for (int k = 0; k < N; ++k) {
    int64_t acc = 1;
    for (int d = r - 1; d >= 0; --d) {
      const int i = ins[k].rank() - r + d;
      const int64_t dim = i >= 0 ? ins[k][i] : 1;
      st[k][d] = dim == 1 ? 0 : acc;
      acc *= dim;
    }
  }
  // Coalesce from the innermost dimension outwards into reversed lists.
  int64_t dims[64];
  int64_t cst[N][64];
  int m = 0;
  for (int d = r - 1; d >= 0; --d) {
    if (out[d] == 1) continue;
    bool merge = m > 0;
    for (int k = 0; k < N && merge; ++k)
      merge = st[k][d] == cst[k][m - 1] * dims[m - 1];
    if (merge) {
      dims[m - 1] *= out[d];
    } else {
      dims[m] = out[d];
      for (int k = 0; k < N; ++k) cst[k][m] = st[k][d];
      ++m;
    }
  }
  if (m > kMaxBroadcastRank) return false;
  *bi = BroadcastIndex<N, I>{};
  bi->rank = m;
  for (int j = 0; j < m; ++j) {
    bi->dims[j] = static_cast<I>(dims[m - 1 - j]);
    for (int k = 0; k < N; ++k) bi->strides[k][j] = static_cast<I>(cst[k][m - 1 - j]);
  }
  return true;
}

// Full unrolling in device code, so that a BroadcastIndex kernel parameter
// is read at constant offsets (no copy to local memory).
#ifndef SPIRE_UNROLL
#if defined(__CUDA_ARCH__)
#define SPIRE_UNROLL _Pragma("unroll")
#else
#define SPIRE_UNROLL
#endif
#endif

/// Element offsets of the N inputs for output element `idx` (row-major).
template <int N, typename I>
SPIRE_HD inline void broadcast_offsets(const BroadcastIndex<N, I>& bi, I idx, I (&off)[N]) {
  SPIRE_UNROLL
  for (int k = 0; k < N; ++k) off[k] = 0;
  if (bi.rank == 0) return;
  // Innermost dimensions first: dims rank-1 .. 1 peel off one index each.
  SPIRE_UNROLL
  for (int d = kMaxBroadcastRank - 1; d > 0; --d) {
    if (d >= bi.rank) continue;
    const I q = idx / bi.dims[d];
    const I i = idx - q * bi.dims[d];
    idx = q;
    SPIRE_UNROLL
    for (int k = 0; k < N; ++k) off[k] += i * bi.strides[k][d];
  }
  // What is left is the index along the outermost dimension.
  SPIRE_UNROLL
  for (int k = 0; k < N; ++k) off[k] += idx * bi.strides[k][0];
}

/// How an input of an elementwise op is read on the flat path.
enum class FlatRead {
  kFull,    // same number of elements as the output: element i is element i
  kScalar,  // one element, broadcast to every output element
  kStrided, // anything else: needs the strided broadcast path
};

/// The flat read of an input with `in_elements` elements for an output with
/// `out_elements` (> 0). An input broadcasts to the output, so equal counts
/// mean every broadcast dimension has size 1 and the layouts coincide.
SPIRE_HD inline FlatRead flat_read(int64_t in_elements, int64_t out_elements) {
  if (in_elements == out_elements) return FlatRead::kFull;
  if (in_elements == 1) return FlatRead::kScalar;
  return FlatRead::kStrided;
}

/// Bytes per vectorized load/store of the flat elementwise kernels.
constexpr int kVectorBytes = 16;

/// Elements per vector of a flat kernel whose widest operand (inputs and
/// output) has `max_elem_size` bytes: 4 for f32, 2 for f64/i64, 16 for bool.
constexpr int vector_width(size_t max_elem_size) {
  return static_cast<int>(kVectorBytes / max_elem_size);
}

/// Whether `p` is aligned for a vector of `width` elements of
/// `elem_size` bytes each.
inline bool vector_aligned(const void* p, size_t elem_size, int width) {
  return reinterpret_cast<uintptr_t>(p) % (elem_size * static_cast<size_t>(width)) == 0;
}

/// Number of whole `width`-element vectors the vector body of a flat kernel
/// covers: n / width when every pointer is aligned, else 0. Elements
/// [body * width, n) go to the scalar tail.
SPIRE_HD inline int64_t vector_body_count(int64_t n, int width, bool aligned) {
  return aligned && width > 1 ? n / width : 0;
}

}  // namespace spire::kernels
