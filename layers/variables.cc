// Variables and variable scopes (see variables.h): VariableScopeGuard,
// get_variable (shared by full name, with reuse checks), new_variable
// (TF's tf.Variable), collection helpers and initializer groups, plus the
// tower-function checks on them (rules enforced while a TowerContext is
// active). State lives in the graph's detail::VariableStore extension.
#include "layers/variables.h"

#include <algorithm>

#include "core/error.h"
#include "core/ops/state_ops.h"
#include "layers/tower.h"
#include "layers/variable_store.h"

namespace spire {

namespace detail {

std::string VariableRecord::where() const {
  std::string s = file.empty() ? std::string("an unknown call site") : file + ":" + std::to_string(line);
  s += " in name scope '" + name_scope + "'";
  if (!tower.empty()) s += " (tower '" + tower + "')";
  return s;
}

namespace {
[[noreturn]] void throw_reserved(const std::string& what, const std::string& tower) {
  throw_error(what, " inside tower '", tower,
              "': names starting with \"tower\" are reserved for tower name scopes "
              "and cannot be used inside a tower function");
}
}  // namespace

void check_tower_prefix(Graph& g, const std::string& component, const std::string& what) {
  TowerContext* t = store_of(g).tower;
  if (t && is_reserved_tower_name(component)) throw_reserved(str_cat(what, " '", component, "'"), t->ns_name());
}

void check_scope_components(const std::string& tower, const std::string& path, bool last_is_scope,
                            const std::function<std::string(size_t end, const std::string& component)>& what) {
  size_t start = 0;
  while (start < path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) {
      if (!last_is_scope) return;
      end = path.size();
    }
    const std::string component = path.substr(start, end - start);
    if (is_reserved_tower_name(component)) throw_reserved(what(end, component), tower);
    start = end + 1;
  }
}

}  // namespace detail

namespace {

using detail::store_of;
using detail::VariableRecord;
using detail::VariableStore;

Graph& graph_or_default(Graph* g) { return g ? *g : default_graph(); }

std::string last_component(const std::string& name) {
  auto pos = name.rfind('/');
  return pos == std::string::npos ? name : name.substr(pos + 1);
}

std::string join(const std::string& scope, const std::string& name) {
  return scope.empty() ? name : scope + "/" + name;
}

const VariableScope& root_scope() {
  static const VariableScope root{};
  return root;
}

const VariableScope& current_scope(VariableStore& st) {
  return st.scope_stack.empty() ? root_scope() : st.scope_stack.back();
}

std::string tower_suffix(const VariableStore& st) {
  if (!st.tower) return "";
  return str_cat(" (in tower '", st.tower->ns_name(), "', ",
                 st.tower->is_training() ? "training" : "inference", " tower ", st.tower->index(),
                 ")");
}

/// The components of the name scope opened inside the tower (relative to the
/// tower's own name scope) must not start with "tower".
void check_tower_name_scope(Graph& g) {
  VariableStore& st = store_of(g);
  if (!st.tower) return;
  std::string rel = g.name_scope();
  if (!st.tower_name_scope.empty() && rel.compare(0, st.tower_name_scope.size(), st.tower_name_scope) == 0)
    rel = rel.substr(st.tower_name_scope.size());
  else if (st.tower_name_scope.empty())
    ;  // the tower has no name scope of its own: check the whole scope
  else
    return;  // a name scope outside the tower's (re-entered scope object): not opened here
  detail::check_scope_components(st.tower->ns_name(), rel, /*last_is_scope=*/true,
                                 [&](size_t, const std::string& component) {
                                   return str_cat("name scope '", g.name_scope(), "' (component '", component, "')");
                                 });
}

Initializer default_initializer(DType dtype) {
  if (is_floating(dtype)) return init::glorot_uniform();
  return init::zeros();
}

/// Builds the initial value under "<var>/Initializer/" and the Assign under "<var>/".
Node* build_initializer(Graph& g, const Output& var, const Initializer& initializer) {
  const std::string& full = var.node->name();
  Output value;
  {
    NameScope ns(g, full + "/Initializer/");
    value = initializer(var.shape(), var.dtype(), g);
  }
  if (!value.valid())
    throw_error("initializer of variable '", full, "' returned an invalid output");
  if (value.graph() != &g)
    throw_error("initializer of variable '", full, "' built its value in another graph");
  if (value.dtype() != var.dtype() || value.shape() != var.shape())
    throw_error("initializer of variable '", full, "' returned ", dtype_name(value.dtype()),
                value.shape().to_string(), ", expected ", dtype_name(var.dtype()),
                var.shape().to_string());
  NameScope ns(g, full + "/");
  return ops::assign(var, value, "Assign").node;
}

const Variable& register_variable(Graph& g, VariableRecord rec,
                                  const std::vector<std::string>& collections) {
  VariableStore& st = store_of(g);
  bool local = std::find(collections.begin(), collections.end(), GraphKeys::LOCAL_VARIABLES) !=
               collections.end();
  if (st.local_override > 0 && !local) {
    local = true;
    g.add_to_collection(GraphKeys::LOCAL_VARIABLES, rec.var.value);
  }
  rec.local = local;
  if (!local) g.add_to_collection(GraphKeys::GLOBAL_VARIABLES, rec.var.value);
  if (rec.var.trainable) g.add_to_collection(GraphKeys::TRAINABLE_VARIABLES, rec.var.value);
  for (const auto& key : collections) g.add_to_collection(key, rec.var.value);
  size_t idx = st.records.size();
  const Node* node = rec.var.node();
  std::string name = rec.var.name();
  bool shared = rec.shared;
  st.records.push_back(std::move(rec));
  st.by_node[node] = idx;
  if (shared) st.shared_by_name[name] = idx;
  return st.records.back().var;
}

}  // namespace

// ---- VariableScopeGuard -------------------------------------------------------

struct VariableScopeGuard::Impl {
  Graph* g = nullptr;
  size_t prev_depth = 0;
  std::unique_ptr<NameScope> name_scope;
  VariableScope scope;
};

VariableScopeGuard::VariableScopeGuard(const std::string& name, Reuse reuse,
                                       Initializer initializer, Graph* g)
    : impl_(nullptr) {
  Graph& graph = graph_or_default(g);
  VariableStore& st = store_of(graph);
  const VariableScope parent = current_scope(st);
  if (!name.empty()) detail::check_tower_prefix(graph, last_component(name), "variable scope");

  auto impl = std::make_unique<Impl>();
  impl->g = &graph;
  impl->prev_depth = st.scope_stack.size();
  VariableScope& s = impl->scope;
  s.name = name.empty() ? parent.name : join(parent.name, name);
  s.reuse = reuse == Reuse::kInherit ? parent.reuse : reuse == Reuse::kReuse;
  s.initializer = initializer ? std::move(initializer) : parent.initializer;
  if (name.empty()) {
    // Same scope with another reuse/initializer: no new name scope.
    s.original_name_scope = parent.original_name_scope;
  } else {
    impl->name_scope = std::make_unique<NameScope>(graph, name);
    s.original_name_scope = impl->name_scope->scope();
    check_tower_name_scope(graph);
    if (st.tower) st.tower_scopes.insert(s.name);
  }
  st.scope_stack.push_back(s);
  impl_ = impl.release();
}

VariableScopeGuard::VariableScopeGuard(const VariableScope& scope, Reuse reuse, Graph* g)
    : impl_(nullptr) {
  Graph& graph = graph_or_default(g);
  VariableStore& st = store_of(graph);
  const VariableScope parent = current_scope(st);
  // TF1: reuse is never turned off by inheritance; an explicit setting wins.
  bool r = reuse == Reuse::kInherit ? (parent.reuse || scope.reuse) : reuse == Reuse::kReuse;
  if (st.tower && r != parent.reuse) {
    bool created_here = false;
    for (const auto& t : st.tower_scopes)
      if (scope.name == t || scope.name.compare(0, t.size() + 1, t + "/") == 0) created_here = true;
    if (!created_here)
      throw_error("re-entering variable scope '", scope.name, "' inside tower '",
                  st.tower->ns_name(), "' would change reuse from ", parent.reuse ? "on" : "off",
                  " to ", r ? "on" : "off",
                  ", but the scope was created outside the tower function; a tower function "
                  "must not change the reuse of scopes it did not create (",
                  st.tower->is_training() ? "training" : "inference", " tower ",
                  st.tower->index(), ")");
  }
  auto impl = std::make_unique<Impl>();
  impl->g = &graph;
  impl->prev_depth = st.scope_stack.size();
  impl->scope = scope;
  impl->scope.reuse = r;
  impl->name_scope = std::make_unique<NameScope>(graph, scope.original_name_scope);
  st.scope_stack.push_back(impl->scope);
  impl_ = impl.release();
}

VariableScopeGuard::~VariableScopeGuard() {
  if (!impl_) return;
  VariableStore& st = store_of(*impl_->g);
  if (st.scope_stack.size() > impl_->prev_depth) st.scope_stack.resize(impl_->prev_depth);
  impl_->name_scope.reset();
  delete impl_;
}

const VariableScope& VariableScopeGuard::scope() const { return impl_->scope; }

VariableScope current_variable_scope(Graph* g) {
  return current_scope(store_of(graph_or_default(g)));
}

// ---- get_variable / new_variable ----------------------------------------------

Variable get_variable(const std::string& name, const Shape& shape, DType dtype,
                      Initializer initializer, bool trainable,
                      const std::vector<std::string>& collections, const char* file, int line) {
  Graph& g = default_graph();
  VariableStore& st = store_of(g);
  const VariableScope scope = current_scope(st);
  if (name.empty()) throw_error("get_variable: empty variable name in scope '", scope.name, "'");
  if (name.back() == '/' || name.front() == '/')
    throw_error("get_variable: invalid variable name '", name, "'");
  const std::string full = join(scope.name, name);
  detail::check_tower_prefix(g, last_component(name), "variable '" + full + "':");
  check_tower_name_scope(g);

  auto it = st.shared_by_name.find(full);
  if (scope.reuse) {
    if (it == st.shared_by_name.end())
      throw_error("variable '", full, "' does not exist; set reuse off to create it "
                  "(variable scope '", scope.name, "' has reuse on)", tower_suffix(st));
    const VariableRecord& rec = st.records[it->second];
    if (rec.var.shape() != shape || rec.var.dtype() != dtype)
      throw_error("variable '", full, "' was created as ", dtype_name(rec.var.dtype()),
                  rec.var.shape().to_string(), " at ", rec.where(), ", but is requested as ",
                  dtype_name(dtype), shape.to_string());
    return rec.var;
  }
  if (it != st.shared_by_name.end()) {
    const VariableRecord& rec = st.records[it->second];
    throw_error("variable '", full, "' already exists (created at ", rec.where(),
                "); set reuse on (Reuse::kReuse) to share it", tower_suffix(st));
  }
  if (st.tower && trainable && !st.tower->has_own_variables())
    throw_error("cannot create new trainable variable '", full, "' in ",
                st.tower->is_training() ? "training" : "inference", " tower '",
                st.tower->ns_name(), "' (index ", st.tower->index(),
                "), which does not own variables: it must reuse the variables of the main "
                "training tower");
  if (!shape.is_fully_defined())
    throw_error("get_variable '", full, "': shape ", shape.to_string(), " must be fully defined");
  if (Node* other = g.find_node(full))
    throw_error("get_variable '", full, "': the name is already used by ", other->describe(),
                ", which is not a variable made by get_variable");

  Initializer init = initializer ? initializer
                     : scope.initializer ? scope.initializer
                                         : default_initializer(dtype);
  // Variables and their initializers never take control inputs from an
  // enclosing ControlDependencies (TF clears them for variable creation).
  ClearControlDependencies no_deps(g);
  std::optional<DeviceScope> placed;
  if (st.placement) placed.emplace(g, st.placement(full, shape, dtype));
  Output v;
  {
    NameScope top(g, "");
    v = ops::variable(shape, dtype, full, &g);
  }
  if (v.node->name() != full)
    throw_error("get_variable '", full, "': the name is already taken in the graph (by a name "
                "scope), the variable node would be named '", v.node->name(), "'");
  VariableRecord rec;
  rec.var.value = v;
  rec.var.trainable = trainable;
  rec.shared = true;
  rec.file = file ? file : "";
  rec.line = line;
  rec.name_scope = g.name_scope();
  rec.tower = st.tower ? st.tower->ns_name() : "";
  rec.var.initializer = build_initializer(g, v, init);
  return register_variable(g, std::move(rec), collections);
}

Variable new_variable(const std::string& name, const Tensor& initial_value, bool trainable,
                      const std::vector<std::string>& collections, Graph* g) {
  Graph& graph = graph_or_default(g);
  VariableStore& st = store_of(graph);
  if (st.tower)
    throw_error("new_variable '", name, "' inside tower '", st.tower->ns_name(),
                "': a variable whose name depends on the name scope (TF's tf.Variable) cannot "
                "be shared between towers; use get_variable instead");
  if (!initial_value.defined()) throw_error("new_variable '", name, "': undefined initial value");
  ClearControlDependencies no_deps(graph);
  std::optional<DeviceScope> placed;
  if (st.placement)
    placed.emplace(graph, st.placement(graph.name_scope() + (name.empty() ? "Variable" : name),
                                       initial_value.shape(), initial_value.dtype()));
  Output v = ops::variable(initial_value.shape(), initial_value.dtype(),
                           name.empty() ? "Variable" : name, &graph);
  const std::string full = v.node->name();
  Node* assign;
  {
    NameScope ns(graph, full + "/");
    Output value = ops::constant(initial_value, "initial_value", &graph);
    assign = ops::assign(v, value, "Assign").node;
  }
  VariableRecord rec;
  rec.var.value = v;
  rec.var.trainable = trainable;
  rec.var.initializer = assign;
  rec.shared = false;
  rec.name_scope = graph.name_scope();
  return register_variable(graph, std::move(rec), collections);
}

bool is_local_variable(const Output& value) {
  if (!value.valid()) return false;
  VariableStore& st = store_of(*value.graph());
  auto it = st.by_node.find(value.node);
  return it != st.by_node.end() && st.records[it->second].local;
}

LocalVariableGuard::LocalVariableGuard(Graph& g, bool enable) : g_(g), enable_(enable) {
  if (enable_) ++store_of(g_).local_override;
}
LocalVariableGuard::~LocalVariableGuard() {
  if (enable_) --store_of(g_).local_override;
}

VariablePlacementGuard::VariablePlacementGuard(Graph& g, VariablePlacement placement) : g_(g) {
  VariableStore& st = store_of(g_);
  prev_ = std::move(st.placement);
  st.placement = std::move(placement);
}
VariablePlacementGuard::~VariablePlacementGuard() { store_of(g_).placement = std::move(prev_); }

const Variable& variable_of(const Output& value) {
  if (!value.valid()) throw_error("variable_of: invalid output");
  VariableStore& st = store_of(*value.graph());
  auto it = st.by_node.find(value.node);
  if (it == st.by_node.end())
    throw_error("variable_of: ", value.node->describe(),
                " is not a variable made by get_variable or new_variable");
  return st.records[it->second].var;
}

std::vector<Variable> all_variables(Graph* g) {
  std::vector<Variable> out;
  for (const auto& r : store_of(graph_or_default(g)).records) out.push_back(r.var);
  return out;
}

std::vector<Output> global_variables(const std::string& scope, Graph* g) {
  return graph_or_default(g).get_collection(GraphKeys::GLOBAL_VARIABLES, scope);
}
std::vector<Output> trainable_variables(const std::string& scope, Graph* g) {
  return graph_or_default(g).get_collection(GraphKeys::TRAINABLE_VARIABLES, scope);
}
std::vector<Output> model_variables(const std::string& scope, Graph* g) {
  return graph_or_default(g).get_collection(GraphKeys::MODEL_VARIABLES, scope);
}
std::vector<Output> local_variables(const std::string& scope, Graph* g) {
  return graph_or_default(g).get_collection(GraphKeys::LOCAL_VARIABLES, scope);
}

Node* variables_initializer(const std::vector<Output>& vars, const std::string& name) {
  Graph* g = nullptr;
  std::vector<Node*> deps;
  for (const Output& v : vars) {
    if (!v.valid()) throw_error("variables_initializer: invalid variable output");
    if (g && v.graph() != g)
      throw_error("variables_initializer: variable '", v.node->name(),
                  "' belongs to another graph");
    g = v.graph();
    Node* init = variable_of(v).initializer;
    if (!init) throw_error("variables_initializer: variable '", v.node->name(), "' has no initializer");
    if (std::find(deps.begin(), deps.end(), init) == deps.end()) deps.push_back(init);
  }
  Graph& graph = g ? *g : default_graph();
  return ops::group(deps, name.empty() ? "init" : name, &graph);
}

Node* global_variables_initializer(Graph* g) {
  Graph& graph = graph_or_default(g);
  std::vector<Output> vars = graph.get_collection(GraphKeys::GLOBAL_VARIABLES);
  for (const Output& v : graph.get_collection(GraphKeys::LOCAL_VARIABLES))
    if (std::find(vars.begin(), vars.end(), v) == vars.end()) vars.push_back(v);
  if (vars.empty()) return ops::group({}, "init", &graph);
  return variables_initializer(vars, "init");
}

}  // namespace spire
