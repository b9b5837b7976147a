// Tower contexts and tower functions (see tower.h): TowerContext enters the
// tower's variable scope (with the tower's reuse) and name scope and is
// recorded in the graph's variable store so variables.cc can enforce the
// tower-function rules; TowerFunc checks inputs against its signature, calls
// the function and records a TowerHandle for name lookups.
#include "layers/tower.h"

#include <algorithm>

#include "core/error.h"
#include "layers/variable_store.h"

namespace spire {

namespace {

using detail::store_of;
using detail::VariableStore;

const char kTowerPrefix[] = "tower";
constexpr size_t kTowerPrefixSize = sizeof(kTowerPrefix) - 1;

// The end of the "tower<digits>" prefix of `name` when it is followed by
// '/' or ends the name, else 0.
size_t tower_prefix_end(const std::string& name) {
  if (name.compare(0, kTowerPrefixSize, kTowerPrefix) != 0) return 0;
  size_t i = kTowerPrefixSize;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9') ++i;
  if (i == kTowerPrefixSize || (i < name.size() && name[i] != '/')) return 0;
  return i;
}

std::string strip_index(const std::string& name, int* index) {
  auto pos = name.rfind(':');
  *index = 0;
  if (pos == std::string::npos) return name;
  std::string idx = name.substr(pos + 1);
  if (idx.empty() || idx.find_first_not_of("0123456789") != std::string::npos) return name;
  *index = std::stoi(idx);
  return name.substr(0, pos);
}

/// Items of `key` whose node name is under the name scope `ns` or the variable scope `vs`.
std::vector<Output> collection_under(const Graph& g, const std::string& key, const std::string& ns,
                                     const std::string& vs) {
  if (ns.empty() && vs.empty()) return g.get_collection(key);
  std::vector<Output> out;
  for (const Output& o : g.get_collection(key)) {
    const std::string& n = o.node->name();
    bool in = (!ns.empty() && n.compare(0, ns.size() + 1, ns + "/") == 0) ||
              (!vs.empty() && n.compare(0, vs.size() + 1, vs + "/") == 0);
    if (in) out.push_back(o);
  }
  return out;
}

/// Inside a tower function, name scopes (relative to the tower's) must not
/// start with "tower": checks the scope components of nodes [first, end).
void check_new_node_scopes(const Graph& g, int first, const std::string& tower_ns,
                           const std::string& tower_name) {
  if (tower_ns.empty()) return;  // no tower name scope: variables.cc checks scopes as opened
  for (int id = first; id < g.num_nodes(); ++id) {
    const std::string& n = g.node(id)->name();
    if (n.compare(0, tower_ns.size(), tower_ns) != 0) continue;
    const std::string rel = n.substr(tower_ns.size());
    detail::check_scope_components(tower_name, rel, /*last_is_scope=*/false,
                                   [&](size_t end, const std::string& component) {
                                     return str_cat("name scope '", tower_ns, rel.substr(0, end + 1), "' (component '",
                                                    component, "', node '", n, "') was opened");
                                   });
  }
}

}  // namespace

std::string training_tower_name(int index) { return kTowerPrefix + std::to_string(index); }

int training_tower_index(const std::string& name) {
  const size_t end = tower_prefix_end(name);
  if (end == 0) return -1;
  const std::string digits = name.substr(kTowerPrefixSize, end - kTowerPrefixSize);
  return digits.size() > 9 ? -1 : std::stoi(digits);
}

std::string strip_tower_prefix(const std::string& name) {
  const size_t end = tower_prefix_end(name);
  if (end == 0) return name;
  return end < name.size() ? name.substr(end + 1) : std::string();
}

bool is_reserved_tower_name(const std::string& component) {
  return component.compare(0, kTowerPrefixSize, kTowerPrefix) == 0;
}

// ---- TowerContext -------------------------------------------------------------

TowerContext::TowerContext(const std::string& ns_name, bool is_training, const std::string& vs_name,
                           int index, int total, Graph* g)
    : g_(g ? *g : default_graph()),
      ns_name_(ns_name),
      vs_name_(vs_name),
      is_training_(is_training),
      index_(index),
      total_(total) {
  VariableStore& st = store_of(g_);
  if (st.tower)
    throw_error("cannot open tower '", ns_name, "' inside tower '", st.tower->ns_name(),
                "': TowerContexts cannot be nested");
  SPIRE_CHECK(index >= 0 && total >= 1 && index < total, "TowerContext '", ns_name,
              "': need 0 <= index < total, got index ", index, " total ", total);
  SPIRE_CHECK(ns_name.empty() || ns_name.back() != '/', "TowerContext: name '", ns_name,
              "' must not end with '/'");

  // Reuse: the main training tower inherits (creates variables); other
  // training towers reuse unless they have their own variable scope;
  // inference towers always reuse.
  Reuse reuse = Reuse::kInherit;
  if (!is_training) reuse = Reuse::kReuse;
  else if (index > 0 && vs_name.empty()) reuse = Reuse::kReuse;
  // tensorpack: the variable scope first (it opens a name scope of its own),
  // then the tower's absolute name scope.
  var_scope_ = std::make_unique<VariableScopeGuard>(vs_name, reuse, nullptr, &g_);
  if (!ns_name.empty()) name_scope_ = std::make_unique<NameScope>(g_, ns_name + "/");

  st.tower = this;
  st.tower_name_scope = g_.name_scope();
  st.tower_scopes.clear();
  if (!vs_name.empty()) st.tower_scopes.insert(var_scope_->scope().name);
}

TowerContext::~TowerContext() {
  VariableStore& st = store_of(g_);
  if (st.tower == this) {
    st.tower = nullptr;
    st.tower_name_scope.clear();
    st.tower_scopes.clear();
  }
  // Reverse order of entry: the name scope was entered after the variable scope.
  name_scope_.reset();
  var_scope_.reset();
}

bool TowerContext::has_own_variables() const {
  return is_main_training_tower() || !vs_name_.empty();
}

std::vector<Output> TowerContext::get_collection_in_tower(const std::string& key) const {
  return collection_under(g_, key, ns_name_, vs_name_);
}

TowerContext* get_current_tower_context(Graph* g) {
  return store_of(g ? *g : default_graph()).tower;
}

// ---- TowerHandle ----------------------------------------------------------------

Output TowerHandle::get_tensor(const std::string& name) const {
  SPIRE_CHECK(graph, "TowerHandle::get_tensor: the handle has no graph");
  int index = 0;
  std::string base = strip_index(name, &index);
  auto pick = [&](Node* n) -> Output {
    if (index < 0 || index >= n->num_outputs())
      throw_error("tower '", ns_name, "': tensor '", name, "': ", n->describe(), " has ",
                  n->num_outputs(), " outputs");
    return n->output(index);
  };
  if (!ns_name.empty())
    if (Node* n = graph->find_node(ns_name + "/" + base)) return pick(n);
  for (size_t i = 0; i < input_signature.size() && i < inputs.size(); ++i)
    if (input_signature[i].name == base && index == 0) return inputs[i];
  if (Node* n = graph->find_node(base)) return pick(n);
  throw_error("tower '", ns_name, "' has no tensor '", name, "' (looked for '",
              ns_name.empty() ? base : ns_name + "/" + base, "', the input names and '", base, "')");
}

Output TowerHandle::get_variable(const std::string& name) const {
  SPIRE_CHECK(graph, "TowerHandle::get_variable: the handle has no graph");
  int index = 0;
  std::string base = strip_index(name, &index);
  std::vector<Variable> vars = all_variables(graph);
  auto find = [&](const std::string& full) -> const Variable* {
    for (const auto& v : vars)
      if (v.name() == full) return &v;
    return nullptr;
  };
  if (!vs_name.empty())
    if (const Variable* v = find(vs_name + "/" + base)) return v->value;
  if (const Variable* v = find(base)) return v->value;
  throw_error("tower '", ns_name, "' has no variable '", name, "' (looked for '",
              vs_name.empty() ? base : vs_name + "/" + base, "' and '", base, "')");
}

std::vector<Output> TowerHandle::get_collection(const std::string& key) const {
  SPIRE_CHECK(graph, "TowerHandle::get_collection: the handle has no graph");
  return collection_under(*graph, key, ns_name, vs_name);
}

// ---- TowerFunc -------------------------------------------------------------------

TowerFunc::TowerFunc(Fn fn, std::vector<InputDesc> input_signature)
    : fn_(std::move(fn)), signature_(std::move(input_signature)) {
  SPIRE_CHECK(static_cast<bool>(fn_), "TowerFunc: empty function");
}

const TowerHandle& TowerFunc::operator()(const std::vector<Output>& inputs) {
  Graph* g = nullptr;
  for (const Output& in : inputs) {
    if (!in.valid()) throw_error("TowerFunc: an input is invalid");
    if (g && in.graph() != g) throw_error("TowerFunc: inputs belong to different graphs");
    g = in.graph();
  }
  if (!g) g = &default_graph();
  TowerContext* ctx = get_current_tower_context(g);
  if (!ctx)
    throw_error("TowerFunc must be called inside a TowerContext (no tower is being built in the "
                "graph of its inputs)");
  if (inputs.size() != signature_.size())
    throw_error("TowerFunc in tower '", ctx->ns_name(), "': expected ", signature_.size(),
                " inputs (the signature), got ", inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const InputDesc& d = signature_[i];
    const Output& in = inputs[i];
    const Shape& s = in.shape();
    bool shape_ok = s.rank() == d.shape.rank();
    for (int k = 0; shape_ok && k < s.rank(); ++k)
      if (s[k] >= 0 && d.shape[k] >= 0 && s[k] != d.shape[k]) shape_ok = false;
    if (in.dtype() != d.dtype || !shape_ok)
      throw_error("TowerFunc in tower '", ctx->ns_name(), "': input ", i, " ('", d.name,
                  "') is ", dtype_name(in.dtype()), s.to_string(), " ('", in.name(),
                  "'), but the signature expects ", dtype_name(d.dtype), d.shape.to_string());
  }

  const int first = g->num_nodes();
  std::vector<Output> outputs = fn_(inputs);
  check_new_node_scopes(*g, first, store_of(*g).tower_name_scope, ctx->ns_name());

  auto h = std::make_shared<TowerHandle>();
  h->ns_name = ctx->ns_name();
  h->vs_name = ctx->vs_name();
  h->is_training = ctx->is_training();
  h->index = ctx->index();
  h->inputs = inputs;
  h->outputs = std::move(outputs);
  h->input_signature = signature_;
  h->graph = g;
  towers_.push_back(h);
  return *towers_.back();
}

const TowerHandle& TowerFunc::tower(const std::string& ns_name) const {
  for (auto it = towers_.rbegin(); it != towers_.rend(); ++it)
    if ((*it)->ns_name == ns_name) return **it;
  std::string names;
  for (const auto& t : towers_) names += (names.empty() ? "'" : ", '") + t->ns_name + "'";
  throw_error("TowerFunc has no tower '", ns_name, "' (towers: ", names.empty() ? "none" : names,
              ")");
}

std::vector<std::shared_ptr<TowerHandle>> TowerFunc::training_towers() const {
  std::vector<std::shared_ptr<TowerHandle>> out;
  for (const auto& t : towers_)
    if (t->is_training) out.push_back(t);
  return out;
}

std::vector<std::shared_ptr<TowerHandle>> TowerFunc::inference_towers() const {
  std::vector<std::shared_ptr<TowerHandle>> out;
  for (const auto& t : towers_)
    if (!t->is_training) out.push_back(t);
  return out;
}

}  // namespace spire
