// Profiling callbacks (tensorpack's callbacks/prof.py, Horovod's timeline): they ask the
// session to trace chosen training steps (SessionRunArgs::trace; see core/step_stats.h) and
// write the traces as Chrome trace JSON (train/timeline.h) that Perfetto and chrome://tracing
// open: one row per executor lane (device), one box per executed node, and the collectives'
// own wait/transfer events where the kernels add them.
//
// Steps are numbered as the global step they make (1 for the first step of a fresh run).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/step_stats.h"
#include "train/callback.h"

namespace spire {

/// Which steps a profiling callback traces: global steps [first_step, first_step + num_steps);
/// num_steps <= 0 traces every step from first_step on.
struct TraceWindow {
  int64_t first_step = 1;
  int64_t num_steps = 1;
  bool contains(int64_t step) const {
    return step >= first_step && (num_steps <= 0 || step < first_step + num_steps);
  }
};

/// tensorpack's GraphProfiler(dump_tracing=True): writes each traced step as
/// `chrome-trace-<step>.json` (with `-rank<r>` before `.json` on a process of a multi-process
/// trainer) in `dir` ("" = the job's log directory, Trainer::job_logdir). Chief-only, as in
/// tensorpack; set chief_only(false) to profile every rank.
class GraphProfiler : public Callback {
 public:
  explicit GraphProfiler(TraceWindow window = {}, std::string dir = "");
  /// The files written so far.
  const std::vector<std::string>& written() const { return written_; }

 protected:
  void _setup_graph() override;
  SessionRunArgs _before_run(SessionRunContext& ctx) override;
  void _after_run(SessionRunContext& ctx, const SessionRunValues& values) override;

 private:
  TraceWindow window_;
  std::string dir_;
  int64_t tracing_step_ = -1;  // the step being traced, -1 when none
  std::vector<std::string> written_;
};

/// Horovod's timeline: traces a window of steps and writes them together, when the window
/// ends (or training does), as one file per process: `<dir>/timeline-rank<r>.json` (rank 0 for
/// single-process trainers). Runs on every process (not chief-only); `dir` "" = the job's log
/// directory (Trainer::job_logdir, which every process knows).
class Timeline : public Callback {
 public:
  explicit Timeline(TraceWindow window, std::string dir = "");
  /// The file this process writes (after setup_graph).
  const std::string& path() const { return path_; }

 protected:
  void _setup_graph() override;
  SessionRunArgs _before_run(SessionRunContext& ctx) override;
  void _after_run(SessionRunContext& ctx, const SessionRunValues& values) override;
  void _after_train() override;

 private:
  void flush();
  TraceWindow window_;
  std::string dir_;
  std::string path_;
  int rank_ = 0;
  std::string process_;
  int64_t step_ = 0;  // the step of the current run
  bool tracing_ = false;
  bool written_ = false;
  std::vector<StepStats> steps_;
};

}  // namespace spire
