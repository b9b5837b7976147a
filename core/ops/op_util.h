// Helpers shared by the op definition files in core/ops: common shape
// functions and the gradient helpers that undo broadcasting. Internal to
// the library (not installed as public API of its own).
#pragma once

#include <string>
#include <vector>

#include "core/graph.h"
#include "core/op_registry.h"

namespace spire::ops {

/// Adds a node to the graph of `inputs[0]` (which must exist).
Node* add_op(const std::string& op, const std::vector<Output>& inputs, const AttrMap& attrs = {},
             const std::string& name = "");

/// Shape function: one output equal to input 0 (same dtype and shape).
void same_as_input0(InferContext& c);
/// Shape function for NumPy-broadcasting binary ops with equal dtypes;
/// `out_dtype` Invalid means "the inputs' dtype".
void broadcast_binary_shape(InferContext& c, DType out_dtype = DType::Invalid);
/// Fails unless input i is a floating dtype.
void expect_float(const InferContext& c, int i);

/// Reduces a gradient `g` (broadcast result) back to the run-time shape of
/// `x` by summing over broadcast dimensions. Returns `g` unchanged when the
/// static shapes are equal and fully defined.
Output sum_to_like(const Output& g, const Output& x);
/// Broadcasts `x` to the run-time shape of `like` (gradient of sum_to_like).
Output broadcast_like(const Output& x, const Output& like);

}  // namespace spire::ops
