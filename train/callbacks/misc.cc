// PeriodicTrigger, RunOp/RunUpdateOps, EstimatedTimeLeft, ThroughputTracker
// and the shared helpers declared in misc.h.
#include "train/callbacks/misc.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "core/ops/state_ops.h"
#include "core/logger.h"
#include "train/trainer.h"

namespace spire {

// ---- helpers ------------------------------------------------------------------------

std::string op_name_of(const std::string& tensor_name) {
  auto pos = tensor_name.rfind(':');
  if (pos == std::string::npos || pos + 1 == tensor_name.size()) return tensor_name;
  if (tensor_name.find_first_not_of("0123456789", pos + 1) != std::string::npos) return tensor_name;
  return tensor_name.substr(0, pos);
}

Output get_tensor_maybe_in_tower(Trainer& trainer, const std::string& name) {
  if (auto* tt = dynamic_cast<TowerTrainer*>(&trainer)) {
    bool has_towers = false;
    try {
      has_towers = !tt->towers().empty();
    } catch (const Error&) {
      has_towers = false;  // no tower function set
    }
    if (has_towers) {
      try {
        return tt->towers().front()->get_tensor(name);
      } catch (const Error&) {
        // fall through to the whole graph
      }
    }
  }
  try {
    return trainer.graph().output_by_name(name);
  } catch (const Error& e) {
    throw_error("tensor '", name, "' is neither in the main training tower nor in the graph (",
                e.what(), ")");
  }
}

std::string humanize_time_delta(double sec) {
  if (sec < 0) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.3g seconds", sec);
    return buf;
  }
  if (sec == 0) return "0 second";
  const int64_t s = static_cast<int64_t>(sec);
  double vals[4] = {static_cast<double>(s / 86400), static_cast<double>((s % 86400) / 3600),
                    static_cast<double>((s % 3600) / 60), static_cast<double>(s % 60)};
  if (sec < 60) vals[3] = sec;
  const char* units[4] = {"day", "hour", "minute", "second"};
  std::string out;
  for (int i = 0; i < 4; ++i) {
    if (vals[i] <= 0) continue;
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.3g %s%s", vals[i], units[i], vals[i] > 1 ? "s" : "");
    if (!out.empty()) out += ' ';
    out += buf;
  }
  return out;
}

// ---- ProxyCallback / PeriodicTrigger -------------------------------------------------------

ProxyCallback::ProxyCallback(CallbackPtr cb) : cb_(std::move(cb)) {
  SPIRE_CHECK(cb_, "ProxyCallback: null callback");
  chief_only_ = cb_->chief_only();
}

void ProxyCallback::_setup_graph() { cb_->setup_graph(trainer()); }

PeriodicTrigger::PeriodicTrigger(CallbackPtr cb, int64_t every_k_steps, int every_k_epochs,
                                 bool before_train)
    : ProxyCallback(std::move(cb)),
      step_k_(every_k_steps),
      epoch_k_(every_k_epochs),
      do_before_train_(before_train) {
  SPIRE_CHECK(step_k_ >= 0 && epoch_k_ >= 0, "PeriodicTrigger(", cb_->name(),
              "): every_k_steps and every_k_epochs must be >= 0, got ", step_k_, " and ", epoch_k_);
  SPIRE_CHECK(step_k_ > 0 || epoch_k_ > 0, "PeriodicTrigger(", cb_->name(),
              "): every_k_steps and every_k_epochs cannot both be 0");
}

void PeriodicTrigger::_before_train() {
  cb_->before_train();
  if (do_before_train_) cb_->trigger();
}

void PeriodicTrigger::_trigger_step() {
  cb_->trigger_step();
  if (step_k_ > 0 && trainer().global_step() % step_k_ == 0) cb_->trigger();
}

void PeriodicTrigger::_trigger_epoch() {
  if (epoch_k_ > 0 && trainer().epoch_num() % epoch_k_ == 0) cb_->trigger();
}

// ---- RunOp / RunUpdateOps -----------------------------------------------------------------------

RunOp::RunOp(OpBuilder op_builder, bool run_before, bool run_as_trigger, bool run_step, bool verbose)
    : builder_(std::move(op_builder)),
      run_before_(run_before),
      run_as_trigger_(run_as_trigger),
      run_step_(run_step),
      verbose_(verbose) {
  SPIRE_CHECK(static_cast<bool>(builder_), "RunOp: empty op builder");
  chief_only_ = false;
}

void RunOp::_setup_graph() {
  DefaultGraphGuard guard(trainer().graph());
  op_ = builder_();
  SPIRE_CHECK(op_, "RunOp: the op builder returned null");
  SPIRE_CHECK(op_->graph() == &trainer().graph(), "RunOp: the op ", op_->describe(),
              " is not in the trainer's graph");
}

void RunOp::run_now() {
  if (verbose_) logger::info("Running Op ", op_->name(), " ...");
  trainer().sess().run({}, {}, {op_});
}

void RunOp::_before_train() {
  if (run_before_) run_now();
}

void RunOp::_trigger() {
  if (run_as_trigger_) run_now();
}

SessionRunArgs RunOp::_before_run(SessionRunContext&) {
  if (!run_step_) return {};
  if (verbose_) logger::info("Running Op ", op_->name(), " ...");
  return {{}, {op_}, {}};
}

RunUpdateOps::RunUpdateOps(const std::string& collection)
    : RunOp(
          [collection]() -> Node* {
            Graph& g = default_graph();
            const std::string name =
                collection == GraphKeys::UPDATE_OPS ? std::string("UPDATE_OPS") : collection;
            std::vector<Node*> ops;
            for (const Output& o : g.get_collection(collection)) ops.push_back(o.node);
            NameScope top(g, "");
            if (ops.empty()) return ops::no_op("empty_update_ops", &g);
            logger::info("Applying collection ", name, " of ", ops.size(), " ops.");
            return ops::group(ops, "update_ops", &g);
          },
          /*run_before=*/false, /*run_as_trigger=*/false, /*run_step=*/true) {}

// ---- EstimatedTimeLeft --------------------------------------------------------------------------

EstimatedTimeLeft::EstimatedTimeLeft(int last_k_epochs, bool median)
    : last_k_(static_cast<size_t>(std::max(1, last_k_epochs))), median_(median) {}

void EstimatedTimeLeft::_before_train() { last_time_ = std::chrono::steady_clock::now(); }

void EstimatedTimeLeft::_trigger_epoch() {
  auto now = std::chrono::steady_clock::now();
  double duration = std::chrono::duration<double>(now - last_time_).count();
  last_time_ = now;
  times_.push_back(duration);
  while (times_.size() > last_k_) times_.pop_front();
  std::vector<double> t(times_.begin(), times_.end());
  double epoch_time;
  if (median_) {
    std::sort(t.begin(), t.end());
    size_t n = t.size();
    epoch_time = n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
  } else {
    epoch_time = std::accumulate(t.begin(), t.end(), 0.0) / static_cast<double>(t.size());
  }
  double left = (trainer().max_epoch() - trainer().epoch_num()) * epoch_time;
  last_estimate_ = left;
  if (left > 0) logger::info("Estimated Time Left: ", humanize_time_delta(left));
}

// ---- ThroughputTracker ------------------------------------------------------------------------------

ThroughputTracker::ThroughputTracker(int64_t samples_per_step) : samples_per_step_(samples_per_step) {
  SPIRE_CHECK(samples_per_step >= 0, "ThroughputTracker: samples_per_step must be >= 0, got ",
              samples_per_step);
  chief_only_ = false;
}

void ThroughputTracker::_before_train() {
  last_step_ = trainer().global_step();
  seconds_ = 0;
}

void ThroughputTracker::_before_epoch() { epoch_start_ = std::chrono::steady_clock::now(); }

void ThroughputTracker::_after_epoch() {
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start_).count();
}

void ThroughputTracker::_trigger_epoch() {
  const int64_t steps = trainer().global_step() - last_step_;
  const double secs = std::max(seconds_, 1e-9);
  const double steps_per_sec = static_cast<double>(steps) / secs;
  last_step_ = trainer().global_step();
  seconds_ = 0;
  if (samples_per_step_ == 0)
    trainer().monitors().put_scalar("Throughput (steps/sec)", steps_per_sec);
  else
    trainer().monitors().put_scalar("Throughput (samples/sec)",
                                    steps_per_sec * static_cast<double>(samples_per_step_));
}

}  // namespace spire
