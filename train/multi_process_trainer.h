// MultiProcessTrainer: what a trainer that runs as one process of several
// (HorovodTrainer and the parameter-server trainers of dist/trainers/) adds
// to the base Trainer's run. Such a trainer derives from a Trainer class and
// from this interface; the base Trainer finds the interface on itself and
// calls its hooks at fixed points of initialize(), train() and main_loop().
// Single-process trainers (SimpleTrainer, the multi-device trainers) do not
// implement it, and the base Trainer knows nothing of any subclass.
//
// What every trainer needs stays in Trainer: is_chief() (tensorpack's
// Trainer.is_chief: chief-only callbacks and the session initializer run on
// the chief alone, and only the chief writes the log directory) and
// on_session_created() (a trainer checks or prepares its session).
#pragma once

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "core/session.h"

namespace spire {

class Trainer;

class MultiProcessTrainer {
 public:
  virtual ~MultiProcessTrainer();

  /// The chief's `values` on every process: each process passes its own
  /// and gets the chief's back (e.g. the starting epoch the chief resumes
  /// from). Every process that trains must call it at the same point, with
  /// as many values; `what` names the call in errors.
  std::vector<int64_t> broadcast_from_chief(const std::vector<int64_t>& values, const std::string& what);
  int64_t broadcast_from_chief(int64_t value, const std::string& what);

  /// This process in log lines, e.g. "HorovodTrainer: rank 1".
  virtual std::string process_name() const = 0;
  /// This process's rank among all of the job's processes (0 = the first).
  virtual int process_rank() const = 0;

 protected:
  /// How broadcast_from_chief travels (a collective, or a parameter
  /// server's relay).
  virtual std::vector<int64_t> chief_values(const std::vector<int64_t>& values, const std::string& what) = 0;

  /// Called by initialize() after the session initializer ran (on the chief
  /// alone: its restore), before the graph is finalized: every process
  /// takes the chief's values of the variables here.
  virtual void after_session_init(Session& session) = 0;
  /// Called when an error (not StopTraining) ends initialize(), train()'s
  /// setup or the main loop, before it propagates: the trainer tells the
  /// other processes, so they stop at once instead of waiting for this one.
  virtual void on_failure(const std::exception& error) = 0;
  /// Called by train() after initialize(): a process that serves the others
  /// instead of training (a parameter server) serves here until they finish
  /// and returns true; train() then returns without running the loop or any
  /// callback. Errors go through on_failure.
  virtual bool run_service() { return false; }
  /// Called when the main loop ended without an error (also after
  /// StopTraining), after the callbacks' after_train: e.g. a worker tells
  /// the parameter servers it is done.
  virtual void on_main_loop_finished() {}
  /// Called by every process at each step and epoch boundary of the main loop with whether
  /// this process was asked to stop (a StopTraining since the last boundary); returns whether
  /// any process was, so that all stop at the same boundary and end cleanly. The default
  /// (processes that stop through their own protocol, e.g. the parameter-server workers):
  /// this process's own answer.
  virtual bool agree_to_stop(bool stopping) { return stopping; }

 private:
  friend class Trainer;
  /// Makes this process run the chief's loop (steps per epoch, first and
  /// last epoch: e.g. the epoch the chief resumes from), logging where it
  /// differs from the one it was given. Called by train() before main_loop.
  void synchronize_loop(int64_t& steps_per_epoch, int& starting_epoch, int& max_epoch);
  /// Makes this process's random streams continue where the chief's are
  /// (Session::rng_offsets: the positions the chief restored from a
  /// checkpoint), by node name; nodes the chief has and this process lacks
  /// are skipped. Called by train() after synchronize_loop.
  void synchronize_rng(Session& session);
};

}  // namespace spire
