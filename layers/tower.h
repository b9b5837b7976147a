// Tower contexts and tower functions (tensorpack's TowerContext/TowerFunc).
// A tower function builds a model from its inputs; it may be called several
// times (a training tower per device, inference towers) and gets the same
// variables back by name. TowerContext is the scoped guard under which one
// call happens: it enters the tower's name scope and variable scope, tells
// layers whether they are training, and enforces the tower-function rules.
// (It lives in layers/, below train/, because layers read it.)
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/graph.h"
#include "layers/variables.h"

namespace spire {

/// Name, dtype and shape (-1 for unknown dims) of one model input (tensorpack's InputDesc).
struct InputDesc {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
};

/// Averages `x` over every training tower of a step (every device, and
/// every process for MPI trainers): installed on the TowerContexts by
/// multi-device trainers; BatchNorm's sync_statistics calls it. `key`
/// pairs the towers' calls (the same key in every tower, e.g. the layer's
/// variable scope with the tower prefix stripped), so every tower must make
/// the same calls with the same keys.
using CrossTowerMean = std::function<Output(const Output& x, const std::string& key)>;

/// "tower<index>": the name scope of training tower `index` of a
/// multi-device trainer (and the variable scope of its replicas in the
/// replicated trainers). Names inside a tower function must not start with
/// "tower" (see is_reserved_tower_name).
std::string training_tower_name(int index);
/// The index k of a name or scope in training tower k ("tower3/conv0/W",
/// "tower3" -> 3), or -1 for any other name ("towerx/a", "conv0/W").
int training_tower_index(const std::string& name);
/// "tower3/conv0/W" -> "conv0/W", "tower3" -> "": a name or scope with its
/// training-tower prefix ("tower<digits>/") removed, so the towers' copies
/// of one variable or layer compare equal; other names are returned as they are.
std::string strip_tower_prefix(const std::string& name);
/// Whether a name component starts with "tower", the prefix reserved for
/// the towers' name scopes (such names cannot be made inside a tower function).
bool is_reserved_tower_name(const std::string& component);

class TowerContext {
 public:
  /// A training tower (is_training = true) or an inference tower (false).
  /// Training towers with index > 0 and no vs_name reuse the main tower's
  /// variables; inference towers always reuse. `vs_name` opens a variable
  /// scope (towers with their own variable scope own their variables).
  TowerContext(const std::string& ns_name, bool is_training, const std::string& vs_name = "",
               int index = 0, int total = 1, Graph* g = nullptr);
  ~TowerContext();
  TowerContext(const TowerContext&) = delete;
  TowerContext& operator=(const TowerContext&) = delete;

  bool is_training() const { return is_training_; }
  const std::string& name() const { return ns_name_; }
  const std::string& ns_name() const { return ns_name_; }
  const std::string& vs_name() const { return vs_name_; }
  int index() const { return index_; }
  int total() const { return total_; }
  bool is_main_training_tower() const { return is_training_ && index_ == 0; }
  /// True when new trainable variables may be created in this tower.
  bool has_own_variables() const;
  /// Items of collection `key` made inside this tower (by name or variable scope).
  std::vector<Output> get_collection_in_tower(const std::string& key) const;
  Graph& graph() const { return g_; }
  /// The cross-tower average of this tower (null when the trainer has none:
  /// a single tower, or an inference tower).
  const CrossTowerMean& cross_tower_mean() const { return cross_tower_mean_; }
  void set_cross_tower_mean(CrossTowerMean fn) { cross_tower_mean_ = std::move(fn); }

 private:
  CrossTowerMean cross_tower_mean_;
  Graph& g_;
  std::string ns_name_, vs_name_;
  bool is_training_;
  int index_, total_;
  std::unique_ptr<NameScope> name_scope_;
  std::unique_ptr<VariableScopeGuard> var_scope_;
};

/// The tower context being built in the default graph (null outside any).
TowerContext* get_current_tower_context(Graph* g = nullptr);

/// What one call of a tower function made: inputs, outputs, and lookup of
/// its tensors and variables by name.
class TowerHandle {
 public:
  std::string ns_name, vs_name;
  bool is_training = true;
  int index = 0;
  std::vector<Output> inputs;
  std::vector<Output> outputs;
  std::vector<InputDesc> input_signature;

  /// A tensor of this tower by name relative to the tower ("fc0/output:0",
  /// or an input name), or by absolute name; throws when not found.
  Output get_tensor(const std::string& name) const;
  /// A variable by name relative to the tower's variable scope, or absolute.
  Output get_variable(const std::string& name) const;
  /// Items of collection `key` made in this tower.
  std::vector<Output> get_collection(const std::string& key) const;
  Graph* graph = nullptr;
};

/// A tower function with its input signature; every call (which must be
/// inside a TowerContext) is recorded as a TowerHandle.
class TowerFunc {
 public:
  using Fn = std::function<std::vector<Output>(const std::vector<Output>& inputs)>;
  TowerFunc(Fn fn, std::vector<InputDesc> input_signature);

  /// Calls the function inside the current TowerContext; inputs must match
  /// the signature's dtypes and be compatible with its shapes.
  const TowerHandle& operator()(const std::vector<Output>& inputs);
  const std::vector<InputDesc>& input_signature() const { return signature_; }
  /// Handles of all calls so far, in call order.
  const std::vector<std::shared_ptr<TowerHandle>>& towers() const { return towers_; }
  /// The handle of the tower with this name scope; throws when absent.
  const TowerHandle& tower(const std::string& ns_name) const;
  /// Handles of training (true) or inference (false) towers.
  std::vector<std::shared_ptr<TowerHandle>> training_towers() const;
  std::vector<std::shared_ptr<TowerHandle>> inference_towers() const;

 private:
  Fn fn_;
  std::vector<InputDesc> signature_;
  std::vector<std::shared_ptr<TowerHandle>> towers_;
};

}  // namespace spire
