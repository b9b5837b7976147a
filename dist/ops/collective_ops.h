// Collective graph ops: AllReduce, Broadcast, AllGather and ReduceScatter.
// Each is one multi-device node (OpDef::multi_device): participant i reads
// input i and writes output i on its own device (the inputs' devices by
// default), so no Copy nodes are inserted for it; the executor runs each
// participant on its device's lane, and the participants meet in the
// node's Communicator. Every op has shape and dtype inference and a
// gradient (allreduce-sum's is allreduce-sum, broadcast's a reduction to
// the root, allgather's a reduce-scatter and the other way round).
//
// The communicator: the node's "communicator" attr names it. "" or "ring"
// is Spire's in-process ring over the node's devices (a session resource
// made on first use); "nccl" is NCCL over the node's GPUs (builds with
// NCCL); any other name is a Communicator the program stored with
// Session::set_resource<dist::Communicator>(name, ...), whose devices()
// must be the node's devices in order. "group_size" (default: the number of
// inputs) is the communicator's size() across processes. A node may also
// serve only some of the group's devices ("group_devices", "instance"):
// then the nodes sharing an instance key meet in one collective, as TF's
// CollectiveReduce nodes meet by instance key (used where towers are built
// one at a time, e.g. synchronized BatchNorm).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/graph.h"
#include "dist/comm/communicator.h"

namespace spire::dist {

struct CollectiveOptions {
  /// See the file comment ("" = Spire's ring over the inputs' devices).
  std::string communicator;
  /// Participants across all processes (0: the number of inputs).
  int group_size = 0;
  /// Participants' devices (empty: the inputs' devices); an input living
  /// elsewhere is copied to its participant's device.
  std::vector<Device> devices;
  /// Node name (default: the op name).
  std::string name;
  /// The devices of every participant in this process when this node
  /// serves only some of them (its `devices` / inputs' devices, each in this
  /// list): nodes built separately, e.g. one per tower, then meet in one
  /// collective of the communicator over `group_devices`. Empty: the node's
  /// participants are the whole in-process group.
  std::vector<Device> group_devices;
  /// Run on a lane of its own on each (CPU) device (OpDef::own_lane_attr):
  /// while the collective waits for other processes, the device's compute
  /// goes on, e.g. the rest of the backward pass (HorovodTrainer's buckets).
  bool overlap = false;
  /// Required with group_devices: the nodes with the same instance key
  /// (and communicator) form one collective in each run; together they
  /// must cover group_devices exactly once (check_collective_instances).
  std::string instance;
};

/// The session resource key of a built-in communicator ("" or "ring": Spire's
/// ring, "nccl") over `devices`, as the collective kernels create it; other
/// names are keys themselves.
std::string communicator_key(const std::string& communicator, const std::vector<Device>& devices);

/// AllReduce: output i = op over all inputs (same dtype and shape).
std::vector<Output> all_reduce(const std::vector<Output>& xs, ReduceOp op = ReduceOp::kSum,
                               const CollectiveOptions& options = {});
/// Broadcast: output i = input `root` (global participant index); the other
/// inputs give only shape, dtype and device.
std::vector<Output> broadcast(const std::vector<Output>& xs, int root = 0,
                              const CollectiveOptions& options = {});
/// AllGather: output i = the inputs concatenated along axis 0, in
/// participant order (inputs of equal shape, rank >= 1).
std::vector<Output> all_gather(const std::vector<Output>& xs, const CollectiveOptions& options = {});
/// ReduceScatter: output i = block i (along axis 0) of op over the inputs;
/// dimension 0 must divide by the group size.
std::vector<Output> reduce_scatter(const std::vector<Output>& xs, ReduceOp op = ReduceOp::kSum,
                                   const CollectiveOptions& options = {});

/// Checks that the nodes of `g` built with CollectiveOptions::instance
/// form whole collectives: per instance key, one communicator and group,
/// every device of group_devices served by exactly one node. Throws
/// spire::Error naming the instance, the devices served and the missing or
/// repeated ones (a tower that skipped a synchronized layer would otherwise
/// leave the others waiting).
void check_collective_instances(const Graph& g);

/// The collective nodes of `g` on `communicator` (their "communicator"
/// attr), in creation order.
std::vector<Node*> collective_nodes(const Graph& g, const std::string& communicator);

/// "AllReduce/bucket0: AllReduce(mean) f32[1234]": what processes compare
/// before training (MpiCommunicator::agree), so a graph that differs
/// between ranks is an error naming the first difference, not a hang.
std::string describe_collective(const Node* n);

/// When each node of `g` can first run, as a number: the longest chain of
/// nodes (inputs and control inputs) from a node without any, by node id
/// (a node without inputs: 0). A define-and-run estimate of the order in
/// which the backward pass makes the gradients, for HorovodTrainer's
/// buckets and the collectives' order. Throws spire::Error on a cycle.
std::vector<int64_t> ready_levels(const Graph& g);

/// Gives `nodes` an explicit order, the order in which their inputs can
/// first exist (ready_levels, ties by creation order): the i-th gets a
/// control input from the one before, so every run, whatever else it
/// fetches (hooks, chief-only callbacks), calls them in this order on every
/// process, as MPI needs. A collective the backward pass reaches early (a
/// first gradient bucket) then does not wait for one it reaches late (the
/// gradient of the first synchronized BatchNorm). A node in `ready_with`
/// counts as ready one level after the latest of the nodes listed for it
/// (a packed gradient bucket: its gradients, not the reshapes and concat
/// that pack them, so a bucket of several gradients and one of a single
/// gradient compare alike); every path into it must pass through them.
/// No cycle can form: every edge already in the graph goes from a lower
/// (level, id) to a higher one. Throws spire::Error for nodes of different
/// graphs or a node given twice. Returns the nodes in that order.
std::vector<Node*> order_collectives(const std::vector<Node*>& nodes,
                                     const std::map<const Node*, std::vector<const Node*>>& ready_with = {});

}  // namespace spire::dist
