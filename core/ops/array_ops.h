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
/// Removes the given size-1 dimensions (all size-1 dims when empty).
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

}  // namespace spire::ops
