// Elementwise fusion: a graph pass the Session runs on each plan when
// SessionOptions::fuse_elementwise is on. It finds groups of elementwise nodes
// (a node whose only reader is another node of the group) and replaces each
// group by one FusedElementwise node that evaluates the whole expression in
// blocks small enough to stay in the core's cache, so the group's intermediate
// tensors are never written to memory. Results equal the unfused graph's bit
// for bit: every instruction runs the op's own functor in the op's own
// precision.
//
// Which ops a device can fuse is not decided here: the kernels register, per
// (device, op, dtype), what their FusedElementwise kernel evaluates
// (register_fusable). The pass never changes the user's graph: the fused nodes
// live in a graph the plan owns, and their inputs stand for outputs of the
// user's graph (FusedGroup::inputs).
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/graph.h"

namespace spire {

/// Registers `op` (with `arity` inputs, 1 or 2) as evaluable for `dtype` by the
/// FusedElementwise kernel of `device`. Called by the kernels at load time.
void register_fusable(DeviceType device, const std::string& op, DType dtype, int arity);
/// The arity registered for (device, op, dtype); 0 when that op does not fuse there.
int fusable_arity(DeviceType device, const std::string& op, DType dtype);

/// Registers that `device`'s kernel of `fused_op` computes `op` for `dtype`
/// followed by an elementwise program on its result: `fused_op` takes `op`'s
/// inputs and attrs, then the program's other inputs and attrs (FusedConv2D
/// for Conv2D, FusedMatMul for MatMul). Called by the kernels at load time.
void register_epilogue(DeviceType device, const std::string& op, DType dtype, const std::string& fused_op);
/// The op registered for (device, op, dtype) by register_epilogue; "" when none.
std::string epilogue_op(DeviceType device, const std::string& op, DType dtype);

/// One fused group: `nodes` in evaluation order (inputs before readers; the
/// root, whose output is the group's, last), and the node that replaces them,
/// whose input i stands for `inputs[i]`. With a `producer` (the first node;
/// a product whose only readers are the group's elementwise nodes) the fused
/// node is the producer's epilogue op: its inputs are the producer's, then the
/// program's other inputs; program input 0 is the product. Otherwise it is a
/// FusedElementwise node.
struct FusedGroup {
  std::vector<Node*> nodes;
  std::vector<Output> inputs;
  Node* fused = nullptr;
  Node* producer = nullptr;
};

/// The most instructions and inputs one FusedElementwise node takes.
inline constexpr int kMaxFusedInstructions = 32;
inline constexpr int kMaxFusedInputs = 16;

/// The groups of `order` (a plan's needed nodes, inputs before readers) worth
/// fusing (two nodes or more), each with its FusedElementwise node added to
/// `side`. A node joins the group of its reader when it is fusable on its
/// device for its dtype (every input and its output of one dtype), has one
/// output, is read by nodes of that group only, is on the group's device, has
/// no control inputs and is no node's control input, and its output is neither
/// fetched (`kept`) nor fed (`fed`). A variable read directly (a reference input) is then
/// read when the fused node runs, at its root's place: as for any read that the graph does
/// not order against an update, either value may be read. With `epilogues`, a group (of one
/// node or more) also takes in a producer: an input's node with an epilogue op registered for
/// its device and dtype (register_epilogue) that passes the same tests (output neither kept
/// nor fed, read by the group only, no control edges, one device and dtype). A group whose
/// nodes all only forward their input (OpDef::forwards_input: Identity) is not formed.
std::vector<FusedGroup> fuse_elementwise(const std::vector<Node*>& order, const std::set<Output>& kept,
                                         const std::map<Output, int>& fed, Graph& side,
                                         bool epilogues = false);

}  // namespace spire
