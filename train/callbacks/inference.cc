// ScalarStats, ClassificationError and InferenceRunner (see inference.h).
#include "train/callbacks/inference.h"

#include <chrono>
#include <optional>

#include "core/ops/state_ops.h"
#include "train/callbacks/misc.h"
#include "train/dataflow.h"
#include "core/logger.h"
#include "train/trainer.h"

namespace spire {

namespace {

// The inference tower `name` of the trainer's tower function: reused when
// the function already has it (it must not be a training tower), else built
// (placeholders "<name>/<input>", TowerContext(name, is_training = false))
// on `device` when given, reading the variables of variable scope `vs` (""
// = the main tower's). `who` names the callback in messages.
std::shared_ptr<TowerHandle> inference_tower(Trainer& trainer, const std::string& name,
                                             const std::optional<Device>& device,
                                             const std::string& vs, const char* who) {
  auto* tt = dynamic_cast<TowerTrainer*>(&trainer);
  SPIRE_CHECK(tt, who, " needs a TowerTrainer (a trainer with a tower function)");
  // Calling the tower function records a tower in it; TowerTrainer only
  // exposes it const (the object itself is not const).
  TowerFunc& tf = const_cast<TowerFunc&>(tt->tower_func());
  for (const auto& h : tf.towers())
    if (h->ns_name == name) {
      SPIRE_CHECK(!h->is_training, who, ": tower '", name, "' exists and is a training tower");
      return h;
    }
  Graph& g = trainer.graph();
  DefaultGraphGuard guard(g);
  logger::info("[", who, "] Building tower '", name, "' ...");
  std::optional<DeviceScope> on;
  if (device) on.emplace(g, *device);
  std::vector<Output> inputs;
  {
    NameScope ns(g, name + "/");
    for (const auto& d : tf.input_signature())
      inputs.push_back(ops::placeholder(d.dtype, d.shape, d.name, &g));
  }
  TowerContext ctx(name, false, vs, 0, 1, &g);
  tf(inputs);
  return tf.towers().back();
}

}  // namespace

// ---- ScalarStats ------------------------------------------------------------------------

ScalarStats::ScalarStats(std::vector<std::string> names, std::string prefix)
    : names_(std::move(names)), prefix_(std::move(prefix)) {
  SPIRE_CHECK(!names_.empty(), "ScalarStats: no tensor names");
}

void ScalarStats::on_fetches(const std::vector<Tensor>& values) {
  SPIRE_CHECK(values.size() == names_.size(), "ScalarStats: expected ", names_.size(),
              " values, got ", values.size());
  if (sums_.size() != names_.size()) sums_.assign(names_.size(), 0.0);
  for (size_t i = 0; i < values.size(); ++i) {
    SPIRE_CHECK(values[i].num_elements() == 1, "ScalarStats: '", names_[i],
                "' must be a scalar, got ", values[i].type_string());
    sums_[i] += values[i].item<double>();
  }
  ++count_;
}

std::vector<double> ScalarStats::accumulators() const {
  std::vector<double> v = sums_;
  v.push_back(static_cast<double>(count_));
  return v;
}

void ScalarStats::set_accumulators(const std::vector<double>& values) {
  SPIRE_CHECK(values.size() == names_.size() + 1, "ScalarStats::set_accumulators: expected ",
              names_.size() + 1, " values, got ", values.size());
  sums_.assign(values.begin(), values.end() - 1);
  count_ = static_cast<int64_t>(values.back());
}

std::map<std::string, double> ScalarStats::after_inference() {
  std::map<std::string, double> out;
  if (count_ == 0) return out;
  for (size_t i = 0; i < names_.size(); ++i) {
    std::string op = op_name_of(names_[i]);
    out[prefix_.empty() ? op : prefix_ + "_" + op] = sums_[i] / static_cast<double>(count_);
  }
  return out;
}

// ---- ClassificationError ------------------------------------------------------------------

ClassificationError::ClassificationError(std::string wrong_tensor_name, std::string summary_name)
    : wrong_name_(std::move(wrong_tensor_name)), summary_name_(std::move(summary_name)) {}

void ClassificationError::on_fetches(const std::vector<Tensor>& values) {
  SPIRE_CHECK(values.size() == 1, "ClassificationError: expected 1 value, got ", values.size());
  const Tensor& vec = values[0];
  SPIRE_CHECK(vec.rank() == 1, "ClassificationError: '", wrong_name_, "' is not a vector (got ",
              vec.type_string(), ")");
  for (int64_t i = 0; i < vec.num_elements(); ++i) wrong_ += vec.element_as_double(i);
  count_ += vec.num_elements();
}

void ClassificationError::set_accumulators(const std::vector<double>& values) {
  SPIRE_CHECK(values.size() == 2, "ClassificationError::set_accumulators: expected 2 values, got ", values.size());
  wrong_ = values[0];
  count_ = static_cast<int64_t>(values[1]);
}

std::map<std::string, double> ClassificationError::after_inference() {
  return {{summary_name_, count_ == 0 ? 0.0 : wrong_ / static_cast<double>(count_)}};
}

// ---- InferenceRunner -----------------------------------------------------------------------

InferenceRunner::InferenceRunner(std::shared_ptr<DataFlow> dataflow,
                                 std::vector<InferencerPtr> inferencers, std::string tower_name)
    : df_(std::move(dataflow)), infs_(std::move(inferencers)), tower_name_(std::move(tower_name)) {
  SPIRE_CHECK(df_, "InferenceRunner: null dataflow");
  for (const auto& inf : infs_) SPIRE_CHECK(inf, "InferenceRunner: null inferencer");
  SPIRE_CHECK(!tower_name_.empty(), "InferenceRunner: empty tower name");
}

void InferenceRunner::_setup_graph() {
  handle_ = inference_tower(trainer(), tower_name_, std::nullopt, "", "InferenceRunner");
  fetches_.clear();
  ranges_.clear();
  for (const auto& inf : infs_) {
    size_t begin = fetches_.size();
    for (const auto& n : inf->get_fetches()) fetches_.push_back(handle_->get_tensor(n));
    ranges_.emplace_back(begin, fetches_.size());
  }
}

void InferenceRunner::_before_train() {
  if (!df_->is_reset()) df_->reset_state();
  if (df_->has_size())
    logger::info("[InferenceRunner] Will eval ", df_->size(), " iterations");
  else
    logger::warn("[InferenceRunner] The inference dataflow has no size: one epoch of it is run");
}

void InferenceRunner::_trigger() {
  auto start = std::chrono::steady_clock::now();
  for (auto& inf : infs_) inf->before_inference();
  const auto& inputs = handle_->inputs;
  df_->begin_epoch();
  Datapoint dp;
  int64_t batches = 0;
  PlainSession sess = trainer().sess();
  while (df_->next(dp)) {
    SPIRE_CHECK(dp.size() == inputs.size(), "InferenceRunner: a datapoint has ", dp.size(),
                " components but the tower takes ", inputs.size(), " inputs");
    FeedDict feeds;
    for (size_t i = 0; i < inputs.size(); ++i) feeds.push_back({inputs[i], dp[i]});
    std::vector<Tensor> values = sess.run(fetches_, feeds);
    for (size_t k = 0; k < infs_.size(); ++k) {
      const auto& r = ranges_[k];
      infs_[k]->on_fetches(std::vector<Tensor>(values.begin() + static_cast<long>(r.first),
                                               values.begin() + static_cast<long>(r.second)));
    }
    ++batches;
  }
  combine_inferencers(infs_);
  for (auto& inf : infs_)
    for (const auto& [k, v] : inf->after_inference()) trainer().monitors().put_scalar(k, v);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  logger::info("[InferenceRunner] ", batches, " batches in ", secs, " sec.");
}

// ---- DataParallelInferenceRunner -------------------------------------------------------

DataParallelInferenceRunner::DataParallelInferenceRunner(std::shared_ptr<DataFlow> dataflow,
                                                         std::vector<InferencerPtr> inferencers,
                                                         std::vector<Device> devices)
    : df_(std::move(dataflow)), infs_(std::move(inferencers)), devices_(std::move(devices)) {
  SPIRE_CHECK(df_, "DataParallelInferenceRunner: null dataflow");
  for (const auto& inf : infs_) SPIRE_CHECK(inf, "DataParallelInferenceRunner: null inferencer");
  SPIRE_CHECK(!devices_.empty(), "DataParallelInferenceRunner: the device list is empty");
  for (size_t i = 0; i < devices_.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      SPIRE_CHECK(devices_[i] != devices_[j], "DataParallelInferenceRunner: device ",
                  devices_[i].to_string(), " is listed twice");
}

void DataParallelInferenceRunner::_setup_graph() {
  auto* tt = dynamic_cast<TowerTrainer*>(&trainer());
  SPIRE_CHECK(tt, "DataParallelInferenceRunner needs a TowerTrainer (a trainer with a tower function)");
  handles_.clear();
  for (size_t k = 0; k < devices_.size(); ++k)
    handles_.push_back(inference_tower(trainer(), "InferenceTower" + std::to_string(k), devices_[k],
                                       tt->variable_scope_on(devices_[k]),
                                       "DataParallelInferenceRunner"));
  logger::info("[DataParallelInferenceRunner] Built ", devices_.size(), " inference towers.");
  fetches_.assign(devices_.size(), {});
  ranges_.clear();
  for (const auto& inf : infs_) {
    const auto names = inf->get_fetches();
    size_t begin = fetches_[0].size();
    for (size_t k = 0; k < devices_.size(); ++k)
      for (const auto& n : names) fetches_[k].push_back(handles_[k]->get_tensor(n));
    ranges_.emplace_back(begin, fetches_[0].size());
  }
}

void DataParallelInferenceRunner::_before_train() {
  if (!df_->is_reset()) df_->reset_state();
}

void DataParallelInferenceRunner::_trigger() {
  auto start = std::chrono::steady_clock::now();
  for (auto& inf : infs_) inf->before_inference();
  df_->begin_epoch();
  PlainSession sess = trainer().sess();
  int64_t batches = 0;
  bool more = true;
  while (more) {
    // The next batches, one per device (fewer at the end of the data).
    std::vector<Datapoint> group;
    while (group.size() < devices_.size()) {
      Datapoint dp;
      if (!df_->next(dp)) {
        more = false;
        break;
      }
      group.push_back(std::move(dp));
    }
    if (group.empty()) break;
    FeedDict feeds;
    std::vector<Output> fetches;
    for (size_t k = 0; k < group.size(); ++k) {
      const auto& inputs = handles_[k]->inputs;
      SPIRE_CHECK(group[k].size() == inputs.size(), "DataParallelInferenceRunner: a datapoint has ",
                  group[k].size(), " components but the tower takes ", inputs.size(), " inputs");
      for (size_t i = 0; i < inputs.size(); ++i) feeds.push_back({inputs[i], group[k][i]});
      fetches.insert(fetches.end(), fetches_[k].begin(), fetches_[k].end());
    }
    std::vector<Tensor> values = sess.run(fetches, feeds);
    const size_t per_device = fetches_[0].size();
    for (size_t k = 0; k < group.size(); ++k) {
      for (size_t j = 0; j < infs_.size(); ++j) {
        const auto& r = ranges_[j];
        auto first = values.begin() + static_cast<long>(k * per_device + r.first);
        infs_[j]->on_fetches(std::vector<Tensor>(first, first + static_cast<long>(r.second - r.first)));
      }
      ++batches;
    }
  }
  for (auto& inf : infs_)
    for (const auto& [k, v] : inf->after_inference()) trainer().monitors().put_scalar(k, v);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  logger::info("[DataParallelInferenceRunner] ", batches, " batches on ", devices_.size(),
               " devices in ", secs, " sec.");
}

}  // namespace spire
