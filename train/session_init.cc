#include "train/session_init.h"

#include <set>

#include "layers/variables.h"
#include "train/checkpoint.h"
#include "train/file_util.h"
#include "core/logger.h"

namespace spire {

DictRestore::DictRestore(std::map<std::string, Tensor> values, bool strict)
    : values_(std::move(values)), strict_(strict) {}

void DictRestore::init(Session& session) {
  warnings_.clear();
  Graph& g = session.graph();
  std::set<std::string> used;
  for (const Variable& v : all_variables(&g)) {
    if (is_local_variable(v.value)) continue;
    const std::string& name = v.name();
    auto it = values_.find(name);
    if (it == values_.end()) {
      warnings_.push_back(str_cat("variable '", name, "' is not in the restored values"));
      continue;
    }
    const Tensor& t = it->second;
    if (t.dtype() != v.dtype() || t.shape() != v.shape())
      throw_error("restore: variable '", name, "' is ", dtype_name(v.dtype()), v.shape().to_string(),
                  " in the graph but ", t.type_string(), " in the restored values");
    session.set_variable_value(v.node(), t);
    used.insert(name);
  }
  for (const auto& kv : values_)
    if (!used.count(kv.first))
      warnings_.push_back(str_cat("'", kv.first, "' in the restored values is not a variable of the graph"));
  if (strict_ && !warnings_.empty()) throw_error("restore (strict): ", warnings_.front());
  for (const auto& w : warnings_) logger::warn("restore: ", w);
}

CheckpointRestore::CheckpointRestore(std::string path, std::vector<std::string> ignore)
    : path_(std::move(path)), ignore_(std::move(ignore)) {}

void CheckpointRestore::init(Session& session) {
  std::string file = path_;
  if (path_exists(join_path(path_, "checkpoint")) || !path_exists(path_)) {
    std::string latest = latest_checkpoint(path_);
    SPIRE_CHECK(!latest.empty(), "CheckpointRestore: no checkpoint found at '", path_, "'");
    file = latest;
  }
  auto values = load_checkpoint(file);
  for (const auto& name : ignore_) values.erase(name);
  logger::info("Restoring checkpoint from ", file, " ...");
  dict_ = std::make_unique<DictRestore>(std::move(values));
  dict_->init(session);
}

const std::vector<std::string>& CheckpointRestore::warnings() const {
  static const std::vector<std::string> none;
  return dict_ ? dict_->warnings() : none;
}

std::map<std::string, Tensor> get_variable_values(Session& session) {
  std::map<std::string, Tensor> out;
  for (const Variable& v : all_variables(&session.graph())) {
    if (is_local_variable(v.value)) continue;
    Tensor t = session.variable_value(v.node());
    if (t.defined()) out[v.name()] = t.to(Device::cpu());
  }
  return out;
}

}  // namespace spire
