// Hyper-parameter setters (tensorpack's callbacks/param.py): a HyperParam
// is something settable during training (GraphVarParam: a scalar graph
// variable such as the optimizer's "learning_rate", set directly in the
// session); a HyperParamSetter callback decides its value in before_train
// and after each epoch (ScheduledHyperParamSetter: a piecewise-constant or
// linearly interpolated schedule; HyperParamSetterWithFunc: a function of
// the epoch and the old value). Each value set is also put to the monitors
// under the parameter's name.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "train/callback.h"

namespace spire {

/// Something a HyperParamSetter can set (tensorpack's HyperParam).
class HyperParam {
 public:
  virtual ~HyperParam() = default;
  /// Called from the setter's setup_graph (the graph is still mutable).
  virtual void setup_graph(Trainer& trainer) { (void)trainer; }
  virtual void set_value(double v) = 0;
  virtual double get_value() const = 0;
  /// The name shown in logs and used for the monitors' scalar.
  virtual std::string readable_name() const = 0;
};

/// A scalar variable of the trainer's graph, found by name ("learning_rate"
/// or "learning_rate:0") among all variables; set with
/// Session::set_variable_value (converted to the variable's dtype).
class GraphVarParam : public HyperParam {
 public:
  explicit GraphVarParam(std::string name);
  void setup_graph(Trainer& trainer) override;
  void set_value(double v) override;
  double get_value() const override;
  std::string readable_name() const override { return readable_name_; }

 private:
  std::string readable_name_;
  Trainer* trainer_ = nullptr;
  Node* var_ = nullptr;
};

/// Base of the setters: sets the parameter in before_train and on each
/// trigger (every epoch by default) to _get_value_to_set() when that has a
/// value; logs changes and puts the value as a scalar. Not chief-only.
class HyperParamSetter : public Callback {
 public:
  explicit HyperParamSetter(std::shared_ptr<HyperParam> param);
  /// Shorthand for a GraphVarParam.
  explicit HyperParamSetter(const std::string& var_name);
  HyperParam& param() const { return *param_; }
  /// The value to set now, or nullopt (nothing to set).
  std::optional<double> get_value_to_set();
  /// The parameter's current value.
  double get_current_value() const { return param_->get_value(); }

 protected:
  virtual std::optional<double> _get_value_to_set() = 0;
  void _setup_graph() override;
  void _before_train() override;
  void _trigger() override;
  /// Sets the parameter to get_value_to_set() when it has one.
  void set_param();
  /// Sets the parameter to `v` (logging a change) and puts it as a scalar.
  void apply_value(double v);

  std::shared_ptr<HyperParam> param_;
  std::optional<double> last_value_;
  int last_epoch_logged_ = -1;
};

/// Sets the parameter by a schedule of (point, value) pairs, points being
/// epochs (or global steps with step_based). As tensorpack: after epoch e
/// finishes (trigger_epoch, epoch_num == e) the value of point e is set, so
/// it applies from epoch e + 1; point 0 is set before training. Without
/// interpolation only exact points set a value; with interp = "linear" a
/// point between two schedule points gets the interpolated value (nothing
/// before the first point or after the last). Step-based: after the hooked
/// run that makes global_step == s, the value of point s is set.
/// before_train (also when resuming with starting_epoch > 1) sets the value
/// the schedule prescribes for the point just finished (epoch starting_epoch
/// - 1, or the restored global_step): the last point at or before it, or
/// the interpolation; tensorpack only warns when the current value differs.
class ScheduledHyperParamSetter : public HyperParamSetter {
 public:
  using Schedule = std::vector<std::pair<int64_t, double>>;
  ScheduledHyperParamSetter(std::shared_ptr<HyperParam> param, Schedule schedule,
                            std::string interp = "", bool step_based = false);
  ScheduledHyperParamSetter(const std::string& var_name, Schedule schedule, std::string interp = "",
                            bool step_based = false);
  /// The value the schedule sets exactly at `point` (tensorpack's
  /// _get_value_to_set_at_point), or nullopt.
  std::optional<double> value_at_point(int64_t point) const;
  /// The value in effect after `point`: value_at_point of the last point
  /// <= `point` that sets one, or nullopt before the schedule starts.
  std::optional<double> value_in_effect(int64_t point) const;

 protected:
  std::optional<double> _get_value_to_set() override;
  void _before_train() override;
  void _trigger_epoch() override;
  void _trigger_step() override;

 private:
  void init(std::string interp);
  int64_t current_point() const;
  Schedule schedule_;
  bool linear_ = false;
  bool step_based_;
};

/// Sets the parameter to func(epoch_num, current value) in before_train and
/// after each epoch (the value then applies to the next epoch).
class HyperParamSetterWithFunc : public HyperParamSetter {
 public:
  using Func = std::function<double(int epoch_num, double old_value)>;
  HyperParamSetterWithFunc(std::shared_ptr<HyperParam> param, Func func);
  HyperParamSetterWithFunc(const std::string& var_name, Func func);

 protected:
  std::optional<double> _get_value_to_set() override;

 private:
  Func func_;
};

}  // namespace spire
