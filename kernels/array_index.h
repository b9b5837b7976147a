// Index math of the CUDA shape and indexing kernels (kernels/cuda/array_kernels.cu):
// small by-value maps, planned on the host from shapes and attrs, and the
// per-element functions a grid-stride kernel calls for output (or input)
// element i. Everything here is plain C++ with SPIRE_HD (no CUDA includes),
// so tests/kernels/array_index_test.cc runs the very same functions on the
// host over every element and compares with the CPU kernels.
//
// The maps:
//   BoxMap      a box (a sub-block) inside a bigger row-major tensor: Slice,
//               Split, SplitLike, PadGrad read the box out of the big tensor,
//               Concat writes each input as a box of the output, Pad and
//               SliceGrad fill the big tensor from the box (value outside).
//   TileMap     Tile (out[i] = in[i mod in dims]) and TileGrad (sum of the copies).
//   StridedMap  the generic Transpose gather (per-output-dim input strides).
//   Tiled2D     the batched 2-D transpose through a shared-memory tile.
//   GatherDims  Gather / GatherGrad as [outer, n, inner] and [outer, ni, inner].
// Host planners (make_*) merge adjacent dims where possible, so the rank the
// GPU loops over is small; they return false when it stays above kMaxArrayRank.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/functors.h"  // SPIRE_HD

namespace spire::kernels {

/// Largest rank (after merging dims) the CUDA array kernels handle.
constexpr int kMaxArrayRank = 8;

// ---- boxes: slice, split, concat, pad and their gradients --------------------------

/// A box of dims `box` at `begin` inside a row-major tensor of dims `big`.
struct BoxMap {
  int rank = 0;
  int64_t big[kMaxArrayRank] = {};
  int64_t begin[kMaxArrayRank] = {};
  int64_t box[kMaxArrayRank] = {};
};

/// Offset in the big tensor of element i (row-major) of the box.
SPIRE_HD inline int64_t box_to_big(const BoxMap& m, int64_t i) {
  int64_t off = 0, stride = 1;
  for (int d = m.rank - 1; d >= 0; --d) {
    const int64_t c = i % m.box[d];
    i /= m.box[d];
    off += (c + m.begin[d]) * stride;
    stride *= m.big[d];
  }
  return off;
}

/// Offset in the box of element i (row-major) of the big tensor, or -1 when
/// that element lies outside the box.
SPIRE_HD inline int64_t big_to_box(const BoxMap& m, int64_t i) {
  int64_t off = 0, stride = 1;
  for (int d = m.rank - 1; d >= 0; --d) {
    const int64_t s = i % m.big[d] - m.begin[d];
    i /= m.big[d];
    if (s < 0 || s >= m.box[d]) return -1;
    off += s * stride;
    stride *= m.box[d];
  }
  return off;
}

/// Slice-style gather: out is the box, in is the big tensor (Slice, Split,
/// SplitLike, PadGrad). i walks out.
template <typename E>
SPIRE_HD inline void box_gather_element(const BoxMap& m, const E* in, E* out, int64_t i) {
  out[i] = in[box_to_big(m, i)];
}

/// Concat-style scatter: in is the box, out the big tensor. i walks in.
template <typename E>
SPIRE_HD inline void box_scatter_element(const BoxMap& m, const E* in, E* out, int64_t i) {
  out[box_to_big(m, i)] = in[i];
}

/// Pad-style fill: out is the big tensor, in the box, `fill` outside it
/// (Pad with its value, SliceGrad with zero). i walks out.
template <typename E>
SPIRE_HD inline void box_pad_element(const BoxMap& m, const E* in, E fill, E* out, int64_t i) {
  const int64_t s = big_to_box(m, i);
  out[i] = s >= 0 ? in[s] : fill;
}

/// Builds a BoxMap, merging each dim into the one before it when the box
/// takes it whole (box == big, so begin == 0): the pair is then one
/// contiguous dim. Returns false when the merged rank exceeds kMaxArrayRank.
inline bool make_box_map(const std::vector<int64_t>& big, const std::vector<int64_t>& begin,
                         const std::vector<int64_t>& box, BoxMap* m) {
  std::vector<int64_t> g, b, x;
  for (size_t d = 0; d < big.size(); ++d) {
    if (!g.empty() && box[d] == big[d]) {
      g.back() *= big[d];
      b.back() *= big[d];
      x.back() *= big[d];
    } else {
      g.push_back(big[d]);
      b.push_back(begin[d]);
      x.push_back(box[d]);
    }
  }
  if (g.size() > static_cast<size_t>(kMaxArrayRank)) return false;
  *m = BoxMap{};
  m->rank = static_cast<int>(g.size());
  for (size_t d = 0; d < g.size(); ++d) m->big[d] = g[d], m->begin[d] = b[d], m->box[d] = x[d];
  return true;
}

/// The BoxMap of a part of length `part` at `offset` along `axis` of a tensor
/// of dims `dims` (Concat inputs, Split outputs): viewed as [outer, dim, inner].
inline BoxMap make_axis_box_map(const std::vector<int64_t>& dims, int axis, int64_t offset,
                                int64_t part) {
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= dims[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(axis) + 1; d < dims.size(); ++d) inner *= dims[d];
  BoxMap m;
  const bool ok = make_box_map({outer, dims[static_cast<size_t>(axis)], inner}, {0, offset, 0},
                               {outer, part, inner}, &m);
  (void)ok;  // rank 3 always fits
  return m;
}

// ---- tile ------------------------------------------------------------------------

/// Tile of an input of dims `in` by `mult` (out dims = in * mult).
struct TileMap {
  int rank = 0;
  int64_t in[kMaxArrayRank] = {};
  int64_t mult[kMaxArrayRank] = {};
};

/// Input offset of element i (row-major) of the tiled output.
SPIRE_HD inline int64_t tile_src_offset(const TileMap& m, int64_t i) {
  int64_t off = 0, stride = 1;
  for (int d = m.rank - 1; d >= 0; --d) {
    const int64_t od = m.in[d] * m.mult[d];
    const int64_t c = i % od;
    i /= od;
    off += (c % m.in[d]) * stride;
    stride *= m.in[d];
  }
  return off;
}

/// Offset in the tiled tensor of input element i in the copy at tile 0.
SPIRE_HD inline int64_t tile_first_copy(const TileMap& m, int64_t i) {
  int64_t off = 0, stride = 1;
  for (int d = m.rank - 1; d >= 0; --d) {
    const int64_t c = i % m.in[d];
    i /= m.in[d];
    off += c * stride;
    stride *= m.in[d] * m.mult[d];
  }
  return off;
}

/// Offset in the tiled tensor of the start of copy t (row-major over mult).
SPIRE_HD inline int64_t tile_copy_offset(const TileMap& m, int64_t t) {
  int64_t off = 0, stride = 1;
  for (int d = m.rank - 1; d >= 0; --d) {
    const int64_t c = t % m.mult[d];
    t /= m.mult[d];
    off += c * m.in[d] * stride;
    stride *= m.in[d] * m.mult[d];
  }
  return off;
}

/// Tile: out[i] = in[...]. i walks out.
template <typename E>
SPIRE_HD inline void tile_element(const TileMap& m, const E* in, E* out, int64_t i) {
  out[i] = in[tile_src_offset(m, i)];
}

/// TileGrad as a gather: out[i] is the sum of the `copies` copies of input
/// element i in g, in copy order (the CPU kernel's order). i walks out.
template <typename T>
SPIRE_HD inline void tile_grad_sum_element(const TileMap& m, int64_t copies, const T* g, T* out,
                                           int64_t i) {
  const int64_t base = tile_first_copy(m, i);
  T acc = T(0);
  for (int64_t t = 0; t < copies; ++t) acc += g[base + tile_copy_offset(m, t)];
  out[i] = acc;
}

/// TileGrad as a scatter-add (for few outputs and many copies): i walks g;
/// add(p, v) adds v to *p (atomically on the GPU).
template <typename T, typename AddFn>
SPIRE_HD inline void tile_grad_scatter_element(const TileMap& m, const T* g, T* out, int64_t i,
                                               AddFn add) {
  add(out + tile_src_offset(m, i), g[i]);
}

/// Builds a TileMap, merging each dim with multiple 1 into the dim before
/// it. Returns false when the merged rank exceeds kMaxArrayRank.
inline bool make_tile_map(const std::vector<int64_t>& in, const std::vector<int64_t>& mult,
                          TileMap* m) {
  std::vector<int64_t> x, k;
  for (size_t d = 0; d < in.size(); ++d) {
    if (!x.empty() && mult[d] == 1) {
      x.back() *= in[d];
    } else {
      x.push_back(in[d]);
      k.push_back(mult[d]);
    }
  }
  if (x.size() > static_cast<size_t>(kMaxArrayRank)) return false;
  *m = TileMap{};
  m->rank = static_cast<int>(x.size());
  for (size_t d = 0; d < x.size(); ++d) m->in[d] = x[d], m->mult[d] = k[d];
  return true;
}

// ---- transpose -------------------------------------------------------------------

/// out[i] = in[offset]: out dims `dims` (row-major), input stride per out dim.
struct StridedMap {
  int rank = 0;
  int64_t dims[kMaxArrayRank] = {};
  int64_t strides[kMaxArrayRank] = {};
};

SPIRE_HD inline int64_t strided_offset(const StridedMap& m, int64_t i) {
  int64_t off = 0;
  for (int d = m.rank - 1; d >= 0; --d) {
    off += (i % m.dims[d]) * m.strides[d];
    i /= m.dims[d];
  }
  return off;
}

/// Generic transpose gather. i walks out.
template <typename E>
SPIRE_HD inline void strided_gather_element(const StridedMap& m, const E* in, E* out, int64_t i) {
  out[i] = in[strided_offset(m, i)];
}

/// Side of the square shared-memory tile of the 2-D transpose, and the rows
/// of threads per block (a block is kTransposeTile x kTransposeBlockRows
/// threads; each thread moves kTransposeTile / kTransposeBlockRows elements).
constexpr int kTransposeTile = 32;
constexpr int kTransposeBlockRows = 8;

/// A batched 2-D transpose: input [batch, rows, cols] -> output [batch, cols, rows],
/// cut into tiles of kTransposeTile x kTransposeTile (tiles_r x tiles_c per batch).
struct Tiled2D {
  int64_t batch = 0, rows = 0, cols = 0, tiles_r = 0, tiles_c = 0;
};

/// Tiles in all batches (the kernel's blocks loop over these).
SPIRE_HD inline int64_t tiled_count(const Tiled2D& p) { return p.batch * p.tiles_r * p.tiles_c; }

/// Input offset that tile t's element (row k, col x) loads into tile[k][x],
/// or -1 outside the matrix. Consecutive x read consecutive addresses.
SPIRE_HD inline int64_t tiled_load_offset(const Tiled2D& p, int64_t t, int k, int x) {
  const int64_t tc = t % p.tiles_c, rest = t / p.tiles_c;
  const int64_t tr = rest % p.tiles_r, b = rest / p.tiles_r;
  const int64_t r = tr * kTransposeTile + k, c = tc * kTransposeTile + x;
  if (r >= p.rows || c >= p.cols) return -1;
  return (b * p.rows + r) * p.cols + c;
}

/// Output offset that receives tile[x][k] of tile t (output row = input col
/// k of the tile, output col = input row x), or -1 outside. Consecutive x
/// write consecutive addresses.
SPIRE_HD inline int64_t tiled_store_offset(const Tiled2D& p, int64_t t, int k, int x) {
  const int64_t tc = t % p.tiles_c, rest = t / p.tiles_c;
  const int64_t tr = rest % p.tiles_r, b = rest / p.tiles_r;
  const int64_t r = tr * kTransposeTile + x, c = tc * kTransposeTile + k;
  if (r >= p.rows || c >= p.cols) return -1;
  return (b * p.cols + c) * p.rows + r;
}

/// Below this many rows or columns the tiles would be mostly empty, so the
/// strided gather is used instead.
constexpr int64_t kTransposeMinTiledSide = 8;

/// How a transpose runs: a view (no data moves), a batched 2-D tiled
/// transpose, or the generic strided gather.
struct TransposePlan {
  enum class Kind { kView, kTiled, kGeneric } kind = Kind::kView;
  Tiled2D tiled;
  StridedMap gather;
};

/// Plans out = transpose(in, perm) for a non-empty input of dims `in`. Size-1
/// dims are dropped and input dims that stay adjacent and in order in the
/// output are merged; what remains is a view (<= 1 dim), a batched 2-D
/// transpose (2 dims, or 3 with the outermost kept first) when both matrix
/// sides are >= min_tiled_side, or else a strided gather. Returns false when
/// the gather's merged rank exceeds kMaxArrayRank.
inline bool plan_transpose(const std::vector<int64_t>& in, const std::vector<int64_t>& perm,
                           TransposePlan* plan, int64_t min_tiled_side = kTransposeMinTiledSide) {
  const size_t r = in.size();
  std::vector<int64_t> compact(r, -1);  // index among the dims of size > 1
  int64_t kept = 0;
  for (size_t i = 0; i < r; ++i)
    if (in[i] != 1) compact[i] = kept++;
  // Runs in output order: (first compact input dim, merged size).
  std::vector<std::pair<int64_t, int64_t>> runs;
  int64_t prev = -2;
  for (int64_t p : perm) {
    const int64_t c = compact[static_cast<size_t>(p)];
    if (c < 0) continue;
    if (!runs.empty() && c == prev + 1) runs.back().second *= in[static_cast<size_t>(p)];
    else runs.push_back({c, in[static_cast<size_t>(p)]});
    prev = c;
  }
  *plan = TransposePlan{};
  const size_t k = runs.size();
  if (k <= 1) return true;  // kView
  // Rank of each run among the runs in input order.
  std::vector<size_t> in_pos(k, 0);
  for (size_t a = 0; a < k; ++a)
    for (size_t b = 0; b < k; ++b)
      if (runs[b].first < runs[a].first) ++in_pos[a];
  // Merged input dims in input order, and their row-major strides.
  std::vector<int64_t> in_dims(k), in_strides(k);
  for (size_t a = 0; a < k; ++a) in_dims[in_pos[a]] = runs[a].second;
  int64_t acc = 1;
  for (size_t d = k; d-- > 0;) in_strides[d] = acc, acc *= in_dims[d];
  // Batched 2-D: out = [cols, rows] of in [rows, cols], or out = [batch, cols, rows]
  // of in [batch, rows, cols] (runs 1 and 2 are then swapped, or they would have merged).
  if (k == 2 || (k == 3 && in_pos[0] == 0)) {
    Tiled2D t;
    t.batch = k == 3 ? in_dims[0] : 1;
    t.rows = in_dims[k - 2];
    t.cols = in_dims[k - 1];
    if (t.rows >= min_tiled_side && t.cols >= min_tiled_side) {
      t.tiles_r = (t.rows + kTransposeTile - 1) / kTransposeTile;
      t.tiles_c = (t.cols + kTransposeTile - 1) / kTransposeTile;
      plan->kind = TransposePlan::Kind::kTiled;
      plan->tiled = t;
      return true;
    }
  }
  if (k > static_cast<size_t>(kMaxArrayRank)) return false;
  plan->kind = TransposePlan::Kind::kGeneric;
  plan->gather.rank = static_cast<int>(k);
  for (size_t a = 0; a < k; ++a) {
    plan->gather.dims[a] = runs[a].second;
    plan->gather.strides[a] = in_strides[in_pos[a]];
  }
  return true;
}

// ---- gather, scatter-add, one-hot ----------------------------------------------------

/// Gather along an axis: params viewed as [outer, n, inner], indices as ni
/// values, output as [outer, ni, inner].
struct GatherDims {
  int64_t outer = 0, n = 0, ni = 0, inner = 0;
};

/// Position in the indices of the index that output element i uses.
SPIRE_HD inline int64_t gather_index_pos(const GatherDims& g, int64_t i) {
  return (i / g.inner) % g.ni;
}

/// Params offset of output element i when its index is v, or -1 when v is
/// outside [0, n).
SPIRE_HD inline int64_t gather_src_offset(const GatherDims& g, int64_t i, int64_t v) {
  if (v < 0 || v >= g.n) return -1;
  const int64_t o = i / (g.inner * g.ni);
  return (o * g.n + v) * g.inner + i % g.inner;
}

/// Gather: out[i] = params[...]; zero for an out-of-range index (TensorFlow's
/// GPU behavior: a kernel cannot raise the CPU kernel's error). i walks out.
template <typename E, typename I>
SPIRE_HD inline void gather_element(const GatherDims& g, const E* params, const I* indices, E* out,
                                    int64_t i) {
  const int64_t src = gather_src_offset(g, i, static_cast<int64_t>(indices[gather_index_pos(g, i)]));
  out[i] = src >= 0 ? params[src] : E(0);
}

/// GatherGrad: adds grad[i] into out at the params position gather read it
/// from; out-of-range indices are skipped. i walks grad; add(p, v) adds v to
/// *p (atomically on the GPU).
template <typename T, typename I, typename AddFn>
SPIRE_HD inline void gather_grad_element(const GatherDims& g, const T* grad, const I* indices,
                                         T* out, int64_t i, AddFn add) {
  const int64_t dst = gather_src_offset(g, i, static_cast<int64_t>(indices[gather_index_pos(g, i)]));
  if (dst >= 0) add(out + dst, grad[i]);
}

/// OneHot: out viewed as [num indices, depth]; on where the column equals
/// the index, else off (so an out-of-range index gives a row of off, as on
/// the CPU). i walks out; depth > 0.
template <typename T, typename I>
SPIRE_HD inline void one_hot_element(int64_t depth, const I* indices, T on, T off, T* out,
                                     int64_t i) {
  out[i] = static_cast<int64_t>(indices[i / depth]) == i % depth ? on : off;
}

}  // namespace spire::kernels
