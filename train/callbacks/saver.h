// Checkpoint callbacks (tensorpack's callbacks/saver.py): ModelSaver writes
// every variable to <dir>/model-<global_step>.safetensors on each trigger
// (every epoch by default), with global_step, epoch_num and the positions of
// the session's random streams in its metadata (kRngOffsetsMetadataKey,
// train/session_init.h), through save_checkpoint_in_dir (atomic write,
// `checkpoint` index updated, oldest files beyond max_to_keep deleted);
// MinSaver / MaxSaver copy ModelSaver's latest checkpoint to a fixed file
// whenever a monitored statistic reaches a new minimum / maximum.
//
// Registration order matters: MinSaver reads the statistic's latest value
// and ModelSaver's latest checkpoint at the same trigger, so register it
// AFTER the ModelSaver and after the callback that puts the statistic (e.g.
// {ModelSaver(), InferenceRunner(...), MinSaver("validation_error")}).
// Resume such a directory with AutoResumeTrainConfig (train/config.h) or
// CheckpointRestore (train/session_init.h).
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "train/callback.h"

namespace spire {

/// Saves the global variables (get_variable_values: not the replicas of
/// multi-device trainers) and the random streams' positions on each
/// trigger. Chief-only.
class ModelSaver : public Callback {
 public:
  /// `checkpoint_dir` "" = the trainer's logdir (an error when that is empty too).
  explicit ModelSaver(int max_to_keep = 10, std::string checkpoint_dir = "");
  /// The directory checkpoints go to (after setup_graph).
  const std::string& checkpoint_dir() const { return dir_; }
  /// Path of the last checkpoint this callback wrote ("" before the first).
  const std::string& last_saved() const { return last_saved_; }

 protected:
  void _setup_graph() override;
  void _trigger() override;

 private:
  int max_to_keep_;
  std::string dir_;
  std::string last_saved_;
};

/// After each trigger, reads the latest value of `monitor_stat` and, when it
/// is a new minimum (a new maximum with `reverse`), copies the latest
/// checkpoint of `checkpoint_dir` (default: the trainer's logdir, where
/// ModelSaver writes by default) to `<checkpoint_dir>/<filename>`
/// atomically. The default filename is "min-<stat>.safetensors" (or
/// "max-<stat>.safetensors"; '/' in the stat name becomes '_'). As
/// tensorpack, nothing is copied (with a warning) when the latest checkpoint
/// was not written at the global step the statistic was put at; no
/// checkpoint at all is an error. Chief-only.
class MinSaver : public Callback {
 public:
  explicit MinSaver(std::string monitor_stat, bool reverse = false, std::string filename = "",
                    std::string checkpoint_dir = "");
  /// (global_step, value) of the best value so far.
  const std::optional<std::pair<int64_t, double>>& best() const { return best_; }
  std::string name() const override { return reverse_ ? "MaxSaver" : "MinSaver"; }

 protected:
  void _setup_graph() override;
  void _trigger() override;

 private:
  void save();
  std::string stat_;
  bool reverse_;
  std::string filename_;
  std::string dir_;
  std::optional<std::pair<int64_t, double>> best_;
};

/// MinSaver with reverse = true: keeps the checkpoint of the maximum.
class MaxSaver : public MinSaver {
 public:
  explicit MaxSaver(std::string monitor_stat, std::string filename = "",
                    std::string checkpoint_dir = "")
      : MinSaver(std::move(monitor_stat), true, std::move(filename), std::move(checkpoint_dir)) {}
};

}  // namespace spire
