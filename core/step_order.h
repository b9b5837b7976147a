// The orders the executor (core/executor.h) runs a subgraph's nodes in:
//
// - topological_order: a depth-first search from the fetches and targets
//   (control inputs before data inputs, rendezvous members together), then
//   the devices' nodes interleaved so each lane runs its own work before work
//   that waits on another lane's later nodes.
// - group_independent_nodes: inter-op parallelism's pass
//   (SessionOptions::inter_op). It moves nodes that do not depend on each
//   other next to each other, as waves that a device may run at the same time
//   on its kernel threads (one thread per node instead of all threads for
//   each node in turn). Which nodes may join a wave is the caller's choice
//   (by op traits); this pass only keeps the order topological.
#pragma once

#include <functional>
#include <map>
#include <vector>

#include "core/graph.h"

namespace spire {

/// The needed nodes of a run in one topological order (inputs before consumers), cutting
/// at fed outputs (`fed`'s keys). Throws spire::Error naming the nodes of a cycle.
std::vector<Node*> topological_order(Graph& graph, const std::vector<Output>& fetches,
                                     const std::vector<Node*>& targets,
                                     const std::map<Output, int>& fed);

/// Regroups `order` (a topological order) so that nodes which may run at the same time
/// are consecutive, and returns those groups (waves, each of at least two nodes, in order).
/// `deps_of(n, deps)` appends the nodes `n` reads or is ordered after (data and control;
/// for a fused node, its group's producers as they appear in `order`).
/// A wave starts at a node for which `eligible` holds and takes up to
/// `max_members(device)` nodes of the same device for which `eligible` holds and whose
/// `cost` is known (>= 0) and within `max_cost_ratio` of the first node's (a wave lasts as
/// long as its longest member), found among the next `window` nodes, that depend (by data
/// or control, directly or through any node) neither on a member nor on a node they would
/// move ahead of. Every other node keeps its relative order, so `order` stays topological.
std::vector<std::vector<Node*>> group_independent_nodes(
    std::vector<Node*>& order,
    const std::function<void(const Node*, std::vector<const Node*>&)>& deps_of,
    const std::function<bool(const Node*)>& eligible,
    const std::function<double(const Node*)>& cost,
    const std::function<int(const Device&)>& max_members, int window, double max_cost_ratio);

}  // namespace spire
