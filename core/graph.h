// The define-and-run graph IR: Graph owns Nodes; a Node is one op instance
// with a unique hierarchical name (from name scopes), data inputs given as
// Outputs (node, output index), control inputs, attrs and a requested
// device. Shape and dtype inference runs when a node is added. Also the
// scoped guards that change the default graph, the name scope, the control
// dependencies and the device of new nodes.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <typeindex>
#include <vector>

#include "core/attr.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/shape.h"

namespace spire {

class Graph;
class Node;
class OpDef;

/// One output of a node: the edge type of the graph (TF's tf.Tensor).
struct Output {
  Node* node = nullptr;
  int index = 0;

  Output() = default;
  Output(Node* n, int i = 0) : node(n), index(i) {}
  bool valid() const { return node != nullptr; }
  DType dtype() const;
  const Shape& shape() const;
  /// The device this output's tensor lives on (Node::output_device).
  const Device& device() const;
  Graph* graph() const;
  /// "node_name:index".
  std::string name() const;
  bool operator==(const Output& o) const { return node == o.node && index == o.index; }
  bool operator!=(const Output& o) const { return !(*this == o); }
  bool operator<(const Output& o) const;
};

class Node {
 public:
  int id() const { return id_; }
  const std::string& name() const { return name_; }
  const std::string& op_type() const { return op_type_; }
  const OpDef& op_def() const { return *op_def_; }
  Graph* graph() const { return graph_; }

  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  const std::vector<Output>& inputs() const { return inputs_; }
  Output input(int i) const { return inputs_.at(static_cast<size_t>(i)); }
  const std::vector<Node*>& control_inputs() const { return control_inputs_; }
  /// Adds a control dependency after creation (checked for graph and
  /// finalization; a cycle made this way is reported by the Session).
  void add_control_input(Node* n);

  int num_outputs() const { return static_cast<int>(output_dtypes_.size()); }
  Output output(int i = 0) const;
  DType output_dtype(int i) const { return output_dtypes_.at(static_cast<size_t>(i)); }
  const Shape& output_shape(int i) const { return output_shapes_.at(static_cast<size_t>(i)); }

  const AttrMap& attrs() const { return attrs_; }
  bool has_attr(const std::string& key) const { return attrs_.count(key) != 0; }
  /// The attribute as T; throws spire::Error naming the node when missing.
  template <typename T>
  T attr(const std::string& key) const {
    auto it = attrs_.find(key);
    if (it == attrs_.end()) throw_error(describe(), ": no attribute '", key, "'");
    return it->second.get<T>(describe() + " attribute '" + key + "'");
  }
  /// The requested device (set from the DeviceScope at creation). For a
  /// multi-device node (OpDef::multi_device) this is its first participant's
  /// device; devices() lists all of them.
  const Device& device() const { return device_; }
  void set_device(const Device& d);
  /// Where output i lives: device() for ordinary nodes, participant i's
  /// device for multi-device nodes.
  const Device& output_device(int i) const {
    return output_devices_.empty() ? device_ : output_devices_.at(static_cast<size_t>(i));
  }
  /// The participants' devices of a multi-device node (empty otherwise).
  const std::vector<Device>& devices() const { return output_devices_; }

  /// "node 'a/b' (op Add)".
  std::string describe() const;
  /// "x: f32[2, 3], y: f32[3]" for error messages.
  std::string describe_inputs() const;

 private:
  friend class Graph;
  Node() = default;

  int id_ = -1;
  std::string name_;
  std::string op_type_;
  const OpDef* op_def_ = nullptr;
  Graph* graph_ = nullptr;
  std::vector<Output> inputs_;
  std::vector<Node*> control_inputs_;
  AttrMap attrs_;
  Device device_;
  std::vector<Device> output_devices_;  // multi-device nodes: one per participant
  std::vector<DType> output_dtypes_;
  std::vector<Shape> output_shapes_;
};

class Graph {
 public:
  Graph();
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  /// Adds a node of registered op `op_type`. `name` (or the op type when
  /// empty) is prefixed by the current name scope and made unique. Runs
  /// shape/dtype inference; throws spire::Error naming the op, the node and
  /// the input shapes on a mismatch, for an unknown op, for an input from
  /// another graph, or when the graph is finalized (and then leaves the graph
  /// unchanged). Inputs from another device are read through Copy nodes;
  /// a multi-device op's input i is copied to participant i's device when
  /// it lives elsewhere.
  Node* add_node(const std::string& op_type, const std::vector<Output>& inputs,
                 const AttrMap& attrs = {}, const std::string& name = "",
                 const std::vector<Node*>& control_inputs = {});

  int num_nodes() const { return static_cast<int>(nodes_.size()); }
  Node* node(int id) const { return nodes_.at(static_cast<size_t>(id)).get(); }
  const std::vector<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  /// The node with this full name, or null.
  Node* find_node(const std::string& name) const;
  /// Parses "name:index" (or "name" for index 0); throws when not found.
  Output output_by_name(const std::string& name) const;

  /// Makes `base` unique in this graph (TF style: base, base_1, base_2, ...).
  std::string unique_name(const std::string& base);
  /// Current name scope with a trailing '/', or "" at the top.
  const std::string& name_scope() const { return name_scope_; }

  /// Makes later mutation an error.
  void finalize() { finalized_ = true; }
  bool finalized() const { return finalized_; }
  /// Incremented on each mutation (executors use it to invalidate plans).
  uint64_t version() const { return version_; }

  /// Graph-level random seed (0: unset). With op-level seeds it decides the
  /// streams of random ops, so a graph built the same way draws the same numbers.
  int64_t seed() const { return seed_; }
  void set_seed(int64_t s) { seed_ = s; }

  /// Collections (TF style): named lists of outputs (variables, losses,
  /// ...) or of ops (an op is stored as Output{node, 0} and read via .node).
  /// Allowed after finalize(); duplicates are not added twice.
  void add_to_collection(const std::string& key, const Output& value);
  /// Items of `key` whose node name starts with `scope` (all when empty), in insertion order.
  std::vector<Output> get_collection(const std::string& key, const std::string& scope = "") const;
  void clear_collection(const std::string& key);
  std::vector<std::string> collection_keys() const;

  /// Per-graph state of a higher layer (variable store, scopes, ...): the
  /// instance of T owned by this graph, default-constructed on first use.
  template <typename T>
  T& extension() {
    auto& slot = extensions_[std::type_index(typeid(T))];
    if (!slot) slot = std::shared_ptr<void>(new T(), [](void* p) { delete static_cast<T*>(p); });
    return *static_cast<T*>(slot.get());
  }

  /// Human-readable listing: one node per line with op, inputs, attrs, types.
  std::string to_text() const;
  /// JSON serialization of every node (attrs, including constant tensors).
  std::string to_json() const;
  /// Rebuilds a graph from to_json() output; throws on malformed input or
  /// unknown ops.
  static std::unique_ptr<Graph> from_json(const std::string& json);

 private:
  friend class NameScope;
  friend class ControlDependencies;
  friend class DeviceScope;
  friend class Node;
  friend class GraphUnfinalizeGuard;
  friend class ClearControlDependencies;
  void check_mutable(const std::string& what) const;
  /// `src` as seen from `device`: a Copy node (shared by all readers on that
  /// device, except for reference outputs, whose reads are per reader and
  /// get the reader's control inputs).
  Output copy_to_device(const Output& src, const Device& device,
                        const std::vector<Node*>& reader_control_inputs = {});
  std::map<std::pair<Output, Device>, Output> copies_;

  std::vector<std::unique_ptr<Node>> nodes_;
  std::map<std::string, Node*> by_name_;
  std::map<std::string, int> name_counts_;
  std::string name_scope_;
  std::vector<Node*> control_deps_;
  Device device_;
  bool finalized_ = false;
  uint64_t version_ = 0;
  int64_t seed_ = 0;
  std::map<std::string, std::vector<Output>> collections_;
  std::map<std::type_index, std::shared_ptr<void>> extensions_;
};

/// The graph new ops go to when none is given: the innermost DefaultGraphGuard
/// of this thread, or the process-wide default graph.
Graph& default_graph();

/// Makes `g` the default graph of this thread while alive.
class DefaultGraphGuard {
 public:
  explicit DefaultGraphGuard(Graph& g);
  ~DefaultGraphGuard();
  DefaultGraphGuard(const DefaultGraphGuard&) = delete;
  DefaultGraphGuard& operator=(const DefaultGraphGuard&) = delete;

 private:
  Graph* prev_;
};

/// Replaces the process-wide default graph by a fresh one (no guard may be active).
void reset_default_graph();

/// Enters a name scope of `g` while alive. A name ending in '/' re-enters
/// that exact absolute scope; otherwise the name is nested under the current
/// scope and made unique (TF semantics: "a", then "a_1"). An empty name
/// resets to the top scope.
class NameScope {
 public:
  NameScope(Graph& g, const std::string& name);
  explicit NameScope(const std::string& name) : NameScope(default_graph(), name) {}
  ~NameScope();
  /// The entered scope with trailing '/' ("" at the top).
  const std::string& scope() const { return scope_; }

 private:
  Graph& g_;
  std::string prev_;
  std::string scope_;
};

/// Makes a finalized graph mutable while alive, then finalizes it again
/// (TF's _unsafe_unfinalize). For framework code that must add to a
/// finalized graph, such as a trainer building an inference tower for a
/// predictor after training started.
class GraphUnfinalizeGuard {
 public:
  explicit GraphUnfinalizeGuard(Graph& g) : g_(g), was_(g.finalized_) { g.finalized_ = false; }
  ~GraphUnfinalizeGuard() { g_.finalized_ = was_; }
  GraphUnfinalizeGuard(const GraphUnfinalizeGuard&) = delete;
  GraphUnfinalizeGuard& operator=(const GraphUnfinalizeGuard&) = delete;

 private:
  Graph& g_;
  bool was_;
};

/// New nodes of `g` get control inputs on `deps` while alive (nested guards accumulate).
class ControlDependencies {
 public:
  ControlDependencies(Graph& g, const std::vector<Node*>& deps);
  ~ControlDependencies();

 private:
  Graph& g_;
  size_t prev_size_;
};

/// New nodes of `g` get no control inputs from enclosing
/// ControlDependencies while alive (TF's control_dependencies(None)); used
/// when creating variables and their initializers.
class ClearControlDependencies {
 public:
  explicit ClearControlDependencies(Graph& g) : g_(g), saved_(std::move(g.control_deps_)) {
    g.control_deps_.clear();
  }
  ~ClearControlDependencies() { g_.control_deps_ = std::move(saved_); }
  ClearControlDependencies(const ClearControlDependencies&) = delete;
  ClearControlDependencies& operator=(const ClearControlDependencies&) = delete;

 private:
  Graph& g_;
  std::vector<Node*> saved_;
};

/// New nodes of `g` request `device` while alive.
class DeviceScope {
 public:
  DeviceScope(Graph& g, const Device& device);
  ~DeviceScope();

 private:
  Graph& g_;
  Device prev_;
};

}  // namespace spire
