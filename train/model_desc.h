// ModelDesc (tensorpack's ModelDescBase / ModelDesc): a user describes a
// model by its inputs (names, dtypes, shapes with an unknown batch
// dimension), a build_graph function returning the cost, and an optimizer.
// Trainers turn build_graph into a TowerFunc and call it in training and
// inference towers, which share variables by name.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/graph.h"
#include "layers/optimizers.h"
#include "layers/tower.h"

namespace spire {

/// A model without an optimizer (enough for inference).
class ModelDescBase {
 public:
  virtual ~ModelDescBase() = default;
  /// The input signature, e.g. {{"input", F32, {-1, 28, 28}}, {"label", I64, {-1}}}.
  virtual std::vector<InputDesc> inputs() const = 0;
  /// Builds the model from placeholders/tensors matching inputs(); returns
  /// the cost (a scalar) for single-cost training, or any output otherwise.
  virtual Output build_graph(const std::vector<Output>& inputs) = 0;

  /// inputs(), checked: unique non-empty names.
  std::vector<InputDesc> get_input_signature() const;
  std::vector<std::string> input_names() const;
  /// build_graph as a tower function (its single output is the cost).
  TowerFunc tower_func();
  /// Placeholders for the signature in graph `g` (named by the inputs).
  std::vector<Output> make_placeholders(Graph* g = nullptr) const;
};

/// A trainable model: adds the optimizer.
class ModelDesc : public ModelDescBase {
 public:
  /// Creates the optimizer (called once; the result is cached by get_optimizer()).
  virtual std::shared_ptr<Optimizer> optimizer() = 0;
  std::shared_ptr<Optimizer> get_optimizer();

 private:
  std::shared_ptr<Optimizer> optimizer_;
};

}  // namespace spire
