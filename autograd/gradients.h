// Reverse-mode automatic differentiation on the graph: gradients(ys, xs)
// adds the backward pass as ordinary nodes (so it can itself be
// differentiated for second-order gradients), using each op's registered
// gradient function.
#pragma once

#include <vector>

#include "core/graph.h"

namespace spire {

/// Symbolic gradients of sum(ys) (weighted by grad_ys when given, else
/// ones) with respect to each of xs. Gradients of outputs with several
/// consumers are summed; broadcasting is undone by the op gradients;
/// StopGradient and ops marked no_gradient block the flow. An x that ys do
/// not depend on gets an invalid Output ("no gradient"). Throws
/// spire::Error naming the node when a gradient must pass through an op
/// that has no gradient function.
std::vector<Output> gradients(const std::vector<Output>& ys, const std::vector<Output>& xs,
                              const std::vector<Output>& grad_ys = {});

/// Convenience for one y and one x.
inline Output gradient(const Output& y, const Output& x) { return gradients({y}, {x})[0]; }

}  // namespace spire
