// Variables with names from variable scopes (TF1's get_variable /
// variable_scope with reuse), the standard collection keys, and the
// initializer ops for a set of variables. The variable store and the scope
// stack are per graph (Graph::extension), so graphs never share state.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/graph.h"
#include "layers/initializers.h"

namespace spire {

/// Chooses the device of a new variable from its full name, shape and dtype.
using VariablePlacement = std::function<Device(const std::string& name, const Shape& shape, DType dtype)>;

/// Standard collection keys (TF's tf.GraphKeys names).
namespace GraphKeys {
inline const std::string GLOBAL_VARIABLES = "variables";
inline const std::string TRAINABLE_VARIABLES = "trainable_variables";
inline const std::string MODEL_VARIABLES = "model_variables";
inline const std::string LOCAL_VARIABLES = "local_variables";
inline const std::string UPDATE_OPS = "update_ops";
inline const std::string REGULARIZATION_LOSSES = "regularization_losses";
inline const std::string SUMMARIES = "summaries";
/// tensorpack's collection of tensors summarized by moving averages.
inline const std::string MOVING_SUMMARY_OPS = "MOVING_SUMMARY_OPS";
}  // namespace GraphKeys

/// A variable: the Variable node's output (reading it gives the current
/// value), plus the op that assigns its initial value.
struct Variable {
  Output value;
  Node* initializer = nullptr;
  bool trainable = true;

  const std::string& name() const { return value.node->name(); }
  const Shape& shape() const { return value.shape(); }
  DType dtype() const { return value.dtype(); }
  Node* node() const { return value.node; }
  operator Output() const { return value; }
};

/// A variable scope: its full name ("outer/inner", "" at the top), its
/// reuse flag and default initializer. Copyable; re-entering a saved scope
/// object gives the same name.
struct VariableScope {
  std::string name;
  bool reuse = false;
  Initializer initializer;  // null: get_variable's default (glorot_uniform)
  /// Name scope opened when this scope was first entered ("a/" or "a_1/").
  std::string original_name_scope;
};

/// Reuse setting when entering a scope: inherit the enclosing scope's
/// (the default; reuse is inherited by inner scopes), or set it.
enum class Reuse { kInherit, kReuse, kNoReuse };

/// Enters a variable scope while alive (and a name scope of the same name,
/// as TF does). `name` is relative to the current variable scope.
class VariableScopeGuard {
 public:
  explicit VariableScopeGuard(const std::string& name, Reuse reuse = Reuse::kInherit,
                              Initializer initializer = nullptr, Graph* g = nullptr);
  /// Re-enters a scope object (same full name; its original name scope).
  explicit VariableScopeGuard(const VariableScope& scope, Reuse reuse = Reuse::kInherit,
                              Graph* g = nullptr);
  ~VariableScopeGuard();
  VariableScopeGuard(const VariableScopeGuard&) = delete;
  VariableScopeGuard& operator=(const VariableScopeGuard&) = delete;
  const VariableScope& scope() const;

 private:
  struct Impl;
  Impl* impl_;
};

/// The innermost variable scope of `g` (default graph when null).
VariableScope current_variable_scope(Graph* g = nullptr);

/// Gets or creates the variable `<scope>/<name>`. Without reuse, creating a
/// name twice throws (naming the variable and where it was first made);
/// with reuse, the variable must exist with the same shape and dtype.
/// New variables go to GLOBAL_VARIABLES (and TRAINABLE_VARIABLES when
/// trainable) plus `collections`. The initializer defaults to the scope's,
/// else glorot_uniform for floats (zeros for others).
Variable get_variable(const std::string& name, const Shape& shape, DType dtype = DType::F32,
                      Initializer initializer = nullptr, bool trainable = true,
                      const std::vector<std::string>& collections = {},
                      const char* file = __builtin_FILE(), int line = __builtin_LINE());

/// A fresh, never-shared variable named by the current name scope (TF's
/// tf.Variable), e.g. for non-trainable state; the name is made unique.
Variable new_variable(const std::string& name, const Tensor& initial_value, bool trainable = false,
                      const std::vector<std::string>& collections = {}, Graph* g = nullptr);

/// The variable whose node is `value.node` (as made by get_variable or new_variable).
const Variable& variable_of(const Output& value);

/// Every variable made in `g` by get_variable/new_variable, in creation order.
std::vector<Variable> all_variables(Graph* g = nullptr);
/// Collection helpers on the default graph (values are variable outputs).
std::vector<Output> global_variables(const std::string& scope = "", Graph* g = nullptr);
std::vector<Output> trainable_variables(const std::string& scope = "", Graph* g = nullptr);
std::vector<Output> model_variables(const std::string& scope = "", Graph* g = nullptr);
std::vector<Output> local_variables(const std::string& scope = "", Graph* g = nullptr);

/// Whether `value` is a variable in LOCAL_VARIABLES (not saved in
/// checkpoints, not restored): e.g. a replica of a multi-device trainer.
bool is_local_variable(const Output& value);

/// While alive, every variable made in `g` by get_variable or new_variable
/// (optimizer slots included) goes to LOCAL_VARIABLES instead of
/// GLOBAL_VARIABLES (tensorpack's override_to_local_variable): replicas of
/// tower k > 0 are made under it. Guards nest.
class LocalVariableGuard {
 public:
  explicit LocalVariableGuard(Graph& g, bool enable = true);
  ~LocalVariableGuard();
  LocalVariableGuard(const LocalVariableGuard&) = delete;
  LocalVariableGuard& operator=(const LocalVariableGuard&) = delete;

 private:
  Graph& g_;
  bool enable_;
};

/// While alive, the device of every variable made in `g` (and of its
/// initializer) is chosen by `placement(full name, shape, dtype)` instead
/// of the current DeviceScope (TF's device setter functions, e.g.
/// tensorpack's LeastLoadedDeviceSetter). Restores the previous chooser.
class VariablePlacementGuard {
 public:
  VariablePlacementGuard(Graph& g, VariablePlacement placement);
  ~VariablePlacementGuard();
  VariablePlacementGuard(const VariablePlacementGuard&) = delete;
  VariablePlacementGuard& operator=(const VariablePlacementGuard&) = delete;

 private:
  Graph& g_;
  VariablePlacement prev_;
};

/// A NoOp running the initializers of `vars`.
Node* variables_initializer(const std::vector<Output>& vars, const std::string& name = "init");
/// A NoOp running the initializers of GLOBAL_VARIABLES and LOCAL_VARIABLES.
Node* global_variables_initializer(Graph* g = nullptr);

}  // namespace spire
