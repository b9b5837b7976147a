#include "train/session_init.h"

#include <cerrno>
#include <cstdlib>
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
  Checkpoint ckpt = read_checkpoint(file);
  auto& values = ckpt.tensors;
  for (const auto& name : ignore_) values.erase(name);
  logger::info("Restoring checkpoint from ", file, " ...");
  dict_ = std::make_unique<DictRestore>(std::move(values));
  dict_->init(session);
  auto rng = ckpt.metadata.find(kRngOffsetsMetadataKey);
  if (rng == ckpt.metadata.end()) {
    logger::info("restore: ", file, " holds no random-stream positions (an older checkpoint); "
                 "random ops draw from the start of their streams");
    return;
  }
  for (const auto& w : restore_rng_offsets(session, rng->second, file)) logger::warn("restore: ", w);
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

std::string encode_rng_offsets(const Session& session) {
  std::string out;
  for (const auto& [node, offset] : session.rng_offsets()) {
    if (node->name().find_first_of("\r\n") != std::string::npos) {  // (the rest of the checkpoint is saved)
      logger::warn_once("encode_rng_offsets: the name of random node ", node->id(),
                        " has a line break; its stream position is not saved (a resume restarts it)");
      continue;
    }
    out += str_cat(offset, " ", node->name(), "\n");
  }
  return out;
}

std::vector<std::string> restore_rng_offsets(Session& session, const std::string& text,
                                             const std::string& source) {
  std::vector<std::pair<const Node*, uint64_t>> parsed;
  std::vector<std::string> warnings;
  size_t line_no = 0;
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(at, end - at);
    at = end + 1;
    ++line_no;
    const size_t space = line.find(' ');
    const std::string digits = line.substr(0, space);
    const bool numeric = !digits.empty() && digits.size() <= 20 &&
                         digits.find_first_not_of("0123456789") == std::string::npos;
    errno = 0;
    const unsigned long long offset = numeric ? std::strtoull(digits.c_str(), nullptr, 10) : 0;
    if (space == std::string::npos || space + 1 == line.size() || !numeric || errno == ERANGE)
      throw_error("restore: ", source, ": metadata '", kRngOffsetsMetadataKey, "' line ", line_no,
                  " is malformed (expected '<offset> <node name>', got '", line, "')");
    const std::string name = line.substr(space + 1);
    const Node* n = session.graph().find_node(name);
    if (!n) {
      warnings.push_back(str_cat("random node '", name, "' of the checkpoint is not in the graph; its "
                                 "stream position is not restored"));
      continue;
    }
    parsed.emplace_back(n, static_cast<uint64_t>(offset));
  }
  for (const auto& [n, offset] : parsed) session.set_rng_offset(n, offset);
  return warnings;
}

}  // namespace spire
