// Graph-building functions for sources, state and control: placeholder,
// constant, variable, assign/assign_add/assign_sub, identity,
// stop_gradient, zeros_like/ones_like, no_op and group. Each builds a node
// of the op registered in state_ops.cc, in the graph of its inputs (or the
// default graph for source ops).
#pragma once

#include <string>
#include <vector>

#include "core/graph.h"
#include "core/tensor.h"

namespace spire::ops {

/// A value fed at run time. Dimensions may be -1 (unknown).
Output placeholder(DType dtype, const Shape& shape, const std::string& name = "",
                   Graph* g = nullptr);
/// A constant tensor (copied into the graph).
Output constant(const Tensor& value, const std::string& name = "", Graph* g = nullptr);
/// A scalar constant of `dtype`.
Output scalar(double value, DType dtype, Graph* g = nullptr);
/// A scalar constant with the dtype and graph of `like`.
Output scalar_like(double value, const Output& like);
/// A mutable tensor whose value lives in the Session (uninitialized until assigned).
Output variable(const Shape& shape, DType dtype, const std::string& name = "", Graph* g = nullptr);
/// Sets `var` (the output of a Variable node) to `value`; returns the new value.
Output assign(const Output& var, const Output& value, const std::string& name = "");
Output assign_add(const Output& var, const Output& delta, const std::string& name = "");
Output assign_sub(const Output& var, const Output& delta, const std::string& name = "");
Output identity(const Output& x, const std::string& name = "");
/// Identity in the forward pass; blocks gradients.
Output stop_gradient(const Output& x, const std::string& name = "");
Output zeros_like(const Output& x, const std::string& name = "");
Output ones_like(const Output& x, const std::string& name = "");
/// An op that does nothing (useful with control inputs).
Node* no_op(const std::string& name = "", Graph* g = nullptr);
/// A no_op depending on all `deps` (running it runs them).
Node* group(const std::vector<Node*>& deps, const std::string& name = "group", Graph* g = nullptr);

}  // namespace spire::ops
