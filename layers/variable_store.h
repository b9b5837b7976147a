// Internal per-graph state of layers/variables.cc and layers/tower.cc (not a
// public API): the variable store (name -> Variable plus where it was made),
// the variable-scope stack and the active tower context with the variable
// scopes the tower created. One instance per graph via Graph::extension.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "layers/variables.h"

namespace spire {

class TowerContext;

namespace detail {

/// One variable made by get_variable or new_variable.
struct VariableRecord {
  Variable var;
  bool shared = false;     // made by get_variable (found by name), not new_variable
  std::string file;        // creating call site ("" when unknown)
  int line = 0;
  std::string name_scope;  // name scope active at creation
  std::string tower;       // name scope of the tower it was made in ("" outside towers)
  bool local = false;      // in LOCAL_VARIABLES instead of GLOBAL_VARIABLES

  /// "file:line in name scope 'x/'" for error messages.
  std::string where() const;
};

struct VariableStore {
  std::deque<VariableRecord> records;            // creation order; stable references
  std::map<std::string, size_t> shared_by_name;  // get_variable full name -> records index
  std::map<const Node*, size_t> by_node;         // every variable node -> records index
  std::vector<VariableScope> scope_stack;        // innermost last

  // Tower state (at most one active tower per graph).
  TowerContext* tower = nullptr;
  std::string tower_name_scope;             // the name scope the tower entered
  std::set<std::string> tower_scopes;       // variable scopes created inside the tower

  // LocalVariableGuard depth (> 0: new variables are local) and the
  // VariablePlacementGuard's chooser (null: the current DeviceScope).
  int local_override = 0;
  VariablePlacement placement;
};

inline VariableStore& store_of(Graph& g) { return g.extension<VariableStore>(); }

/// Throws when `component` (one name component) starts with the reserved
/// prefix "tower" (is_reserved_tower_name) while a tower is being built in
/// `g`; `what` says what it names.
void check_tower_prefix(Graph& g, const std::string& component, const std::string& what);
/// Throws when a component of the scope path `path` (relative to the name
/// scope of tower `tower`) is reserved: the parts of `path` before each '/',
/// and the part after the last '/' too when `last_is_scope`. `what(end,
/// component)` says, for the message, what the component ending at offset
/// `end` of `path` names.
void check_scope_components(const std::string& tower, const std::string& path, bool last_is_scope,
                            const std::function<std::string(size_t end, const std::string& component)>& what);

}  // namespace detail
}  // namespace spire
