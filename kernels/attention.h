// The tiling and online-softmax arithmetic of the fused attention ops
// ScaledDotProductAttention, ScaledDotProductAttentionQkvPacked and their
// gradient ops (core/ops/attention_ops.cc), shared by the CPU kernels
// (kernels/cpu/attention_kernels.cc) and the CUDA kernels
// (kernels/cuda/attention_kernels.cu), and the host-side resolution of their
// attrs and run-time shapes (same checks and messages on every device;
// compiled from kernels/attention.cc).
//
// Layout: q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv] (PyTorch's
// [B, H, T, D]); the leading dims are flattened into `batch` (B * H) slices.
// With seq_first, q [..., Tq, H, D], k [..., Tk, H, D], v [..., Tk, H, Dv]
// (a [B, T, H * D] projection reshaped): slice b * H + h is then strided, its
// rows H * width apart. attention_row and attention_row_stride address both.
// Packed (the QkvPacked ops): one tensor qkv [..., T, 3, H, D] holds q, k and
// v (a [B, T, 3 * H * D] projection reshaped), and its gradient dqkv likewise:
// seq_first slices whose rows are 3 * H * D apart, k and v starting H * D and
// 2 * H * D after q. attention_qkv_row and attention_qkv_stride address the
// inputs q, k, v and the gradients dq, dk, dv in either case; out, lse and
// their gradients keep attention_row.
// Scores s_ij = scale * q_i . k_j. With `causal`, query i sees keys j <= i
// (PyTorch's is_causal: the mask is aligned to the top left when Tq != Tk).
// Both kernels walk the score matrix of a slice in block x block tiles and
// never hold more than a tile of it: the forward keeps, per query row, a
// running maximum m and a running sum l of exp(s - m), and rescales the
// output accumulator by exp(m_old - m_new) when m grows (FlashAttention); it
// saves lse_i = m_i + log(l_i) for the backward, which recomputes
// p_ij = exp(s_ij - lse_i) tile by tile (FlashAttention-2).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "core/kernel_registry.h"
#include "kernels/functors.h"

namespace spire::kernels {

/// One attention problem: sizes, scale and mask, resolved from a node's
/// attrs and its inputs' run-time shapes.
struct AttentionDims {
  int64_t batch = 0;  // product of the leading dims (B * H)
  int64_t tq = 0, tk = 0, d = 0, dv = 0;
  double scale = 1;
  bool causal = false;
  int64_t block = 64;  // tile edge (rows of queries and of keys)
  bool seq_first = false;  // [..., T, H, D] instead of [..., H, T, D]
  int64_t heads = 1;       // H when seq_first (slices b * H + h); 1 otherwise
  int64_t qkv_heads = 1;   // head-sized groups per row of q, k, v: 3 * H packed, else heads
};

/// Element offset of row t of slice bh in a tensor of `rows` rows (Tq or Tk) of `width`
/// elements (D, Dv, or 1 for lse) per slice.
SPIRE_HD inline int64_t attention_row(const AttentionDims& a, int64_t bh, int64_t t, int64_t rows,
                                      int64_t width) {
  if (!a.seq_first) return (bh * rows + t) * width;
  const int64_t b = bh / a.heads, h = bh - b * a.heads;
  return ((b * rows + t) * a.heads + h) * width;
}

/// Distance in elements between consecutive rows of a slice.
SPIRE_HD inline int64_t attention_row_stride(const AttentionDims& a, int64_t width) {
  return a.seq_first ? a.heads * width : width;
}

/// attention_row for q, k, v and their gradients (rows of qkv_heads groups when packed);
/// the offset of k or v within a packed row is added by the caller.
SPIRE_HD inline int64_t attention_qkv_row(const AttentionDims& a, int64_t bh, int64_t t,
                                          int64_t rows, int64_t width) {
  if (!a.seq_first) return (bh * rows + t) * width;
  const int64_t b = bh / a.heads, h = bh - b * a.heads;
  return ((b * rows + t) * a.qkv_heads + h) * width;
}

/// attention_row_stride for q, k, v and their gradients.
SPIRE_HD inline int64_t attention_qkv_stride(const AttentionDims& a, int64_t width) {
  return a.seq_first ? a.qkv_heads * width : width;
}

/// Number of tiles of `block` rows covering n rows.
SPIRE_HD inline int64_t attention_num_tiles(int64_t n, int64_t block) {
  return (n + block - 1) / block;
}

/// Whether query row i sees key j.
SPIRE_HD inline bool attention_visible(int64_t i, int64_t j, bool causal) {
  return !causal || j <= i;
}

/// One past the last key that any of the query rows [.., row_end) sees: the
/// key tiles of a query tile stop there (causal tiles above the diagonal are
/// skipped).
SPIRE_HD inline int64_t attention_key_end(int64_t row_end, int64_t tk, bool causal) {
  return causal ? (row_end < tk ? row_end : tk) : tk;
}

/// The first query row that sees key `key_begin`: the query tiles of a key
/// tile start at the tile holding it.
SPIRE_HD inline int64_t attention_query_begin(int64_t key_begin, bool causal) {
  return causal ? key_begin : 0;
}

/// Whether the tile of query rows [i0, i1) and keys [j0, j1) holds a masked
/// entry (then each row's keys are counted with attention_visible_keys).
SPIRE_HD inline bool attention_tile_masked(int64_t i0, int64_t j1, bool causal) {
  return causal && j1 - 1 > i0;
}

/// How many keys of the tile of bk keys starting at j0 query row i sees:
/// the first ones, all of them unless `masked` (causal: those with j <= i).
SPIRE_HD inline int64_t attention_visible_keys(int64_t i, int64_t j0, int64_t bk, bool masked) {
  if (!masked) return bk;
  const int64_t n = i - j0 + 1;
  return n < 0 ? 0 : (n > bk ? bk : n);
}

/// The running maximum of a query row after a tile whose visible scores
/// have maximum `tile_max` (-inf when the tile shows the row nothing), and
/// the factor exp(m_old - m_new) its running sum and accumulator are
/// multiplied by (0 for the row's first tile, where m_old = -inf).
template <typename T>
struct OnlineMax {
  T m;
  T alpha;
};
template <typename T>
SPIRE_HD inline OnlineMax<T> attention_online_max(T m_old, T tile_max) {
  const T m_new = m_old > tile_max ? m_old : tile_max;
  if (m_new == -std::numeric_limits<T>::infinity()) return {m_new, T(1)};
  return {m_new, static_cast<T>(exp(m_old - m_new))};
}

/// A finished row: out = acc / l (0 for a row that saw no key, l = 0), and
/// its log-sum-exp m + log(l) (-inf for such a row).
template <typename T>
SPIRE_HD inline T attention_inv_sum(T l) {
  return l > T(0) ? T(1) / l : T(0);
}
template <typename T>
SPIRE_HD inline T attention_lse(T m, T l) {
  return l > T(0) ? m + static_cast<T>(log(l)) : -std::numeric_limits<T>::infinity();
}

/// The probability the backward recomputes from a score and its row's lse
/// (0 for a masked entry or a row that saw no key).
template <typename T>
SPIRE_HD inline T attention_prob(T s, T lse, bool visible) {
  return visible && lse != -std::numeric_limits<T>::infinity() ? static_cast<T>(exp(s - lse))
                                                               : T(0);
}

/// The sizes of a ScaledDotProductAttention node (inputs q, k, v) or a
/// ScaledDotProductAttentionGrad node (inputs q, k, v, out, lse, dout, dlse)
/// from its attrs and run-time input shapes; ctx.fail names any mismatch.
AttentionDims attention_dims(KernelContext& ctx);
/// The same for a ScaledDotProductAttentionQkvPacked node (input qkv [..., T, 3, H, D]) or
/// its gradient node (inputs qkv, out, lse, dout, dlse): seq_first, qkv_heads = 3 * H.
AttentionDims attention_packed_dims(KernelContext& ctx);
/// The shape of a packed node's out, [..., T, H, D], from qkv's.
Shape attention_packed_out_shape(const Shape& qkv);

/// The data of q, k and v: inputs 0..2, or (kPacked) offsets H * D and 2 * H * D into the
/// one input qkv. Host code, shared by the CPU and CUDA kernels.
template <typename T, bool kPacked>
struct AttentionQkv {
  const T *q, *k, *v;
  AttentionQkv(KernelContext& ctx, const AttentionDims& a) {
    q = ctx.input(0).data<T>();
    k = kPacked ? q + a.heads * a.d : ctx.input(1).data<T>();
    v = kPacked ? q + 2 * a.heads * a.d : ctx.input(2).data<T>();
  }
};

/// A gradient node's buffers: q, k, v as AttentionQkv, out, lse, dout and dlse (the inputs
/// after them), and dq, dk, dv allocated (kPacked: offsets into the one output dqkv).
/// `empty` (kPacked only): qkv has no elements, dqkv is allocated and nothing else is set.
template <typename T, bool kPacked>
struct AttentionGradBuffers {
  const T *q = nullptr, *k = nullptr, *v = nullptr;
  const T *out = nullptr, *lse = nullptr, *dout = nullptr, *dlse = nullptr;
  T *dq = nullptr, *dk = nullptr, *dv = nullptr;
  bool empty = false;
  AttentionGradBuffers(KernelContext& ctx, const AttentionDims& a) {
    if constexpr (kPacked) {
      Tensor& dqkv = ctx.allocate_output(0, ctx.input(0).shape());
      if (dqkv.num_elements() == 0) {  // no data to offset
        empty = true;
        return;
      }
      dq = dqkv.data<T>();
      dk = dq + a.heads * a.d;
      dv = dq + 2 * a.heads * a.d;
    } else {
      dq = ctx.allocate_output(0, ctx.input(0).shape()).data<T>();
      dk = ctx.allocate_output(1, ctx.input(1).shape()).data<T>();
      dv = ctx.allocate_output(2, ctx.input(2).shape()).data<T>();
    }
    const AttentionQkv<T, kPacked> in(ctx, a);
    q = in.q;
    k = in.k;
    v = in.v;
    const int io = kPacked ? 1 : 3;  // out, lse, dout, dlse follow q, k, v (or qkv)
    out = ctx.input(io).data<T>();
    lse = ctx.input(io + 1).data<T>();
    dout = ctx.input(io + 2).data<T>();
    dlse = ctx.input(io + 3).data<T>();
  }
};
/// The shape of out: q's with its last dim dv.
Shape attention_out_shape(const Shape& q, int64_t dv);
/// The shape of lse: q's without its last dim.
Shape attention_lse_shape(const Shape& q);

}  // namespace spire::kernels
