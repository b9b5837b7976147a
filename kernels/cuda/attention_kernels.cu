// CUDA kernels of ScaledDotProductAttention, ScaledDotProductAttentionQkvPacked and their
// gradient ops (core/ops/attention_ops.cc), f32 and f64: the algorithm of the CPU kernels
// (kernels/cpu/attention_kernels.cc) with the same tiling and online-softmax arithmetic
// (kernels/attention.h). A simple design, correctness first:
//   - forward: one block per (slice, query tile), one thread per query row. The key and
//     value rows of each key tile are staged in shared memory; each thread makes two
//     passes over a tile (the tile's maximum, then p = exp(s - m) accumulated into its
//     output row, rescaled by exp(m_old - m_new) first), and writes lse. Key tiles past
//     the causal diagonal are not visited.
//   - backward: D_i = rowsum(dO * O) - dlse_i into a scratch buffer; then one kernel for
//     dQ (one thread per query row walking the key tiles, K and V staged) and one for dK
//     and dV (one thread per key row walking the query tiles that see it, Q, dO, lse and D
//     staged). Every gradient row is summed by one thread in a fixed order: no atomics,
//     deterministic results.
// Rows of a tile: block_size (at most 256 threads); the staged tile holds at most as many
// rows as fit in 48 KiB of shared memory. The accumulators live in the output rows in
// global memory (one thread per row, so no races). q, k, v and their gradients are
// addressed by attention_qkv_row (the packed ops read them in place from qkv and write
// them in place into dqkv), out, lse and their gradients by attention_row.
#include <algorithm>
#include <cstdint>
#include <limits>

#include "core/kernel_registry.h"
#include "kernels/attention.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/launch.h"

namespace spire::cuda {
namespace {

using kernels::AttentionDims;

constexpr int64_t kMaxRowThreads = 256;
constexpr size_t kSharedBytes = 48 * 1024;

__device__ inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

template <typename T>
__device__ inline T dot(const T* a, const T* b, int64_t n) {
  T acc = 0;
  for (int64_t x = 0; x < n; ++x) acc += a[x] * b[x];
  return acc;
}

// Copies rows [r0, r0 + n) of `width` elements, `stride` apart in src, into shared memory
// (packed, width apart).
template <typename T>
__device__ inline void stage(T* dst, const T* src, int64_t r0, int64_t n, int64_t width,
                             int64_t stride) {
  if (stride == width) {
    for (int64_t x = threadIdx.x; x < n * width; x += blockDim.x) dst[x] = src[r0 * width + x];
    return;
  }
  for (int64_t x = threadIdx.x; x < n * width; x += blockDim.x) {
    const int64_t r = x / width;
    dst[x] = src[(r0 + r) * stride + (x - r * width)];
  }
}

template <typename T>
__global__ void forward_kernel(const T* __restrict__ q, const T* __restrict__ k,
                               const T* __restrict__ v, T* __restrict__ out, T* __restrict__ lse,
                               AttentionDims a, int64_t rows, int64_t tile_rows, int64_t nqt) {
  extern __shared__ unsigned char smem_raw[];
  T* ks = reinterpret_cast<T*>(smem_raw);  // [tile_rows, d]
  T* vs = ks + tile_rows * a.d;            // [tile_rows, dv]
  const int64_t bh = blockIdx.x / nqt, i0 = (blockIdx.x % nqt) * rows;
  const int64_t i1 = min64(i0 + rows, a.tq), i = i0 + threadIdx.x;
  const bool active = i < i1;
  const T scale = static_cast<T>(a.scale);
  const T* qi = q + kernels::attention_qkv_row(a, bh, i, a.tq, a.d);
  T* oi = out + kernels::attention_row(a, bh, i, a.tq, a.dv);
  T m = -std::numeric_limits<T>::infinity(), l = 0;
  if (active)
    for (int64_t x = 0; x < a.dv; ++x) oi[x] = 0;
  const T* kb = k + kernels::attention_qkv_row(a, bh, 0, a.tk, a.d);
  const T* vb = v + kernels::attention_qkv_row(a, bh, 0, a.tk, a.dv);
  const int64_t ldk = kernels::attention_qkv_stride(a, a.d);
  const int64_t ldv = kernels::attention_qkv_stride(a, a.dv);
  const int64_t key_end = kernels::attention_key_end(i1, a.tk, a.causal);
  for (int64_t j0 = 0; j0 < key_end; j0 += tile_rows) {
    const int64_t bk = min64(j0 + tile_rows, key_end) - j0;
    __syncthreads();
    stage(ks, kb, j0, bk, a.d, ldk);
    stage(vs, vb, j0, bk, a.dv, ldv);
    __syncthreads();
    if (!active) continue;
    const int64_t n = kernels::attention_visible_keys(i, j0, bk, a.causal);
    T mx = -std::numeric_limits<T>::infinity();
    for (int64_t c = 0; c < n; ++c) {
      const T s = scale * dot(qi, ks + c * a.d, a.d);
      mx = s > mx ? s : mx;
    }
    const kernels::OnlineMax<T> om = kernels::attention_online_max(m, mx);
    m = om.m;
    if (om.alpha != T(1))
      for (int64_t x = 0; x < a.dv; ++x) oi[x] *= om.alpha;
    T sum = 0;
    for (int64_t c = 0; c < n; ++c) {
      const T p = exp(scale * dot(qi, ks + c * a.d, a.d) - m);
      sum += p;
      for (int64_t x = 0; x < a.dv; ++x) oi[x] += p * vs[c * a.dv + x];
    }
    l = l * om.alpha + sum;
  }
  if (!active) return;
  const T inv = kernels::attention_inv_sum(l);
  for (int64_t x = 0; x < a.dv; ++x) oi[x] *= inv;
  lse[kernels::attention_row(a, bh, i, a.tq, 1)] = kernels::attention_lse(m, l);
}

// delta[r] = rowsum(dO * O)[r] - dlse[r] over the batch * tq rows, in the rows' order in
// memory (the order of lse, in either layout).
template <typename T>
__global__ void delta_kernel(const T* __restrict__ o, const T* __restrict__ d_o,
                             const T* __restrict__ dlse, T* __restrict__ delta, int64_t n,
                             int64_t dv) {
  SPIRE_GRID_STRIDE_LOOP(r, n) { delta[r] = dot(o + r * dv, d_o + r * dv, dv) - dlse[r]; }
}

// dQ: one thread per query row over the key tiles it sees.
template <typename T>
__global__ void dq_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                          const T* __restrict__ lse, const T* __restrict__ d_o,
                          const T* __restrict__ delta, T* __restrict__ dq, AttentionDims a,
                          int64_t rows, int64_t tile_rows, int64_t nqt) {
  extern __shared__ unsigned char smem_raw[];
  T* ks = reinterpret_cast<T*>(smem_raw);
  T* vs = ks + tile_rows * a.d;
  const int64_t bh = blockIdx.x / nqt, i0 = (blockIdx.x % nqt) * rows;
  const int64_t i1 = min64(i0 + rows, a.tq), i = i0 + threadIdx.x;
  const bool active = i < i1;
  const T scale = static_cast<T>(a.scale);
  const T* qi = q + kernels::attention_qkv_row(a, bh, i, a.tq, a.d);
  const T* doi = d_o + kernels::attention_row(a, bh, i, a.tq, a.dv);
  T* gi = dq + kernels::attention_qkv_row(a, bh, i, a.tq, a.d);
  T lse_i = 0, delta_i = 0;
  if (active) {
    lse_i = lse[kernels::attention_row(a, bh, i, a.tq, 1)];
    delta_i = delta[kernels::attention_row(a, bh, i, a.tq, 1)];
    for (int64_t x = 0; x < a.d; ++x) gi[x] = 0;
  }
  const T* kb = k + kernels::attention_qkv_row(a, bh, 0, a.tk, a.d);
  const T* vb = v + kernels::attention_qkv_row(a, bh, 0, a.tk, a.dv);
  const int64_t ldk = kernels::attention_qkv_stride(a, a.d);
  const int64_t ldv = kernels::attention_qkv_stride(a, a.dv);
  const int64_t key_end = kernels::attention_key_end(i1, a.tk, a.causal);
  for (int64_t j0 = 0; j0 < key_end; j0 += tile_rows) {
    const int64_t bk = min64(j0 + tile_rows, key_end) - j0;
    __syncthreads();
    stage(ks, kb, j0, bk, a.d, ldk);
    stage(vs, vb, j0, bk, a.dv, ldv);
    __syncthreads();
    if (!active) continue;
    const int64_t n = kernels::attention_visible_keys(i, j0, bk, a.causal);
    for (int64_t c = 0; c < n; ++c) {
      const T* kc = ks + c * a.d;
      const T p = kernels::attention_prob(scale * dot(qi, kc, a.d), lse_i, true);
      const T ds = p * (dot(doi, vs + c * a.dv, a.dv) - delta_i);
      for (int64_t x = 0; x < a.d; ++x) gi[x] += scale * ds * kc[x];
    }
  }
}

// dK and dV: one thread per key row over the query tiles that see it.
template <typename T>
__global__ void dkv_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                           const T* __restrict__ lse, const T* __restrict__ d_o,
                           const T* __restrict__ delta, T* __restrict__ dk, T* __restrict__ dv,
                           AttentionDims a, int64_t rows, int64_t tile_rows, int64_t nkt) {
  extern __shared__ unsigned char smem_raw[];
  T* qs = reinterpret_cast<T*>(smem_raw);  // [tile_rows, d]
  T* dos = qs + tile_rows * a.d;           // [tile_rows, dv]
  T* ls = dos + tile_rows * a.dv;          // [tile_rows]
  T* ds_ = ls + tile_rows;                 // [tile_rows]
  const int64_t bh = blockIdx.x / nkt, j0 = (blockIdx.x % nkt) * rows;
  const int64_t j1 = min64(j0 + rows, a.tk), j = j0 + threadIdx.x;
  const bool active = j < j1;
  const T scale = static_cast<T>(a.scale);
  const T* kj = k + kernels::attention_qkv_row(a, bh, j, a.tk, a.d);
  const T* vj = v + kernels::attention_qkv_row(a, bh, j, a.tk, a.dv);
  T* gk = dk + kernels::attention_qkv_row(a, bh, j, a.tk, a.d);
  T* gv = dv + kernels::attention_qkv_row(a, bh, j, a.tk, a.dv);
  if (active) {
    for (int64_t x = 0; x < a.d; ++x) gk[x] = 0;
    for (int64_t x = 0; x < a.dv; ++x) gv[x] = 0;
  }
  const T* qb = q + kernels::attention_qkv_row(a, bh, 0, a.tq, a.d);
  const T* dob = d_o + kernels::attention_row(a, bh, 0, a.tq, a.dv);
  const T* lb = lse + kernels::attention_row(a, bh, 0, a.tq, 1);
  const T* db = delta + kernels::attention_row(a, bh, 0, a.tq, 1);
  const int64_t ldq = kernels::attention_qkv_stride(a, a.d);
  const int64_t ldo = kernels::attention_row_stride(a, a.dv);
  const int64_t ldl = kernels::attention_row_stride(a, 1);
  for (int64_t i0 = kernels::attention_query_begin(j0, a.causal); i0 < a.tq; i0 += tile_rows) {
    const int64_t bq = min64(i0 + tile_rows, a.tq) - i0;
    __syncthreads();
    stage(qs, qb, i0, bq, a.d, ldq);
    stage(dos, dob, i0, bq, a.dv, ldo);
    stage(ls, lb, i0, bq, 1, ldl);
    stage(ds_, db, i0, bq, 1, ldl);
    __syncthreads();
    if (!active) continue;
    for (int64_t r = 0; r < bq; ++r) {
      if (!kernels::attention_visible(i0 + r, j, a.causal)) continue;
      const T* qr = qs + r * a.d;
      const T* dor = dos + r * a.dv;
      const T p = kernels::attention_prob(scale * dot(qr, kj, a.d), ls[r], true);
      for (int64_t x = 0; x < a.dv; ++x) gv[x] += p * dor[x];
      const T dsv = p * (dot(dor, vj, a.dv) - ds_[r]);
      for (int64_t x = 0; x < a.d; ++x) gk[x] += scale * dsv * qr[x];
    }
  }
}

// Threads (rows) per block, and rows of a staged tile of `width` elements per row.
struct Launch {
  int64_t rows, tile_rows;
  size_t smem;
};
template <typename T>
Launch plan(KernelContext& ctx, const AttentionDims& a, int64_t width) {
  Launch l;
  l.rows = std::min(a.block, kMaxRowThreads);
  const int64_t fit = static_cast<int64_t>(kSharedBytes / (sizeof(T) * std::max<int64_t>(width, 1)));
  if (fit < 1)
    ctx.fail("D = ", a.d, " and Dv = ", a.dv, " are too large for the CUDA attention kernel (",
             "one row of a tile must fit in ", kSharedBytes, " bytes of shared memory)");
  l.tile_rows = std::min(a.block, fit);
  l.smem = static_cast<size_t>(l.tile_rows * width) * sizeof(T);
  return l;
}

// kPacked: the QkvPacked op (input qkv; k and v start H * D and 2 * H * D after q).
template <typename T, bool kPacked>
void forward(KernelContext& ctx) {
  const AttentionDims a = kPacked ? kernels::attention_packed_dims(ctx) : kernels::attention_dims(ctx);
  const Tensor& q = ctx.input(0);
  const Shape out_shape = kPacked ? kernels::attention_packed_out_shape(q.shape())
                                  : kernels::attention_out_shape(q.shape(), a.dv);
  Tensor& out = ctx.allocate_output(0, out_shape);
  Tensor& lse = ctx.allocate_output(1, kernels::attention_lse_shape(out_shape));
  if (lse.num_elements() == 0) return;
  const Launch l = plan<T>(ctx, a, a.d + a.dv);
  const int64_t nqt = kernels::attention_num_tiles(a.tq, l.rows);
  auto& cc = context(ctx);
  const kernels::AttentionQkv<T, kPacked> in(ctx, a);
  forward_kernel<T><<<static_cast<unsigned>(a.batch * nqt), static_cast<unsigned>(l.rows), l.smem,
                      cc.stream()>>>(in.q, in.k, in.v, out.data<T>(), lse.data<T>(), a, l.rows,
                                     l.tile_rows, nqt);
  SPIRE_CUDA_LAUNCH_CHECK();
}

template <typename T, bool kPacked>
void backward(KernelContext& ctx) {
  const AttentionDims a = kPacked ? kernels::attention_packed_dims(ctx) : kernels::attention_dims(ctx);
  const kernels::AttentionGradBuffers<T, kPacked> buf(ctx, a);
  if (buf.empty) return;
  const T *q = buf.q, *k = buf.k, *v = buf.v, *lse = buf.lse, *d_o = buf.dout;
  T *dq = buf.dq, *dk = buf.dk, *dv = buf.dv;
  auto& cc = context(ctx);
  const int64_t nrows = a.batch * a.tq;
  Scratch delta(cc, sizeof(T) * static_cast<size_t>(std::max<int64_t>(nrows, 1)));
  if (nrows > 0) {
    delta_kernel<T><<<blocks_for(cc, nrows), kThreads, 0, cc.stream()>>>(
        buf.out, d_o, buf.dlse, delta.as<T>(), nrows, a.dv);
    SPIRE_CUDA_LAUNCH_CHECK();
    const Launch l = plan<T>(ctx, a, a.d + a.dv);
    const int64_t nqt = kernels::attention_num_tiles(a.tq, l.rows);
    dq_kernel<T><<<static_cast<unsigned>(a.batch * nqt), static_cast<unsigned>(l.rows), l.smem,
                   cc.stream()>>>(q, k, v, lse, d_o, delta.as<T>(), dq, a, l.rows,
                                  l.tile_rows, nqt);
    SPIRE_CUDA_LAUNCH_CHECK();
  }
  const int64_t nkeys = a.batch * a.tk;
  if (nkeys > 0) {
    const Launch l = plan<T>(ctx, a, a.d + a.dv + 2);
    const int64_t nkt = kernels::attention_num_tiles(a.tk, l.rows);
    dkv_kernel<T><<<static_cast<unsigned>(a.batch * nkt), static_cast<unsigned>(l.rows), l.smem,
                    cc.stream()>>>(q, k, v, lse, d_o, delta.as<T>(), dk, dv, a,
                                   l.rows, l.tile_rows, nkt);
    SPIRE_CUDA_LAUNCH_CHECK();
  }
}

}  // namespace

SPIRE_STATIC_INIT(cuda_attention_kernels) {
  auto& reg = KernelRegistry::global();
  reg.add("ScaledDotProductAttention", DeviceType::CUDA, DType::F32, forward<float, false>);
  reg.add("ScaledDotProductAttention", DeviceType::CUDA, DType::F64, forward<double, false>);
  reg.add("ScaledDotProductAttentionGrad", DeviceType::CUDA, DType::F32, backward<float, false>);
  reg.add("ScaledDotProductAttentionGrad", DeviceType::CUDA, DType::F64, backward<double, false>);
  reg.add("ScaledDotProductAttentionQkvPacked", DeviceType::CUDA, DType::F32, forward<float, true>);
  reg.add("ScaledDotProductAttentionQkvPacked", DeviceType::CUDA, DType::F64, forward<double, true>);
  reg.add("ScaledDotProductAttentionQkvPackedGrad", DeviceType::CUDA, DType::F32,
          backward<float, true>);
  reg.add("ScaledDotProductAttentionQkvPackedGrad", DeviceType::CUDA, DType::F64,
          backward<double, true>);
}

}  // namespace spire::cuda
