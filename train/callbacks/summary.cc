// add_moving_summary, MovingAverageSummary and MergeAllSummaries (see summary.h).
#include "train/callbacks/summary.h"

#include <regex>

#include "core/ops/math_ops.h"
#include "core/ops/state_ops.h"
#include "layers/tower.h"
#include "train/callbacks/misc.h"
#include "core/logger.h"
#include "train/trainer.h"

namespace spire {

namespace {

// Per-graph record of what add_moving_summary made (Graph::extension).
struct MovingSummaryRegistry {
  std::vector<MovingSummary> items;
};

// tensorpack's re.sub("tower[0-9]+/", "", name): every tower prefix, anywhere in the name.
std::string remove_tower_names(const std::string& name) {
  static const std::regex tower_re("tower[0-9]+/");
  return std::regex_replace(name, tower_re, "");
}

}  // namespace

std::string summary_name_of(const std::string& tensor_name) {
  std::string n = remove_tower_names(op_name_of(tensor_name));
  const std::string suffix = "-summary";
  if (n.size() > suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0)
    n = n.substr(0, n.size() - suffix.size());
  return n;
}

std::vector<MovingSummary> moving_summaries(Graph& g) {
  return g.extension<MovingSummaryRegistry>().items;
}

std::vector<Output> add_moving_summary(const std::vector<Output>& tensors, double decay,
                                       const std::string& collection) {
  if (tensors.empty()) return {};
  SPIRE_CHECK(decay > 0 && decay < 1, "add_moving_summary: decay must be in (0, 1), got ", decay);
  for (const Output& t : tensors) SPIRE_CHECK(t.valid(), "add_moving_summary: invalid tensor");
  Graph& g = *tensors.front().graph();
  for (const Output& t : tensors) {
    SPIRE_CHECK(t.graph() == &g, "add_moving_summary: tensors from different graphs");
    SPIRE_CHECK(t.shape().rank() == 0, "add_moving_summary() only accepts scalar tensors, got '",
                t.name(), "' of shape ", t.shape().to_string());
  }
  TowerContext* ctx = get_current_tower_context(&g);
  if (ctx && !ctx->is_main_training_tower()) return {};
  if (current_variable_scope(&g).reuse) {
    logger::warn("add_moving_summary() called under a reusing variable scope, ignored.");
    return {};
  }

  auto& registry = g.extension<MovingSummaryRegistry>();
  DefaultGraphGuard guard(g);
  std::vector<Output> updates;
  for (Output c : tensors) {
    const std::string name = remove_tower_names(c.node->name());
    bool seen = false;
    for (const auto& s : registry.items)
      if (s.name == name) {
        logger::warn("add_moving_summary: '", name, "' is already summarized; ignored.");
        updates.push_back(s.update);
        seen = true;
      }
    if (seen) continue;

    NameScope top(g, "");
    if (!is_floating(c.dtype())) c = ops::cast(c, DType::F32);
    const DType dt = c.dtype();
    Output ema, biased, local_step;
    {
      VariableScopeGuard root(VariableScope{}, Reuse::kInherit, &g);
      VariableScopeGuard vs("EMA", Reuse::kInherit, nullptr, &g);
      ema = get_variable(name, Shape{}, dt, init::zeros(), false).value;
      biased = get_variable(name + "/biased", Shape{}, dt, init::zeros(), false).value;
      local_step = get_variable(name + "/local_step", Shape{}, dt, init::zeros(), false).value;
    }
    Output update;
    {
      NameScope ns(g, "EMA/");
      // TF's assign_moving_average(ema, c, decay, zero_debias=True).
      Output biased_new = ops::assign_sub(biased, (biased - c) * (1.0 - decay));
      Output step_new = ops::assign_add(local_step, ops::scalar(1.0, dt, &g));
      Output bias_factor = 1.0 - ops::pow(ops::scalar(decay, dt, &g), step_new);
      update = ops::assign(ema, biased_new / bias_factor, name + "_EMA_apply");
    }
    g.add_to_collection(collection, update);
    registry.items.push_back({name, ema, update, collection});
    updates.push_back(update);
  }
  return updates;
}

// ---- MovingAverageSummary ------------------------------------------------------------------

MovingAverageSummary::MovingAverageSummary(std::string collection)
    : collection_(std::move(collection)) {}

void MovingAverageSummary::_setup_graph() {
  Graph& g = trainer().graph();
  std::vector<Node*> ops;
  for (const Output& o : g.get_collection(collection_)) ops.push_back(o.node);
  logger::info("[MovingAverageSummary] ", ops.size(), " operations in collection '", collection_,
               "' will be run with training steps.");
  summaries_.clear();
  for (const auto& s : moving_summaries(g))
    if (s.collection == collection_) summaries_.push_back(s);
  if (ops.empty()) return;
  DefaultGraphGuard guard(g);
  NameScope top(g, "");
  op_ = ops::group(ops, "maintain_moving_average_summary", &g);
}

SessionRunArgs MovingAverageSummary::_before_run(SessionRunContext&) {
  if (!op_) return {};
  return {{}, {op_}, {}};
}

void MovingAverageSummary::_trigger_epoch() {
  for (const auto& s : summaries_) {
    Tensor v = trainer().session().variable_value(s.ema.node);
    if (v.defined()) trainer().monitors().put_scalar(s.name, v.item<double>());
  }
}

// ---- MergeAllSummaries ------------------------------------------------------------------------

MergeAllSummaries::MergeAllSummaries(int64_t period, bool run_alone, std::string key)
    : period_(period), run_alone_(run_alone), key_(std::move(key)) {
  SPIRE_CHECK(period_ >= 0, "MergeAllSummaries: period must be >= 0, got ", period_);
}

void MergeAllSummaries::_setup_graph() {
  tensors_.clear();
  names_.clear();
  for (const Output& o : trainer().graph().get_collection(key_)) {
    const Shape& s = o.shape();
    if (!(s.is_fully_defined() && s.num_elements() == 1)) {
      logger::warn("MergeAllSummaries: '", o.name(), "' in collection '", key_,
                   "' is not a scalar (shape ", s.to_string(), "); skipped.");
      continue;
    }
    tensors_.push_back(o);
    names_.push_back(summary_name_of(o.name()));
  }
  logger::info("Summarize the ", tensors_.size(), " scalars of collection '", key_, "'.");
}

bool MergeAllSummaries::need_run() const {
  const int64_t local = trainer().local_step();
  if (local == trainer().steps_per_epoch() - 1) return true;
  return period_ > 0 && (local + 1) % period_ == 0;
}

SessionRunArgs MergeAllSummaries::_before_run(SessionRunContext&) {
  if (run_alone_ || tensors_.empty() || !need_run()) return {};
  return {tensors_, {}, {}};
}

void MergeAllSummaries::_after_run(SessionRunContext&, const SessionRunValues& values) {
  if (!values.results.empty()) put(values.results);
}

void MergeAllSummaries::put(const std::vector<Tensor>& values) {
  for (size_t i = 0; i < values.size() && i < names_.size(); ++i)
    trainer().monitors().put_scalar(names_[i], values[i].item<double>());
}

void MergeAllSummaries::_trigger_step() {
  if (!run_alone_ || tensors_.empty() || period_ == 0) return;
  if ((trainer().local_step() + 1) % period_ == 0) put(trainer().sess().run(tensors_));
}

void MergeAllSummaries::_trigger_epoch() {
  if (run_alone_ && !tensors_.empty()) put(trainer().sess().run(tensors_));
}

}  // namespace spire
