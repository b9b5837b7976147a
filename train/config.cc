// TrainConfig, launch_train_with_config and AutoResumeTrainConfig (see config.h).
#include "train/config.h"

#include <algorithm>

#include "train/callbacks.h"
#include "train/checkpoint.h"
#include "train/dataflow.h"
#include "train/file_util.h"
#include "train/input_source.h"
#include "core/logger.h"
#include "train/model_desc.h"
#include "train/session_init.h"

namespace spire {

void launch_train_with_config(const TrainConfig& config, SingleCostTrainer& trainer) {
  SPIRE_CHECK(config.model, "launch_train_with_config: TrainConfig.model is required");
  SPIRE_CHECK(config.dataflow || config.data,
              "launch_train_with_config: TrainConfig needs a dataflow or an input source (data)");
  SPIRE_CHECK(!(config.dataflow && config.data),
              "launch_train_with_config: TrainConfig has both a dataflow and an input source "
              "(data); give only one");
  SPIRE_CHECK(config.starting_epoch >= 1, "launch_train_with_config: starting_epoch must be >= 1, got ",
              config.starting_epoch);
  SPIRE_CHECK(config.steps_per_epoch >= 0, "launch_train_with_config: steps_per_epoch must be >= 0, got ",
              config.steps_per_epoch);
  for (const auto& cb : config.callbacks)
    SPIRE_CHECK(cb, "launch_train_with_config: a null callback in TrainConfig.callbacks");
  if (config.starting_epoch > config.max_epoch)
    logger::warn("launch_train_with_config: starting_epoch ", config.starting_epoch,
                 " is after max_epoch ", config.max_epoch, "; no epoch will run.");

  if (!config.logdir.empty()) trainer.set_logdir(config.logdir);
  // tensorpack: a dataflow becomes a QueueInput, wrapped in a StagingInput
  // for trainers with several towers (each tower dequeues its own batch).
  const int towers = std::max<int>(1, static_cast<int>(trainer.tower_devices().size()));
  std::shared_ptr<InputSource> input = config.data;
  if (!input) {
    std::shared_ptr<DataFlow> df = config.dataflow;
    const auto [shard, shards] = trainer.data_shard();
    if (shards > 1) {
      // Distributed trainers: each process reads its own shard.
      df = std::make_shared<ShardData>(df, shard, shards);
      logger::info("launch_train_with_config: this process reads shard ", shard, " of ", shards,
                   " of the dataflow");
    }
    auto queue = std::make_shared<QueueInput>(df);
    if (towers > 1) input = std::make_shared<StagingInput>(queue);
    else input = queue;
  }
  int64_t steps = config.steps_per_epoch;
  if (steps == 0) {
    try {
      steps = input->size();
    } catch (const Error& e) {
      throw_error("launch_train_with_config: steps_per_epoch is 0 and the input has no size (",
                  e.what(), "); set TrainConfig.steps_per_epoch");
    }
    SPIRE_CHECK(steps > 0, "launch_train_with_config: the input is empty (size 0)");
    // Every tower takes its own datapoint per step: an epoch of K towers is
    // size / K steps, so it still passes over the data once.
    if (towers > 1) {
      steps = std::max<int64_t>(1, steps / towers);
      logger::info("launch_train_with_config: ", towers, " towers take one datapoint each per "
                   "step: steps_per_epoch = ", steps);
    }
  }

  std::shared_ptr<ModelDesc> model = config.model;
  trainer.setup_graph(
      model->get_input_signature(), input,
      [model](const std::vector<Output>& in) { return model->build_graph(in); },
      [model]() { return model->get_optimizer(); });

  std::vector<CallbackPtr> callbacks = config.callbacks;
  std::vector<CallbackPtr> extra = config.extra_callbacks ? *config.extra_callbacks : default_callbacks();
  callbacks.insert(callbacks.end(), extra.begin(), extra.end());
  std::vector<MonitorPtr> monitors = config.monitors ? *config.monitors : default_monitors();
  trainer.train(callbacks, monitors, config.session_creator, config.session_init, steps,
                config.starting_epoch, config.max_epoch);
}

TrainConfig AutoResumeTrainConfig(TrainConfig config, bool always_resume) {
  const std::string& dir = config.logdir;
  if (dir.empty()) return config;
  const bool consider_init = always_resume || !config.session_init;
  const bool consider_epoch = always_resume || config.starting_epoch == 1;
  if (!consider_init && !consider_epoch) return config;

  const bool has_index = path_exists(join_path(dir, kCheckpointIndexName));
  const bool has_stats_file = path_exists(join_path(dir, JSONWriter::kFilename));
  const int last_epoch = has_stats_file ? JSONWriter::load_existing_epoch_number(dir) : -1;
  const bool has_stats = last_epoch >= 0;
  if (has_index && !has_stats)
    throw_error("AutoResumeTrainConfig: '", dir, "' has a checkpoint index ('",
                kCheckpointIndexName, "') but ",
                has_stats_file ? "its stats.json records no epoch" : "no stats.json",
                ", so the epoch to resume from is unknown; restore stats.json or remove the "
                "checkpoints to start over");
  if (has_stats && !has_index)
    throw_error("AutoResumeTrainConfig: '", dir, "' has a stats.json (last epoch ", last_epoch,
                ") but no checkpoint index ('", kCheckpointIndexName,
                "'), so there are no weights to resume from; restore the checkpoints or remove "
                "stats.json to start over");
  if (!has_index) return config;

  if (consider_init) {
    const std::string latest = latest_checkpoint(dir);
    SPIRE_CHECK(!latest.empty(), "AutoResumeTrainConfig: the checkpoint index of '", dir,
                "' names no checkpoint");
    if (config.session_init)
      logger::info("Found checkpoint at ", latest, ". session_init will be overwritten.");
    else
      logger::info("Will load checkpoint at ", latest, ".");
    config.session_init = std::make_shared<CheckpointRestore>(latest);
  }
  if (consider_epoch) {
    config.starting_epoch = last_epoch + 1;
    logger::info("Found history statistics from JSON. Setting starting_epoch to ",
                 config.starting_epoch, ".");
  }
  return config;
}

}  // namespace spire
