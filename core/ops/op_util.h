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
/// sum_to_like for the gradient `g` of a binary op that broadcast x against `other`: also `g`
/// itself when the static shapes prove that x already has the broadcast shape (every dim
/// that `other` covers is known equal in both, or 1 in `other`). Then x's value is not read
/// for its shape, so it may die early and a product that computes it may fuse its epilogue.
Output sum_to_like(const Output& g, const Output& x, const Output& other);
/// Broadcasts `x` to the run-time shape of `like` (gradient of sum_to_like).
Output broadcast_like(const Output& x, const Output& like);

/// Adds the attrs of a fused elementwise program (core/ops/fused_ops.cc: "ops",
/// "operands", "nodes", the instructions' own attrs) to an op made by the fusion pass.
OpDefBuilder& fused_program_attrs(OpDefBuilder& b);
/// Checks the program attrs of a fused op's node (one name per op, at least one op).
void check_fused_program(InferContext& c);
/// Shape function tail of an op with an epilogue: output 0 (set by the product's shape
/// function) broadcast with inputs [first, num_inputs), which have its dtype.
void epilogue_shape(InferContext& c, int first);

}  // namespace spire::ops
