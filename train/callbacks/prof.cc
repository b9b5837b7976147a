// GraphProfiler and Timeline (see prof.h).
#include "train/callbacks/prof.h"

#include "core/error.h"
#include "train/file_util.h"
#include "train/multi_process_trainer.h"
#include "train/timeline.h"
#include "train/trainer.h"

namespace spire {
namespace {

/// {rank, "rank r" or "process"} of the trainer's process.
std::pair<int, std::string> process_of(Trainer& trainer) {
  if (auto* mp = dynamic_cast<MultiProcessTrainer*>(&trainer))
    return {mp->process_rank(), mp->process_name()};
  return {0, "process"};
}

/// `dir`, or the job's log directory (on every process: the files are named per rank).
std::string resolve_dir(const std::string& dir, Trainer& trainer, const std::string& who) {
  std::string d = dir.empty() ? trainer.job_logdir() : dir;
  SPIRE_CHECK(!d.empty(), who,
              ": no directory for the trace files (give one, or set the trainer's logdir)");
  make_dirs(d);
  return d;
}

}  // namespace

GraphProfiler::GraphProfiler(TraceWindow window, std::string dir)
    : window_(window), dir_(std::move(dir)) {}

void GraphProfiler::_setup_graph() { dir_ = resolve_dir(dir_, trainer(), name()); }

SessionRunArgs GraphProfiler::_before_run(SessionRunContext&) {
  const int64_t step = trainer().global_step() + 1;
  tracing_step_ = window_.contains(step) ? step : -1;
  SessionRunArgs args;
  args.trace = tracing_step_ >= 0;
  return args;
}

void GraphProfiler::_after_run(SessionRunContext&, const SessionRunValues& values) {
  if (tracing_step_ < 0 || !values.step_stats) return;
  const auto [rank, process] = process_of(trainer());
  const bool multi = dynamic_cast<MultiProcessTrainer*>(&trainer()) != nullptr;
  const std::string file = "chrome-trace-" + std::to_string(tracing_step_) +
                           (multi ? "-rank" + std::to_string(rank) : "") + ".json";
  const std::string path = join_path(dir_, file);
  write_chrome_trace(path, {*values.step_stats}, rank, process);
  written_.push_back(path);
  tracing_step_ = -1;
}

Timeline::Timeline(TraceWindow window, std::string dir) : window_(window), dir_(std::move(dir)) {
  chief_only_ = false;
}

void Timeline::_setup_graph() {
  dir_ = resolve_dir(dir_, trainer(), name());
  std::tie(rank_, process_) = process_of(trainer());
  path_ = join_path(dir_, "timeline-rank" + std::to_string(rank_) + ".json");
}

SessionRunArgs Timeline::_before_run(SessionRunContext&) {
  step_ = trainer().global_step() + 1;
  tracing_ = !written_ && window_.contains(step_);
  SessionRunArgs args;
  args.trace = tracing_;
  return args;
}

void Timeline::_after_run(SessionRunContext&, const SessionRunValues& values) {
  if (!tracing_ || !values.step_stats) return;
  steps_.push_back(*values.step_stats);
  if (window_.num_steps > 0 && step_ + 1 >= window_.first_step + window_.num_steps) flush();
}

void Timeline::_after_train() { flush(); }

void Timeline::flush() {
  if (written_ || steps_.empty()) return;
  write_chrome_trace(path_, steps_, rank_, process_);
  written_ = true;
  steps_.clear();
}

}  // namespace spire
