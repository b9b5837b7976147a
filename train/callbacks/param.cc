// GraphVarParam and the hyper-parameter setters (see param.h).
#include "train/callbacks/param.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "layers/variables.h"
#include "train/callbacks/misc.h"
#include "core/logger.h"
#include "train/trainer.h"

namespace spire {

// ---- GraphVarParam ---------------------------------------------------------------------

GraphVarParam::GraphVarParam(std::string name) : readable_name_(op_name_of(name)) {
  SPIRE_CHECK(!readable_name_.empty(), "GraphVarParam: empty variable name");
}

void GraphVarParam::setup_graph(Trainer& trainer) {
  trainer_ = &trainer;
  for (const Variable& v : all_variables(&trainer.graph()))
    if (v.name() == readable_name_) var_ = v.node();
  SPIRE_CHECK(var_, "GraphVarParam: '", readable_name_, "' is not a variable in the graph");
  SPIRE_CHECK(var_->output_shape(0).num_elements() == 1,
              "GraphVarParam: variable '", readable_name_, "' must be a scalar, it has shape ",
              var_->output_shape(0).to_string());
}

void GraphVarParam::set_value(double v) {
  SPIRE_CHECK(var_, "GraphVarParam '", readable_name_, "': set_value before setup_graph");
  trainer_->session().set_variable_value(
      var_, Tensor::full(var_->output_dtype(0), var_->output_shape(0), v));
}

double GraphVarParam::get_value() const {
  SPIRE_CHECK(var_, "GraphVarParam '", readable_name_, "': get_value before setup_graph");
  Tensor t = trainer_->session().variable_value(var_);
  SPIRE_CHECK(t.defined(), "GraphVarParam: variable '", readable_name_, "' is not initialized");
  return t.item<double>();
}

// ---- HyperParamSetter --------------------------------------------------------------------

HyperParamSetter::HyperParamSetter(std::shared_ptr<HyperParam> param) : param_(std::move(param)) {
  SPIRE_CHECK(param_, "HyperParamSetter: null parameter");
  chief_only_ = false;
}

HyperParamSetter::HyperParamSetter(const std::string& var_name)
    : HyperParamSetter(std::make_shared<GraphVarParam>(var_name)) {}

void HyperParamSetter::_setup_graph() { param_->setup_graph(trainer()); }

std::optional<double> HyperParamSetter::get_value_to_set() { return _get_value_to_set(); }

void HyperParamSetter::apply_value(double v) {
  if (!last_value_ || *last_value_ != v) {
    if (trainer().epoch_num() != last_epoch_logged_) {  // at most one message per epoch
      std::ostringstream os;
      os.precision(6);
      os << std::fixed;
      if (!last_value_) {
        os << "[HyperParamSetter] At global_step=" << trainer().global_step() << ", "
           << param_->readable_name() << " is set to " << v;
      } else {
        os << "[HyperParamSetter] At global_step=" << trainer().global_step() << ", "
           << param_->readable_name() << " changes from " << *last_value_ << " to " << v;
      }
      logger::info(os.str());
    }
    last_epoch_logged_ = trainer().epoch_num();
  }
  last_value_ = v;
  param_->set_value(v);
  trainer().monitors().put_scalar(param_->readable_name(), v);
}

void HyperParamSetter::set_param() {
  std::optional<double> v = get_value_to_set();
  if (v) apply_value(*v);
}

void HyperParamSetter::_before_train() { set_param(); }
void HyperParamSetter::_trigger() { set_param(); }

// ---- ScheduledHyperParamSetter -------------------------------------------------------------

ScheduledHyperParamSetter::ScheduledHyperParamSetter(std::shared_ptr<HyperParam> param,
                                                     Schedule schedule, std::string interp,
                                                     bool step_based)
    : HyperParamSetter(std::move(param)), schedule_(std::move(schedule)), step_based_(step_based) {
  init(std::move(interp));
}

ScheduledHyperParamSetter::ScheduledHyperParamSetter(const std::string& var_name, Schedule schedule,
                                                     std::string interp, bool step_based)
    : HyperParamSetter(var_name), schedule_(std::move(schedule)), step_based_(step_based) {
  init(std::move(interp));
}

void ScheduledHyperParamSetter::init(std::string interp) {
  SPIRE_CHECK(interp.empty() || interp == "linear", "ScheduledHyperParamSetter: interp must be \"\" "
              "or \"linear\", got \"", interp, "\"");
  linear_ = interp == "linear";
  std::stable_sort(schedule_.begin(), schedule_.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
}

int64_t ScheduledHyperParamSetter::current_point() const {
  return step_based_ ? trainer().global_step() : trainer().epoch_num();
}

std::optional<double> ScheduledHyperParamSetter::value_at_point(int64_t point) const {
  bool have_last = false;
  int64_t laste = 0;
  double lastv = 0;
  int64_t e = 0;
  double v = 0;
  for (const auto& [pe, pv] : schedule_) {
    e = pe;
    v = pv;
    if (e == point) return v;  // exactly on a schedule point
    if (e > point) break;
    have_last = true;
    laste = e;
    lastv = v;
  }
  // Before the first point, or past the last one.
  if (!have_last || laste == e) return std::nullopt;
  if (!linear_) return std::nullopt;
  return static_cast<double>(point - laste) / static_cast<double>(e - laste) * (v - lastv) + lastv;
}

std::optional<double> ScheduledHyperParamSetter::value_in_effect(int64_t point) const {
  if (auto v = value_at_point(point)) return v;
  // Not on a point that sets a value: the last schedule point before `point`.
  std::optional<double> out;
  for (const auto& [e, v] : schedule_)
    if (e <= point) out = v;
  return out;
}

std::optional<double> ScheduledHyperParamSetter::_get_value_to_set() {
  return value_at_point(current_point());
}

void ScheduledHyperParamSetter::_before_train() {
  std::optional<double> v = value_in_effect(current_point());
  if (!v) return;
  double actual = get_current_value();
  if (!value_at_point(current_point()) && std::abs(actual - *v) > 1e-8 * std::max(1.0, std::abs(*v)))
    logger::info("[ScheduledHyperParamSetter] ", param_->readable_name(), " is ", actual,
                 " but the schedule prescribes ", *v, " at ", step_based_ ? "step " : "epoch ",
                 current_point(), "; setting it.");
  apply_value(*v);
}

void ScheduledHyperParamSetter::_trigger_epoch() {
  if (!step_based_) trigger();
}

void ScheduledHyperParamSetter::_trigger_step() {
  if (step_based_) trigger();
}

// ---- HyperParamSetterWithFunc ----------------------------------------------------------------

HyperParamSetterWithFunc::HyperParamSetterWithFunc(std::shared_ptr<HyperParam> param, Func func)
    : HyperParamSetter(std::move(param)), func_(std::move(func)) {
  SPIRE_CHECK(static_cast<bool>(func_), "HyperParamSetterWithFunc: empty function");
}

HyperParamSetterWithFunc::HyperParamSetterWithFunc(const std::string& var_name, Func func)
    : HyperParamSetter(var_name), func_(std::move(func)) {
  SPIRE_CHECK(static_cast<bool>(func_), "HyperParamSetterWithFunc: empty function");
}

std::optional<double> HyperParamSetterWithFunc::_get_value_to_set() {
  return func_(trainer().epoch_num(), get_current_value());
}

}  // namespace spire
