#include "core/graph.h"

#include <algorithm>
#include <sstream>

#include "core/op_registry.h"

namespace spire {

// ---- Output ----------------------------------------------------------------

DType Output::dtype() const { return node->output_dtype(index); }
const Shape& Output::shape() const { return node->output_shape(index); }
const Device& Output::device() const { return node->output_device(index); }
Graph* Output::graph() const { return node ? node->graph() : nullptr; }
std::string Output::name() const {
  return node ? node->name() + ":" + std::to_string(index) : std::string("<invalid output>");
}
bool Output::operator<(const Output& o) const {
  int a = node ? node->id() : -1, b = o.node ? o.node->id() : -1;
  if (node && o.node && node->graph() != o.node->graph()) return node < o.node;
  return a != b ? a < b : index < o.index;
}

// ---- Node ------------------------------------------------------------------

Output Node::output(int i) const {
  if (i < 0 || i >= num_outputs())
    throw_error(describe(), ": output index ", i, " out of range (", num_outputs(), " outputs)");
  return Output(const_cast<Node*>(this), i);
}

void Node::add_control_input(Node* n) {
  graph_->check_mutable("add a control input to " + describe());
  SPIRE_CHECK(n && n->graph() == graph_, describe(),
              ": control input must be a node of the same graph");
  control_inputs_.push_back(n);
  // This node's reads of variables on other devices happen in its own Copy
  // nodes (one per reader): they must wait for the new dependency too.
  for (const Output& in : inputs_)
    if (in.node->op_def().is_copy() && in.node->input(0).node->op_def().ref_output() &&
        std::find(in.node->control_inputs_.begin(), in.node->control_inputs_.end(), n) ==
            in.node->control_inputs_.end())
      in.node->control_inputs_.push_back(n);
  ++graph_->version_;
}

void Node::set_device(const Device& d) {
  graph_->check_mutable("set the device of " + describe());
  SPIRE_CHECK(output_devices_.empty(), describe(), " is a multi-device node: its devices ",
              "come from its \"devices\" attribute");
  device_ = d;
  ++graph_->version_;
}

std::string Node::describe() const { return str_cat("node '", name_, "' (op ", op_type_, ")"); }

std::string Node::describe_inputs() const {
  std::ostringstream os;
  for (int i = 0; i < num_inputs(); ++i) {
    if (i) os << ", ";
    os << op_def_->input_arg_name(i) << " '" << inputs_[i].name() << "': " << dtype_name(inputs_[i].dtype())
       << inputs_[i].shape().to_string();
  }
  if (num_inputs() == 0) os << "(none)";
  return os.str();
}

// ---- Graph -----------------------------------------------------------------

Graph::Graph() = default;
Graph::~Graph() = default;

void Graph::check_mutable(const std::string& what) const {
  if (finalized_) throw_error("graph is finalized: cannot ", what);
}

std::string Graph::unique_name(const std::string& base) {
  auto it = name_counts_.find(base);
  if (it == name_counts_.end()) {
    name_counts_[base] = 1;
    return base;
  }
  int i = it->second;
  std::string candidate;
  do {
    candidate = base + "_" + std::to_string(i++);
  } while (name_counts_.count(candidate));
  it->second = i;
  name_counts_[candidate] = 1;
  return candidate;
}

Node* Graph::add_node(const std::string& op_type, const std::vector<Output>& inputs,
                      const AttrMap& attrs, const std::string& name,
                      const std::vector<Node*>& control_inputs) {
  std::string base = name_scope_ + (name.empty() ? op_type : name);
  check_mutable("add node '" + base + "' (op " + op_type + ")");
  const OpDef* def = OpRegistry::global().find(op_type);
  if (!def) throw_error("unknown op '", op_type, "' (node '", base, "')");

  // Inputs: count and graph membership.
  size_t named = def->input_names().size();
  bool count_ok = def->variadic()
                      ? inputs.size() >= named - 1 + static_cast<size_t>(def->min_variadic())
                      : inputs.size() == named;
  if (!count_ok)
    throw_error("op ", op_type, " node '", base, "': expected ", def->variadic() ? "at least " : "",
                def->variadic() ? named - 1 + static_cast<size_t>(def->min_variadic()) : named,
                " inputs, got ", inputs.size());
  std::vector<DType> in_dtypes;
  std::vector<Shape> in_shapes;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Output& in = inputs[i];
    if (!in.valid()) throw_error("op ", op_type, " node '", base, "': input ", i, " is invalid");
    if (in.graph() != this)
      throw_error("op ", op_type, " node '", base, "': input ", i, " ('", in.node->name(),
                  "') belongs to another graph");
    if (in.index < 0 || in.index >= in.node->num_outputs())
      throw_error("op ", op_type, " node '", base, "': input ", i, " refers to output ",
                  in.index, " of ", in.node->describe(), " which has ", in.node->num_outputs(),
                  " outputs");
    in_dtypes.push_back(in.dtype());
    in_shapes.push_back(in.shape());
  }
  for (Node* c : control_inputs)
    SPIRE_CHECK(c && c->graph() == this, "op ", op_type, " node '", base,
                "': control input belongs to another graph");

  // Attrs: defaults, required, unknown.
  AttrMap merged = def->attr_defaults();
  for (const auto& [k, v] : attrs) {
    bool known = merged.count(k) != 0;
    for (const auto& r : def->required_attrs()) known = known || r == k;
    if (!known) throw_error("op ", op_type, " node '", base, "': unknown attribute '", k, "'");
    merged[k] = v;
  }
  for (const auto& r : def->required_attrs())
    if (!merged.count(r))
      throw_error("op ", op_type, " node '", base, "': missing required attribute '", r, "'");

  // Shape and dtype inference first: a node that fails it leaves nothing
  // behind (no Copy nodes, no name taken).
  std::vector<std::string> in_names;
  for (const Output& in : inputs) in_names.push_back(in.name());
  InferContext ic(*def, base, std::move(in_dtypes), std::move(in_shapes), merged, std::move(in_names));
  def->shape_fn()(ic);

  // Placement: the DeviceScope's device, unless the op runs with an input's
  // producer (ops writing a variable) or is explicitly CPU-only. Inputs from
  // another device are read through Copy nodes. A multi-device op has one
  // device per participant (its "devices" attr, by default its inputs'
  // devices); participant i reads input i there.
  Device device = device_;
  std::vector<Device> participants;
  if (def->multi_device()) {
    const auto names = merged.at("devices").get<std::vector<std::string>>("devices attribute");
    if (names.empty()) {
      for (const auto& in : inputs) participants.push_back(in.device());
    } else {
      if (names.size() != inputs.size())
        throw_error("op ", op_type, " node '", base, "': ", names.size(), " devices for ",
                    inputs.size(), " inputs (one device per participant)");
      for (const auto& nm : names) participants.push_back(Device::parse(nm));
    }
    if (participants.empty())
      throw_error("op ", op_type, " node '", base, "': a multi-device op needs at least one input");
    for (size_t i = 0; i < participants.size(); ++i)
      for (size_t j = 0; j < i; ++j)
        if (participants[i] == participants[j])
          throw_error("op ", op_type, " node '", base, "': participants ", j, " and ", i,
                      " are both on ", participants[i].to_string(),
                      " (each participant needs its own device)");
    if (static_cast<size_t>(ic.output_dtypes().size()) != participants.size())
      throw_error("internal error: multi-device op ", op_type, " must have one output per participant");
    std::vector<std::string> canonical;
    for (const auto& d : participants) canonical.push_back(d.to_string());
    merged["devices"] = AttrValue(canonical);
    device = participants[0];
  } else {
    if (def->colocate_input() >= 0 && static_cast<size_t>(def->colocate_input()) < inputs.size())
      device = inputs[static_cast<size_t>(def->colocate_input())].device();
    if (def->cpu_only() && !device.is_cpu()) device = Device::cpu();
  }
  std::vector<Output> placed = inputs;
  if (!def->is_copy()) {
    // A variable read from another device is one Copy per reading node (the
    // Copy does the read, so it waits like the reader: the reader's control
    // inputs too), shared by that node's inputs reading the same variable.
    std::map<std::pair<Output, Device>, Output> ref_copies;
    for (size_t i = 0; i < placed.size(); ++i) {
      const Device& want = participants.empty() ? device : participants[i];
      if (placed[i].device() == want) continue;
      if (placed[i].node->op_def().ref_output()) {
        auto key = std::make_pair(placed[i], want);
        auto it = ref_copies.find(key);
        if (it == ref_copies.end()) it = ref_copies.emplace(key, copy_to_device(placed[i], want, control_inputs)).first;
        placed[i] = it->second;
      } else {
        placed[i] = copy_to_device(placed[i], want);
      }
    }
  }

  auto node = std::unique_ptr<Node>(new Node());
  node->id_ = static_cast<int>(nodes_.size());
  node->name_ = unique_name(base);
  node->op_type_ = op_type;
  node->op_def_ = def;
  node->graph_ = this;
  node->inputs_ = std::move(placed);
  node->control_inputs_ = control_inputs;
  for (Node* c : control_deps_)
    if (std::find(node->control_inputs_.begin(), node->control_inputs_.end(), c) ==
        node->control_inputs_.end())
      node->control_inputs_.push_back(c);
  node->attrs_ = std::move(merged);
  node->device_ = device;
  node->output_devices_ = std::move(participants);
  node->output_dtypes_ = ic.output_dtypes();
  node->output_shapes_ = ic.output_shapes();
  Node* raw = node.get();
  by_name_[raw->name_] = raw;
  nodes_.push_back(std::move(node));
  ++version_;
  return raw;
}

Output Graph::copy_to_device(const Output& src, const Device& device,
                             const std::vector<Node*>& reader_control_inputs) {
  const bool ref = src.node->op_def().ref_output();
  auto key = std::make_pair(src, device);
  if (!ref) {
    auto it = copies_.find(key);
    if (it != copies_.end()) return it->second;
  }
  // Built outside the caller's name scope, next to the source's name; a
  // shared copy ignores the caller's control dependencies, a per-reader copy
  // of a variable keeps them (the read must wait like the reader would).
  struct Restore {
    Graph& g;
    std::string scope;
    Device dev;
    std::vector<Node*> deps;
    ~Restore() {
      g.name_scope_ = scope;
      g.device_ = dev;
      g.control_deps_ = deps;
    }
  } restore{*this, name_scope_, device_, control_deps_};
  name_scope_.clear();
  device_ = device;
  if (!ref) control_deps_.clear();
  std::string tag = device.to_string();
  std::replace(tag.begin(), tag.end(), ':', '_');
  std::string name = src.node->name() + (src.index ? "_" + std::to_string(src.index) : "") +
                     "/copy_to_" + tag;
  Output out = add_node("Copy", {src}, {}, name, ref ? reader_control_inputs : std::vector<Node*>{})->output(0);
  if (!ref) copies_[key] = out;
  return out;
}

Node* Graph::find_node(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

Output Graph::output_by_name(const std::string& name) const {
  std::string node_name = name;
  int index = 0;
  auto colon = name.rfind(':');
  if (colon != std::string::npos) {
    node_name = name.substr(0, colon);
    try {
      index = std::stoi(name.substr(colon + 1));
    } catch (const std::exception&) {
      throw_error("bad tensor name '", name, "': expected 'node:index'");
    }
  }
  Node* n = find_node(node_name);
  if (!n) throw_error("no node named '", node_name, "' in the graph (looking up '", name, "')");
  return n->output(index);
}

std::string Graph::to_text() const {
  std::ostringstream os;
  for (const auto& n : nodes_) {
    os << n->name() << " = " << n->op_type() << '(';
    for (int i = 0; i < n->num_inputs(); ++i) os << (i ? ", " : "") << n->input(i).name();
    for (size_t i = 0; i < n->control_inputs().size(); ++i)
      os << ((i || n->num_inputs()) ? ", " : "") << '^' << n->control_inputs()[i]->name();
    os << ')';
    if (!n->attrs().empty()) {
      os << " {";
      bool first = true;
      for (const auto& [k, v] : n->attrs()) {
        os << (first ? "" : ", ") << k << '=' << v.to_string();
        first = false;
      }
      os << '}';
    }
    os << " -> ";
    for (int i = 0; i < n->num_outputs(); ++i)
      os << (i ? ", " : "") << dtype_name(n->output_dtype(i)) << n->output_shape(i).to_string();
    if (!n->devices().empty()) {
      os << " @";
      for (size_t i = 0; i < n->devices().size(); ++i) os << (i ? "," : "") << n->devices()[i].to_string();
    } else if (n->device() != Device::cpu()) {
      os << " @" << n->device().to_string();
    }
    os << '\n';
  }
  return os.str();
}

void Graph::add_to_collection(const std::string& key, const Output& value) {
  SPIRE_CHECK(value.node && value.node->graph() == this, "add_to_collection('", key,
              "'): the value is not a node of this graph");
  auto& items = collections_[key];
  if (std::find(items.begin(), items.end(), value) == items.end()) items.push_back(value);
}

std::vector<Output> Graph::get_collection(const std::string& key, const std::string& scope) const {
  std::vector<Output> out;
  auto it = collections_.find(key);
  if (it == collections_.end()) return out;
  for (const auto& o : it->second)
    if (scope.empty() || o.node->name().compare(0, scope.size(), scope) == 0) out.push_back(o);
  return out;
}

void Graph::clear_collection(const std::string& key) { collections_.erase(key); }

std::vector<std::string> Graph::collection_keys() const {
  std::vector<std::string> keys;
  for (const auto& kv : collections_) keys.push_back(kv.first);
  return keys;
}

// ---- default graph and scopes ----------------------------------------------

namespace {
std::unique_ptr<Graph>& global_default_graph() {
  static std::unique_ptr<Graph> g = std::make_unique<Graph>();
  return g;
}
thread_local Graph* t_default_graph = nullptr;
}  // namespace

Graph& default_graph() {
  return t_default_graph ? *t_default_graph : *global_default_graph();
}

DefaultGraphGuard::DefaultGraphGuard(Graph& g) : prev_(t_default_graph) { t_default_graph = &g; }
DefaultGraphGuard::~DefaultGraphGuard() { t_default_graph = prev_; }

void reset_default_graph() {
  SPIRE_CHECK(t_default_graph == nullptr,
              "reset_default_graph: cannot reset while a DefaultGraphGuard is active");
  global_default_graph() = std::make_unique<Graph>();
}

NameScope::NameScope(Graph& g, const std::string& name) : g_(g), prev_(g.name_scope_) {
  if (name.empty()) {
    scope_ = "";
  } else if (name.back() == '/') {
    scope_ = name;
  } else {
    scope_ = g.unique_name(prev_ + name) + "/";
  }
  g.name_scope_ = scope_;
}
NameScope::~NameScope() { g_.name_scope_ = prev_; }

ControlDependencies::ControlDependencies(Graph& g, const std::vector<Node*>& deps)
    : g_(g), prev_size_(g.control_deps_.size()) {
  for (Node* d : deps) {
    SPIRE_CHECK(d && d->graph() == &g, "ControlDependencies: node belongs to another graph");
    g.control_deps_.push_back(d);
  }
}
ControlDependencies::~ControlDependencies() { g_.control_deps_.resize(prev_size_); }

DeviceScope::DeviceScope(Graph& g, const Device& device) : g_(g), prev_(g.device_) {
  g.device_ = device;
}
DeviceScope::~DeviceScope() { g_.device_ = prev_; }

}  // namespace spire
