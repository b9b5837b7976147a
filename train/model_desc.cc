#include "train/model_desc.h"

#include <set>

#include "core/ops/state_ops.h"

namespace spire {

std::vector<InputDesc> ModelDescBase::get_input_signature() const {
  std::vector<InputDesc> sig = inputs();
  std::set<std::string> seen;
  for (const auto& d : sig) {
    SPIRE_CHECK(!d.name.empty(), "ModelDesc::inputs(): an input has an empty name");
    SPIRE_CHECK(seen.insert(d.name).second, "ModelDesc::inputs(): input name '", d.name,
                "' appears twice");
  }
  return sig;
}

std::vector<std::string> ModelDescBase::input_names() const {
  std::vector<std::string> names;
  for (const auto& d : get_input_signature()) names.push_back(d.name);
  return names;
}

TowerFunc ModelDescBase::tower_func() {
  return TowerFunc([this](const std::vector<Output>& in) { return std::vector<Output>{build_graph(in)}; },
                   get_input_signature());
}

std::vector<Output> ModelDescBase::make_placeholders(Graph* g) const {
  std::vector<Output> out;
  for (const auto& d : get_input_signature()) out.push_back(ops::placeholder(d.dtype, d.shape, d.name, g));
  return out;
}

std::shared_ptr<Optimizer> ModelDesc::get_optimizer() {
  if (!optimizer_) {
    optimizer_ = optimizer();
    SPIRE_CHECK(optimizer_, "ModelDesc::optimizer() returned null");
  }
  return optimizer_;
}

}  // namespace spire
