// Graph-building functions for shape and indexing ops: reshape, transpose,
// expand_dims, squeeze, concat, split, slice, pad, gather, one_hot, tile,
// broadcast_to. Registered in array_ops.cc.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/graph.h"

namespace spire::ops {

/// Same elements in a new shape; at most one dimension may be -1 (inferred).
Output reshape(const Output& x, const Shape& shape, const std::string& name = "");
/// Permutes dimensions: out.shape[i] = x.shape[perm[i]]. Empty perm reverses.
Output transpose(const Output& x, const std::vector<int64_t>& perm = {},
                 const std::string& name = "");
/// Inserts a size-1 dimension at `axis` (negative counts from rank+1).
Output expand_dims(const Output& x, int64_t axis, const std::string& name = "");
/// Removes the given size-1 dimensions (all size-1 dims when empty). With
/// no axes, only dims statically known to be 1 are removed (unknown dims are
/// kept, so the output rank is known when the graph is built).
Output squeeze(const Output& x, const std::vector<int64_t>& axes = {},
               const std::string& name = "");
/// Joins tensors along `axis`.
Output concat(const std::vector<Output>& xs, int64_t axis, const std::string& name = "");
/// Splits into `num` equal parts along `axis`.
std::vector<Output> split(const Output& x, int64_t num, int64_t axis,
                          const std::string& name = "");
/// Splits into parts of the given sizes along `axis` (one size may be -1).
std::vector<Output> split(const Output& x, const std::vector<int64_t>& sizes, int64_t axis,
                          const std::string& name = "");
/// x[begin[i] : begin[i] + size[i]] per dimension; size -1 means "to the end".
Output slice(const Output& x, const std::vector<int64_t>& begin,
             const std::vector<int64_t>& size, const std::string& name = "");
/// Pads with `value`: paddings[i] = {before, after} for dimension i.
Output pad(const Output& x, const std::vector<std::pair<int64_t, int64_t>>& paddings,
           double value = 0.0, const std::string& name = "");
/// Gathers slices of `params` along `axis` at integer `indices` (i32/i64);
/// out shape = params.shape[:axis] + indices.shape + params.shape[axis+1:].
Output gather(const Output& params, const Output& indices, int64_t axis = 0,
              const std::string& name = "");
/// One-hot encoding of integer indices along a new last axis of size `depth`;
/// out-of-range indices give all `off_value`.
Output one_hot(const Output& indices, int64_t depth, double on_value = 1.0,
               double off_value = 0.0, DType dtype = DType::F32, const std::string& name = "");
/// Repeats x multiples[i] times along dimension i.
Output tile(const Output& x, const std::vector<int64_t>& multiples, const std::string& name = "");
/// Broadcasts x to `shape` (NumPy rules).
Output broadcast_to(const Output& x, const Shape& shape, const std::string& name = "");

// ---- helper ops used by the gradients above (they take a `like` input so
// they work with shapes known only at run time) ----

/// x with the run-time shape of `like` (same element count); returns x when
/// both static shapes are equal and fully defined.
Output reshape_like(const Output& x, const Output& like, const std::string& name = "");
/// Splits x along `axis` into parts as long as each of `likes` along it (gradient of concat).
std::vector<Output> split_like(const Output& x, const std::vector<Output>& likes, int64_t axis,
                               const std::string& name = "");
/// Zeros shaped like `like` with `grad` placed at `begin` (gradient of slice).
Output slice_grad(const Output& grad, const Output& like, const std::vector<int64_t>& begin,
                  const std::vector<int64_t>& size, const std::string& name = "");
/// The interior of `grad` without the paddings {before_0, after_0, ...} (gradient of pad).
Output pad_grad(const Output& grad, const Output& like, const std::vector<int64_t>& paddings,
                const std::string& name = "");
/// Scatter-add of `grad` into zeros shaped like `params_like` at `indices` along
/// `axis` (gradient of gather w.r.t. params).
Output gather_grad(const Output& grad, const Output& indices, const Output& params_like,
                   int64_t axis, const std::string& name = "");
/// Sums the tiled copies in `grad` back to the shape of `like` (gradient of tile).
Output tile_grad(const Output& grad, const Output& like, const std::vector<int64_t>& multiples,
                 const std::string& name = "");

}  // namespace spire::ops
