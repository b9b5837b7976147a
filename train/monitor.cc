#include "train/monitor.h"

#include <cmath>
#include <ctime>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "train/event_writer.h"
#include "train/file_util.h"
#include "core/logger.h"
#include "train/trainer.h"

namespace spire {

// ---- Monitors ------------------------------------------------------------------

Monitors::Monitors(std::vector<MonitorPtr> monitors) : monitors_(std::move(monitors)) {
  chief_only_ = false;
}

void Monitors::put_scalar(const std::string& name, double value) {
  int64_t step = 0;
  try {
    step = trainer().global_step();
  } catch (const Error&) {
  }
  history_[name].emplace_back(step, value);
  for (auto& m : monitors_) m->process_scalar(name, value);
}

bool Monitors::has(const std::string& name) const {
  auto it = history_.find(name);
  return it != history_.end() && !it->second.empty();
}

double Monitors::get_latest(const std::string& name) const {
  SPIRE_CHECK(has(name), "Monitors::get_latest: no scalar named '", name, "' has been put");
  return history_.at(name).back().second;
}

std::vector<std::pair<int64_t, double>> Monitors::get_history(const std::string& name) const {
  auto it = history_.find(name);
  return it == history_.end() ? std::vector<std::pair<int64_t, double>>{} : it->second;
}

// ---- JSONWriter ------------------------------------------------------------------

namespace {

std::string timestamp() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%m%d-%H%M%S", &tm);
  return buf;
}

}  // namespace

std::vector<std::map<std::string, double>> JSONWriter::load_existing_json(const std::string& logdir) {
  std::vector<std::map<std::string, double>> stats;
  std::string path = join_path(logdir, kFilename);
  if (!path_exists(path)) return stats;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw_error("JSONWriter: ", path, " is not valid JSON: ", e.what());
  }
  SPIRE_CHECK(j.is_array(), "JSONWriter: ", path, " must hold a list of objects");
  for (const auto& item : j) {
    SPIRE_CHECK(item.is_object(), "JSONWriter: ", path, " must hold a list of objects");
    std::map<std::string, double> row;
    for (const auto& [k, v] : item.items())
      if (v.is_number()) row[k] = v.get<double>();
    stats.push_back(row);
  }
  return stats;
}

int JSONWriter::load_existing_epoch_number(const std::string& logdir) {
  auto stats = load_existing_json(logdir);
  if (stats.empty() || !stats.back().count("epoch_num")) return -1;
  return static_cast<int>(stats.back().at("epoch_num"));
}

void JSONWriter::_before_train() {
  const std::string& dir = trainer().logdir();
  enabled_ = !dir.empty();
  if (!enabled_) {
    logger::warn("JSONWriter: the trainer has no log directory; stats.json is not written");
    return;
  }
  make_dirs(dir);
  path_ = join_path(dir, kFilename);
  auto stats = load_existing_json(dir);
  if (!stats.empty()) {
    int last = stats.back().count("epoch_num") ? static_cast<int>(stats.back().at("epoch_num")) : -1;
    int starting = trainer().starting_epoch();
    if (last + 1 == starting) {
      logger::info("Found existing JSON inside ", dir, ", will append to it.");
      stats_ = std::move(stats);
    } else {
      std::string backup = path_ + "." + timestamp();
      logger::warn("History epoch=", last, " from JSON is not the predecessor of the current "
                   "starting_epoch=", starting, "; backing up the old stats.json to ", backup);
      if (std::rename(path_.c_str(), backup.c_str()) != 0)
        throw_error("JSONWriter: cannot move ", path_, " to ", backup);
    }
  }
}

void JSONWriter::process_scalar(const std::string& name, double value) { now_[name] = value; }

void JSONWriter::_trigger_step() {}

void JSONWriter::_trigger_epoch() { _trigger(); }

void JSONWriter::_trigger() {
  if (now_.empty() || !enabled_) return;
  now_["epoch_num"] = trainer().epoch_num();
  now_["global_step"] = static_cast<double>(trainer().global_step());
  stats_.push_back(now_);
  now_.clear();
  write();
}

void JSONWriter::write() {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& row : stats_) {
    nlohmann::json o = nlohmann::json::object();
    for (const auto& [k, v] : row) {
      if (k == "epoch_num" || k == "global_step")
        o[k] = static_cast<int64_t>(v);
      else if (std::isfinite(v))
        o[k] = v;
      else
        o[k] = nullptr;
    }
    j.push_back(o);
  }
  atomic_write_file(path_, j.dump(1) + "\n");
}

// ---- ScalarPrinter ------------------------------------------------------------------

ScalarPrinter::ScalarPrinter(bool enable_step, bool enable_epoch, std::vector<std::string> whitelist,
                             std::vector<std::string> blacklist)
    : enable_step_(enable_step), enable_epoch_(enable_epoch), whitelist_(std::move(whitelist)),
      blacklist_(std::move(blacklist)) {}

void ScalarPrinter::process_scalar(const std::string& name, double value) {
  auto matches = [&](const std::vector<std::string>& pats) {
    for (const auto& p : pats)
      if (std::regex_search(name, std::regex(p))) return true;
    return false;
  };
  if (!whitelist_.empty() && !matches(whitelist_)) return;
  if (matches(blacklist_)) return;
  latest_[name] = value;
}

void ScalarPrinter::print() {
  for (const auto& [k, v] : latest_) {
    std::ostringstream os;
    os << std::setprecision(6) << v;
    logger::info(k, ": ", os.str());
  }
  latest_.clear();
}

void ScalarPrinter::_trigger_step() {
  if (enable_step_) print();
}

void ScalarPrinter::_trigger_epoch() {
  if (enable_epoch_) print();
}

// ---- TFEventWriter ---------------------------------------------------------------------

TFEventWriter::TFEventWriter() = default;
TFEventWriter::~TFEventWriter() = default;

void TFEventWriter::_setup_graph() {
  const std::string& dir = trainer().logdir();
  if (dir.empty()) {
    logger::warn("TFEventWriter: the trainer has no log directory; no event file is written");
    return;
  }
  make_dirs(dir);
  writer_ = std::make_unique<EventFileWriter>(dir);
}

void TFEventWriter::process_scalar(const std::string& name, double value) {
  if (writer_) writer_->add_scalar(name, value, trainer().global_step());
}

void TFEventWriter::_trigger_epoch() {
  if (writer_) writer_->flush();
}

void TFEventWriter::_after_train() {
  if (writer_) writer_->close();
}

std::vector<MonitorPtr> default_monitors() {
  return {std::make_shared<TFEventWriter>(), std::make_shared<JSONWriter>(),
          std::make_shared<ScalarPrinter>()};
}

}  // namespace spire
