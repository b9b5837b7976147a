// NumPy-broadcast iteration for CPU kernels: walks the output in contiguous
// rows and gives each input's offset and inner stride (0 when broadcast).
// parallel_for_each_broadcast_row does the same walk split over the kernel's
// thread pool (for kernels whose rows write disjoint outputs).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/kernel_registry.h"
#include "core/shape.h"

namespace spire::cpu {

/// Strides (elements) of a tensor of shape `in` seen broadcast to `out`:
/// 0 along broadcast dimensions, aligned to out's rank.
inline std::vector<int64_t> broadcast_strides(const Shape& in, const Shape& out) {
  std::vector<int64_t> st(static_cast<size_t>(out.rank()), 0);
  int64_t acc = 1;
  for (int i = in.rank() - 1; i >= 0; --i) {
    int o = out.rank() - in.rank() + i;
    st[static_cast<size_t>(o)] = in[i] == 1 ? 0 : acc;
    acc *= in[i];
  }
  return st;
}

/// for_each_broadcast_row restricted to the contiguous output rows (last
/// dimension) [rb, re), always walked row by row. out must have rank >= 1.
template <size_t N, typename F>
void for_each_broadcast_row_range(const Shape& out,
                                  const std::array<std::vector<int64_t>, N>& strides, int64_t rb,
                                  int64_t re, F&& f) {
  const int r = out.rank();
  const int64_t n_inner = out[r - 1];
  std::array<int64_t, N> off{};
  std::array<int64_t, N> inner{};
  for (size_t k = 0; k < N; ++k) inner[k] = strides[k][static_cast<size_t>(r - 1)];
  // Unravel row rb into the outer index and the input offsets.
  std::vector<int64_t> idx(static_cast<size_t>(r), 0);
  int64_t rem = rb;
  for (int d = r - 2; d >= 0; --d) {
    auto du = static_cast<size_t>(d);
    idx[du] = rem % out[d];
    rem /= out[d];
    for (size_t k = 0; k < N; ++k) off[k] += idx[du] * strides[k][du];
  }
  for (int64_t row = rb; row < re; ++row) {
    f(row * n_inner, off, inner, n_inner);
    for (int d = r - 2; d >= 0; --d) {
      auto du = static_cast<size_t>(d);
      ++idx[du];
      for (size_t k = 0; k < N; ++k) off[k] += strides[k][du];
      if (idx[du] < out[d]) break;
      for (size_t k = 0; k < N; ++k) off[k] -= strides[k][du] * out[d];
      idx[du] = 0;
    }
  }
}

/// Calls f(out_offset, in_offsets, in_inner_strides, count) for each
/// contiguous output row; inputs are given by their broadcast strides.
template <size_t N, typename F>
void for_each_broadcast_row(const Shape& out, const std::array<std::vector<int64_t>, N>& strides,
                            F&& f) {
  const int r = out.rank();
  std::array<int64_t, N> off{};
  std::array<int64_t, N> inner{};
  if (r == 0) {
    f(int64_t{0}, off, inner, int64_t{1});
    return;
  }
  const int64_t n_inner = out[r - 1];
  const int64_t total = out.num_elements();
  if (total == 0) return;
  // Contiguous fast path: every input has the full shape.
  bool all_full = true;
  std::vector<int64_t> full = row_major_strides(out);
  for (size_t k = 0; k < N; ++k) all_full = all_full && strides[k] == full;
  if (all_full) {
    inner.fill(1);
    f(int64_t{0}, off, inner, total);
    return;
  }
  for_each_broadcast_row_range<N>(out, strides, 0, total / n_inner, f);
}

/// Elements per parallel chunk of elementwise kernels: ~128 KiB of f32 per
/// operand, enough to amortize waking a thread.
constexpr int64_t kElementwiseGrain = int64_t{1} << 15;

/// for_each_broadcast_row over the kernel's thread pool: the output is cut
/// into ranges of whole rows (or, when every input has the full shape, of
/// elements) of at least `grain` elements, each walked on one thread. `f`
/// must only write the output positions of its row.
template <size_t N, typename F>
void parallel_for_each_broadcast_row(const KernelContext& ctx, const Shape& out,
                                     const std::array<std::vector<int64_t>, N>& strides, F&& f,
                                     int64_t grain = kElementwiseGrain) {
  const int64_t total = out.num_elements();
  const int r = out.rank();
  if (ctx.num_threads() == 1 || total <= grain || r == 0) {
    for_each_broadcast_row<N>(out, strides, f);
    return;
  }
  bool all_full = true;
  std::vector<int64_t> full = row_major_strides(out);
  for (size_t k = 0; k < N; ++k) all_full = all_full && strides[k] == full;
  if (all_full) {
    ctx.parallel_for(total, grain, [&](int64_t b, int64_t e) {
      std::array<int64_t, N> off;
      std::array<int64_t, N> inner;
      off.fill(b);
      inner.fill(1);
      f(b, off, inner, e - b);
    });
    return;
  }
  const int64_t n_inner = out[r - 1];
  if (n_inner == 0) return;
  ctx.parallel_for(total / n_inner, (grain + n_inner - 1) / n_inner, [&](int64_t rb, int64_t re) {
    for_each_broadcast_row_range<N>(out, strides, rb, re, f);
  });
}

}  // namespace spire::cpu
