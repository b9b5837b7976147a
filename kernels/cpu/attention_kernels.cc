// CPU kernels of ScaledDotProductAttention, ScaledDotProductAttentionQkvPacked
// and their gradient ops (core/ops/attention_ops.cc), f32 and f64: FlashAttention's tiled
// forward with an online softmax and FlashAttention-2's backward. The tile
// arithmetic (masking, running maximum, lse) is kernels/attention.h, shared
// with the CUDA kernels; the tile products are the project's GEMM
// (kernels/cpu/gemm.h, single-threaded calls inside each task).
//
// Forward: one task per (slice, query tile) over the session's pool. A task
// holds one block x block tile of scores S = scale Q_i K_j^T at a time, plus
// the tile's output accumulator and per-row (m, l); key tiles past the
// causal diagonal are not visited. Each row's arithmetic is the same
// whatever the thread count, so results do not depend on it.
//
// Backward: one task per slice (B * H of them): for each key tile j, for
// each query tile i that sees it, P is recomputed from lse, then
// dV_j += P^T dO_i, dS = P * (dO_i V_j^T - D_i), dQ_i += scale dS K_j and
// dK_j += scale dS^T Q_i, with D_i = rowsum(dO * O) - dlse_i. A slice's dQ
// is summed by one task in a fixed order: no races, no atomics, and results
// independent of the thread count.
//
// Each task's body runs through run_vec (kernels/cpu/vector_loops.h: compiled per
// instruction set), so a tile row's maximum, exponentials (f32: vmath::exp_f32, within
// 1 ulp; f64: std::exp, scalar calls) and sums run as vectors, the sums in 8 fixed
// lanes: given the same scores, every instruction set and thread count computes the same
// bits (the scores themselves come from gemm(), whose micro-kernels differ per ISA).
// Every layout (heads first, seq_first, packed) is addressed through attention_row
// (out, lse and their gradients) and attention_qkv_row (q, k, v and theirs): the packed
// ops run the same code on q, k and v read in place from qkv, dq, dk and dv written in
// place into dqkv.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/kernel_registry.h"
#include "kernels/attention.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/vector_loops.h"
#include "kernels/vector_math.h"

namespace spire::cpu {
namespace {

using kernels::AttentionDims;

// The row loops below keep kLanes running values (maxima, sums), lane l taking the
// elements l, l + kLanes, ... and lane 0 also the last n mod kLanes (an index that varies
// would keep the lanes in memory): one 256-bit vector of f32 (row_max and row_dot hold it as
// a vector type; exp_shifted's lane array is vectorized by the compiler; the task bodies are
// compiled per instruction set by run_vec; 16 lanes, two AVX2 vectors with the
// exponential's temporaries, measured slower on Zen 3), and, as the lanes and the tree that
// joins them are fixed here and the file is compiled without FMA contraction, every
// instruction set sums in the same order.
constexpr int kLanes = 8;

/// kLanes values of T in one vector (GCC's and clang's vector extension), lowered to the
/// registers of whatever instruction set run_vec compiled the caller for: f32 one ymm
/// (AVX2, AVX-512) or two xmm (baseline); f64 one zmm, two ymm or four xmm.
template <typename T>
struct LanesOf {
  typedef T type __attribute__((vector_size(kLanes * sizeof(T))));
};
// (No function takes one by value or returns one: no calling convention depends on the ISA.)
#define SPIRE_LANES(T) typename LanesOf<T>::type

// __builtin_shufflevector: clang, and GCC from version 12; otherwise the tree runs in memory.
#if defined(__has_builtin)
#if __has_builtin(__builtin_shufflevector)
#define SPIRE_ATTENTION_HAVE_SHUFFLE 1
#endif
#endif
#ifndef SPIRE_ATTENTION_HAVE_SHUFFLE
#define SPIRE_ATTENTION_HAVE_SHUFFLE 0
#endif

/// v[0] + ... + v[kLanes - 1] by a fixed pairwise tree (lanes l += l + 4, then l += l + 2,
/// then 0 += 1), in registers.
template <typename T>
T lane_tree(SPIRE_LANES(T) & v) {
  static_assert(kLanes == 8, "the tree below is written for 8 lanes");
#if SPIRE_ATTENTION_HAVE_SHUFFLE
  // (Lane 0 fills the lanes whose value is never read.)
  v += __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 0, 0, 0);
  v += __builtin_shufflevector(v, v, 2, 3, 0, 0, 0, 0, 0, 0);
  v += __builtin_shufflevector(v, v, 1, 0, 0, 0, 0, 0, 0, 0);
  return v[0];
#else
  T a[kLanes];
  std::memcpy(a, &v, sizeof(a));
  for (int w = kLanes / 2; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) a[l] += a[l + w];
  return a[0];
#endif
}

/// lane_tree of a loop's lanes acc[0..kLanes) with lane 0 replaced by `lane0` (lane 0 after
/// the loop's scalar tail). acc is read back as one vector, as the loop stored it, and the
/// tail is kept out of memory: a vector load of a just-stored scalar would stall.
template <typename T>
T lane_sum(const T* acc, T lane0) {
  SPIRE_LANES(T) v;
  std::memcpy(&v, acc, sizeof(v));
  v[0] = lane0;
  return lane_tree<T>(v);
}

/// The maximum of row[0..n) (-inf when n = 0), NaNs skipped as std::max skips them. A
/// maximum does not round, so this is the sequential loop's value (up to the sign of a
/// zero maximum).
template <typename T>
T row_max(const T* row, int64_t n) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  SPIRE_LANES(T) mx = {neg_inf, neg_inf, neg_inf, neg_inf, neg_inf, neg_inf, neg_inf, neg_inf};
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes) {
    SPIRE_LANES(T) r;
    std::memcpy(&r, row + c, sizeof(r));
    mx = r > mx ? r : mx;
  }
  T m = mx[0];
  for (; c < n; ++c) m = row[c] > m ? row[c] : m;
  for (int l = 1; l < kLanes; ++l) m = mx[l] > m ? mx[l] : m;
  return m;
}

/// The sum of a[c] * b[c] over c < n, in kLanes lanes.
template <typename T>
T row_dot(const T* a, const T* b, int64_t n) {
  SPIRE_LANES(T) acc = {}, x, y;
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes) {
    std::memcpy(&x, a + c, sizeof(x));
    std::memcpy(&y, b + c, sizeof(y));
    acc += x * y;
  }
  T lane0 = acc[0];
  for (; c < n; ++c) lane0 += a[c] * b[c];
  acc[0] = lane0;
  return lane_tree<T>(acc);
}

/// exp(x): f32 through the vectorizable vmath::exp_f32 (within 1 ulp), f64 the library's.
template <typename T>
T exp_of(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return vmath::exp_f32(x);
  } else {
    return std::exp(x);
  }
}

/// row[c] = exp(row[c] - m) for c < n; returns their sum, in kLanes lanes.
template <typename T>
T exp_shifted(T* row, int64_t n, T m) {
  T acc[kLanes] = {};
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes)
#pragma GCC unroll 8
    for (int l = 0; l < kLanes; ++l) {
      const T e = exp_of(row[c + l] - m);
      row[c + l] = e;
      acc[l] += e;
    }
  T lane0 = acc[0];
  for (; c < n; ++c) {
    const T e = exp_of(row[c] - m);
    row[c] = e;
    lane0 += e;
  }
  return lane_sum(acc, lane0);
}

/// The backward's probabilities of one row of a score tile: exp(s - lse) for the n visible
/// keys, 0 for the rest (and for a row that saw no key, lse = -inf), as
/// kernels::attention_prob.
template <typename T>
void probabilities(T* row, int64_t n, int64_t bk, T lse) {
  if (lse == -std::numeric_limits<T>::infinity()) n = 0;
  exp_shifted(row, n, lse);
  for (int64_t c = n; c < bk; ++c) row[c] = T(0);
}

template <typename T, bool kPacked>
void attention_forward_kernel(KernelContext& ctx) {
  const AttentionDims a = kPacked ? kernels::attention_packed_dims(ctx) : kernels::attention_dims(ctx);
  const Tensor& qt = ctx.input(0);
  const Shape out_shape = kPacked ? kernels::attention_packed_out_shape(qt.shape())
                                  : kernels::attention_out_shape(qt.shape(), a.dv);
  Tensor& out = ctx.allocate_output(0, out_shape);
  Tensor& lse = ctx.allocate_output(1, kernels::attention_lse_shape(out_shape));
  if (out.num_elements() == 0 && lse.num_elements() == 0) return;
  const kernels::AttentionQkv<T, kPacked> in(ctx, a);
  const T *pq = in.q, *pk = in.k, *pv = in.v;
  T* po = out.data<T>();
  T* pl = lse.data<T>();
  const int64_t bs = a.block, nqt = kernels::attention_num_tiles(a.tq, bs);
  const T scale = static_cast<T>(a.scale);
  const T neg_inf = -std::numeric_limits<T>::infinity();
  // Row strides of q, k and v (the output and lse are addressed row by row).
  const int64_t ldq = kernels::attention_qkv_stride(a, a.d), ldk = ldq;
  const int64_t ldv = kernels::attention_qkv_stride(a, a.dv);
  ctx.parallel_for(a.batch * nqt, 1, [&](int64_t w0, int64_t w1) {
    run_vec([&] {
      std::vector<T> s(static_cast<size_t>(bs * bs)), acc(static_cast<size_t>(bs * a.dv));
      std::vector<T> m(static_cast<size_t>(bs)), l(static_cast<size_t>(bs));
      for (int64_t w = w0; w < w1; ++w) {
        const int64_t bh = w / nqt, i0 = (w % nqt) * bs, i1 = std::min(i0 + bs, a.tq);
        const int64_t bq = i1 - i0;
        const T* q = pq + kernels::attention_qkv_row(a, bh, i0, a.tq, a.d);
        const T* k = pk + kernels::attention_qkv_row(a, bh, 0, a.tk, a.d);
        const T* v = pv + kernels::attention_qkv_row(a, bh, 0, a.tk, a.dv);
        std::fill(m.begin(), m.end(), neg_inf);
        std::fill(l.begin(), l.end(), T(0));
        std::fill(acc.begin(), acc.end(), T(0));
        const int64_t key_end = kernels::attention_key_end(i1, a.tk, a.causal);
        for (int64_t j0 = 0; j0 < key_end; j0 += bs) {
          const int64_t j1 = std::min(j0 + bs, key_end), bk = j1 - j0;
          gemm(false, true, bq, bk, a.d, scale, q, ldq, k + j0 * ldk, ldk, T(0), s.data(), bk);
          const bool masked = kernels::attention_tile_masked(i0, j1, a.causal);
          for (int64_t r = 0; r < bq; ++r) {
            T* row = s.data() + r * bk;
            const int64_t n = kernels::attention_visible_keys(i0 + r, j0, bk, masked);
            const kernels::OnlineMax<T> om = kernels::attention_online_max(m[r], row_max(row, n));
            m[r] = om.m;
            const T sum = exp_shifted(row, n, om.m);
            for (int64_t c = n; c < bk; ++c) row[c] = T(0);
            l[r] = l[r] * om.alpha + sum;
            if (om.alpha != T(1)) {
              T* ar = acc.data() + r * a.dv;
              for (int64_t c = 0; c < a.dv; ++c) ar[c] *= om.alpha;
            }
          }
          gemm(false, false, bq, a.dv, bk, T(1), s.data(), bk, v + j0 * ldv, ldv, T(1), acc.data(),
               a.dv);
        }
        for (int64_t r = 0; r < bq; ++r) {
          const T inv = kernels::attention_inv_sum(l[r]);
          T* o = po + kernels::attention_row(a, bh, i0 + r, a.tq, a.dv);
          const T* ar = acc.data() + r * a.dv;
          for (int64_t c = 0; c < a.dv; ++c) o[c] = ar[c] * inv;
          pl[kernels::attention_row(a, bh, i0 + r, a.tq, 1)] = kernels::attention_lse(m[r], l[r]);
        }
      }
    });
  });
}

template <typename T, bool kPacked>
void attention_backward_kernel(KernelContext& ctx) {
  const AttentionDims a = kPacked ? kernels::attention_packed_dims(ctx) : kernels::attention_dims(ctx);
  const kernels::AttentionGradBuffers<T, kPacked> buf(ctx, a);
  if (buf.empty) return;
  const T *pq = buf.q, *pk = buf.k, *pv = buf.v;
  const T *po = buf.out, *plse = buf.lse, *pdo = buf.dout, *pdlse = buf.dlse;
  T *pdq = buf.dq, *pdk = buf.dk, *pdv = buf.dv;
  const int64_t bs = a.block;
  const T scale = static_cast<T>(a.scale);
  // Row strides: q, k, dq, dk (width D); v, dv (width Dv); out, dout (width Dv); lse, dlse
  // (width 1).
  const int64_t ld = kernels::attention_qkv_stride(a, a.d);
  const int64_t ldv = kernels::attention_qkv_stride(a, a.dv);
  const int64_t ldo = kernels::attention_row_stride(a, a.dv);
  const int64_t ldl = kernels::attention_row_stride(a, 1);
  ctx.parallel_for(a.batch, 1, [&](int64_t b0, int64_t b1) {
    run_vec([&] {
      std::vector<T> p(static_cast<size_t>(bs * bs)), ds(static_cast<size_t>(bs * bs));
      std::vector<T> delta(static_cast<size_t>(a.tq));
      for (int64_t bh = b0; bh < b1; ++bh) {
        const int64_t q0 = kernels::attention_qkv_row(a, bh, 0, a.tq, a.d);
        const int64_t k0 = kernels::attention_qkv_row(a, bh, 0, a.tk, a.d);
        const int64_t v0 = kernels::attention_qkv_row(a, bh, 0, a.tk, a.dv);
        const int64_t o0 = kernels::attention_row(a, bh, 0, a.tq, a.dv);
        const int64_t l0 = kernels::attention_row(a, bh, 0, a.tq, 1);
        const T* q = pq + q0;
        const T* k = pk + k0;
        const T* v = pv + v0;
        const T* o = po + o0;
        const T* d_o = pdo + o0;
        const T* lse = plse + l0;
        const T* dlse = pdlse + l0;
        T* gq = pdq + q0;
        T* gk = pdk + k0;
        T* gv = pdv + v0;
        // The gradients are not cleared first (a pass over strided rows of the packed dqkv
        // that cost more than the products here): each block's first product writes it (beta
        // 0), the later ones add. Every query block meets key block 0; a key block that no
        // query sees (causal, more keys than queries) is cleared.
        if (a.tk == 0)
          for (int64_t i = 0; i < a.tq; ++i) std::fill(gq + i * ld, gq + i * ld + a.d, T(0));
        // D_i = rowsum(dO * O) - dlse_i: dS = P * (dP - D_i) covers both outputs' gradients.
        for (int64_t i = 0; i < a.tq; ++i)
          delta[static_cast<size_t>(i)] = row_dot(d_o + i * ldo, o + i * ldo, a.dv) - dlse[i * ldl];
        for (int64_t j0 = 0; j0 < a.tk; j0 += bs) {
          const int64_t j1 = std::min(j0 + bs, a.tk), bk = j1 - j0;
          const int64_t first = kernels::attention_query_begin(j0, a.causal) / bs * bs;
          if (first >= a.tq)
            for (int64_t j = j0; j < j1; ++j) {
              std::fill(gk + j * ld, gk + j * ld + a.d, T(0));
              std::fill(gv + j * ldv, gv + j * ldv + a.dv, T(0));
            }
          for (int64_t i0 = first; i0 < a.tq; i0 += bs) {
            // 0 for a key block's first query block (dK_j, dV_j) and for key block 0 (dQ_i).
            const T beta_kv = i0 == first ? T(0) : T(1), beta_q = j0 == 0 ? T(0) : T(1);
            const int64_t i1 = std::min(i0 + bs, a.tq), bq = i1 - i0;
            gemm(false, true, bq, bk, a.d, scale, q + i0 * ld, ld, k + j0 * ld, ld, T(0), p.data(),
                 bk);
            const bool masked = kernels::attention_tile_masked(i0, j1, a.causal);
            for (int64_t r = 0; r < bq; ++r) {
              const int64_t n = kernels::attention_visible_keys(i0 + r, j0, bk, masked);
              probabilities(p.data() + r * bk, n, bk, lse[(i0 + r) * ldl]);
            }
            // dV_j += P^T dO_i
            gemm(true, false, bk, a.dv, bq, T(1), p.data(), bk, d_o + i0 * ldo, ldo, beta_kv,
                 gv + j0 * ldv, ldv);
            // dP = dO_i V_j^T, then dS = P * (dP - D_i)
            gemm(false, true, bq, bk, a.dv, T(1), d_o + i0 * ldo, ldo, v + j0 * ldv, ldv, T(0),
                 ds.data(), bk);
            for (int64_t r = 0; r < bq; ++r) {
              const T di = delta[static_cast<size_t>(i0 + r)];
              const T* pr = p.data() + r * bk;
              T* dr = ds.data() + r * bk;
              for (int64_t c = 0; c < bk; ++c) dr[c] = pr[c] * (dr[c] - di);
            }
            // dQ_i += scale dS K_j; dK_j += scale dS^T Q_i
            gemm(false, false, bq, a.d, bk, scale, ds.data(), bk, k + j0 * ld, ld, beta_q,
                 gq + i0 * ld, ld);
            gemm(true, false, bk, a.d, bq, scale, ds.data(), bk, q + i0 * ld, ld, beta_kv,
                 gk + j0 * ld, ld);
          }
        }
      }
    });
  });
}

}  // namespace

SPIRE_REGISTER_KERNEL("ScaledDotProductAttention", DeviceType::CPU,
                      (attention_forward_kernel<float, false>), DType::F32);
SPIRE_REGISTER_KERNEL("ScaledDotProductAttention", DeviceType::CPU,
                      (attention_forward_kernel<double, false>), DType::F64);
SPIRE_REGISTER_KERNEL("ScaledDotProductAttentionGrad", DeviceType::CPU,
                      (attention_backward_kernel<float, false>), DType::F32);
SPIRE_REGISTER_KERNEL("ScaledDotProductAttentionGrad", DeviceType::CPU,
                      (attention_backward_kernel<double, false>), DType::F64);
SPIRE_REGISTER_KERNEL("ScaledDotProductAttentionQkvPacked", DeviceType::CPU,
                      (attention_forward_kernel<float, true>), DType::F32);
SPIRE_REGISTER_KERNEL("ScaledDotProductAttentionQkvPacked", DeviceType::CPU,
                      (attention_forward_kernel<double, true>), DType::F64);
SPIRE_REGISTER_KERNEL("ScaledDotProductAttentionQkvPackedGrad", DeviceType::CPU,
                      (attention_backward_kernel<float, true>), DType::F32);
SPIRE_REGISTER_KERNEL("ScaledDotProductAttentionQkvPackedGrad", DeviceType::CPU,
                      (attention_backward_kernel<double, true>), DType::F64);

}  // namespace spire::cpu
