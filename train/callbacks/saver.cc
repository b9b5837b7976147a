// ModelSaver and MinSaver/MaxSaver (see saver.h).
#include "train/callbacks/saver.h"

#include <cmath>

#include "train/checkpoint.h"
#include "train/file_util.h"
#include "core/logger.h"
#include "train/session_init.h"
#include "train/trainer.h"

namespace spire {

// ---- ModelSaver ----------------------------------------------------------------------

ModelSaver::ModelSaver(int max_to_keep, std::string checkpoint_dir)
    : max_to_keep_(max_to_keep), dir_(std::move(checkpoint_dir)) {}

void ModelSaver::_setup_graph() {
  if (dir_.empty()) dir_ = trainer().logdir();
  SPIRE_CHECK(!dir_.empty(), "ModelSaver: no checkpoint directory (give one, or set the "
              "trainer's logdir)");
  make_dirs(dir_);
}

void ModelSaver::_trigger() {
  const int64_t step = trainer().global_step();
  try {
    // The random streams' positions too, so a resumed run draws what this one goes on to draw.
    std::map<std::string, std::string> meta = {{"global_step", std::to_string(step)},
                                               {"epoch_num", std::to_string(trainer().epoch_num())},
                                               {kRngOffsetsMetadataKey, encode_rng_offsets(trainer().session())}};
    last_saved_ = save_checkpoint_in_dir(dir_, "model", step, get_variable_values(trainer().session()),
                                         max_to_keep_, meta);
    logger::info("Model saved to ", last_saved_, ".");
  } catch (const Error& e) {
    // As tensorpack: a failed save (disk full, permissions) is logged and training goes on.
    logger::error("Exception in ModelSaver: ", e.what());
  }
}

// ---- MinSaver / MaxSaver ----------------------------------------------------------------

MinSaver::MinSaver(std::string monitor_stat, bool reverse, std::string filename,
                   std::string checkpoint_dir)
    : stat_(std::move(monitor_stat)),
      reverse_(reverse),
      filename_(std::move(filename)),
      dir_(std::move(checkpoint_dir)) {
  SPIRE_CHECK(!stat_.empty(), name(), ": empty monitor_stat");
  if (filename_.empty()) {
    std::string s = stat_;
    for (char& c : s)
      if (c == '/') c = '_';
    filename_ = (reverse_ ? "max-" : "min-") + s + ".safetensors";
  }
  SPIRE_CHECK(filename_.find('/') == std::string::npos, name(), ": filename '", filename_,
              "' must be a plain file name (it goes into the checkpoint directory)");
}

void MinSaver::_setup_graph() {
  if (dir_.empty()) dir_ = trainer().logdir();
  SPIRE_CHECK(!dir_.empty(), name(), ": no checkpoint directory (give one, or set the trainer's logdir)");
}

void MinSaver::_trigger() {
  auto history = trainer().monitors().get_history(stat_);
  if (history.empty()) return;
  const auto [step, value] = history.back();
  if (std::isnan(value)) return;
  bool better = !best_ || (reverse_ ? value > best_->second : value < best_->second);
  if (!better) return;
  best_ = std::make_pair(step, value);
  save();
}

void MinSaver::save() {
  const std::string latest = latest_checkpoint(dir_);
  if (latest.empty())
    throw_error(name(), ": cannot find a checkpoint in '", dir_,
                "'. Register a ModelSaver writing there, before this callback.");
  const std::string suffix = "-" + std::to_string(best_->first) + ".safetensors";
  const char* extreme = reverse_ ? "maximum" : "minimum";
  if (latest.size() < suffix.size() ||
      latest.compare(latest.size() - suffix.size(), suffix.size(), suffix) != 0) {
    logger::warn("[", name(), "] New ", extreme, " '", stat_, "' found at global_step=",
                 best_->first, ", but the latest checkpoint is ", latest, ".");
    logger::warn(name(), " will do nothing this time. The callbacks may have inconsistent "
                 "frequency or wrong order.");
    return;
  }
  const std::string target = join_path(dir_, filename_);
  atomic_write_file(target, read_file(latest));
  logger::info("Model at global_step=", best_->first, " with ", extreme, " ", stat_, "=",
               best_->second, " saved to ", target, ".");
}

}  // namespace spire
