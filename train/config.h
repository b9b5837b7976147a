// The config layer of training (tensorpack's train/config.py and
// interface.py): TrainConfig gathers a model, its data, callbacks, monitors
// and loop settings; launch_train_with_config() builds the graph of a
// SingleCostTrainer from it and trains; AutoResumeTrainConfig() turns a
// config into one that continues an interrupted run from its log directory
// (latest checkpoint + the epoch after the last one in stats.json), drawing
// the same random numbers and reading the same data as the uninterrupted run.
//
//   TrainConfig cfg;
//   cfg.model = std::make_shared<MyModel>();
//   cfg.dataflow = std::make_shared<BatchData>(train_df, 64);
//   cfg.callbacks = {std::make_shared<ModelSaver>(),
//                    std::make_shared<InferenceRunner>(val_df, std::make_shared<ScalarStats>("cost"))};
//   cfg.max_epoch = 10;
//   cfg.logdir = "train_log/mnist";
//   SimpleTrainer trainer;
//   launch_train_with_config(AutoResumeTrainConfig(cfg), trainer);
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "train/callback.h"
#include "train/monitor.h"
#include "train/trainer.h"

namespace spire {

class DataFlow;
class InputSource;
class ModelDesc;
class SessionInit;

struct TrainConfig {
  /// The training data: exactly one of `dataflow` (fed through a
  /// QueueInput) or `data` (any InputSource).
  std::shared_ptr<DataFlow> dataflow;
  std::shared_ptr<InputSource> data;
  std::shared_ptr<ModelDesc> model;
  std::vector<CallbackPtr> callbacks;
  /// nullopt: default_callbacks() (MovingAverageSummary, ProgressBar,
  /// MergeAllSummaries, RunUpdateOps); a list replaces them.
  std::optional<std::vector<CallbackPtr>> extra_callbacks;
  /// nullopt: default_monitors() (TFEventWriter, JSONWriter, ScalarPrinter);
  /// a list (even empty) replaces them.
  std::optional<std::vector<MonitorPtr>> monitors;
  std::shared_ptr<SessionInit> session_init;
  /// Empty: new_session_creator().
  SessionCreator session_creator;
  int starting_epoch = 1;
  /// 0: the size of the dataflow / input source divided by the trainer's
  /// number of towers (each tower takes its own datapoint per step, so an
  /// epoch passes over the data once).
  int64_t steps_per_epoch = 0;
  int max_epoch = 99999;
  /// The trainer's log directory ("" keeps the trainer's).
  std::string logdir;
};

/// Checks `config` (a model, exactly one of dataflow/data, sane epochs),
/// sets the trainer's logdir, sets up the trainer's graph from the model
/// (input signature, build_graph as the cost, get_optimizer) on the input
/// (config.data, or QueueInput(config.dataflow)) and trains with the
/// config's callbacks + extra callbacks, monitors, session init and loop
/// settings. A dataflow is fed through QueueInput, wrapped in StagingInput
/// when the trainer has several towers, and read through ShardData when the
/// trainer trains on a shard of the data (SingleCostTrainer::data_shard()).
/// Throws spire::Error on an invalid config.
void launch_train_with_config(const TrainConfig& config, SingleCostTrainer& trainer);

/// tensorpack's AutoResumeTrainConfig: `config` adjusted to resume from its
/// logdir. When the logdir holds both a checkpoint index ("checkpoint") and
/// a stats.json with a recorded epoch, session_init becomes
/// CheckpointRestore(<latest checkpoint>) and starting_epoch the last
/// recorded epoch_num + 1. When only one of the two exists, throws
/// spire::Error naming the missing one (the run cannot be resumed
/// consistently); with neither (or no logdir) `config` is returned
/// unchanged. With always_resume = false, a config that already has a
/// session_init keeps it and a starting_epoch other than 1 is kept (only
/// what the config leaves unset is resumed). The resumed run continues
/// exactly where the interrupted one was: the checkpoint restores the
/// variables (global_step among them) and the random streams' positions
/// (CheckpointRestore), and the input continues the data at the restored
/// global_step (FeedInput::reset_state_at_step: whole passes skipped with
/// DataFlow::set_next_epoch, the rest read and dropped).
TrainConfig AutoResumeTrainConfig(TrainConfig config, bool always_resume = true);

}  // namespace spire
