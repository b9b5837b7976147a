// MultiProcessTrainer (see multi_process_trainer.h): the chief's values and
// the chief's loop on every process, written once for every multi-process
// trainer.
#include "train/multi_process_trainer.h"

#include "core/error.h"
#include "core/logger.h"

namespace spire {

MultiProcessTrainer::~MultiProcessTrainer() = default;

std::vector<int64_t> MultiProcessTrainer::broadcast_from_chief(const std::vector<int64_t>& values,
                                                               const std::string& what) {
  std::vector<int64_t> out = chief_values(values, what);
  SPIRE_CHECK(out.size() == values.size(), process_name(), ": ", what, ": the chief sent ", out.size(),
              " value(s), this process has ", values.size());
  return out;
}

int64_t MultiProcessTrainer::broadcast_from_chief(int64_t value, const std::string& what) {
  return broadcast_from_chief(std::vector<int64_t>{value}, what)[0];
}

void MultiProcessTrainer::synchronize_loop(int64_t& steps_per_epoch, int& starting_epoch, int& max_epoch) {
  const std::vector<int64_t> given = {steps_per_epoch, starting_epoch, max_epoch};
  const std::vector<int64_t> chief = broadcast_from_chief(given, "synchronize_loop");
  if (chief != given)
    logger::info(process_name(), " runs the chief's loop: steps_per_epoch ", chief[0], ", epochs ", chief[1], "..",
                 chief[2], " (it was given ", steps_per_epoch, ", ", starting_epoch, "..", max_epoch, ")");
  steps_per_epoch = chief[0];
  starting_epoch = static_cast<int>(chief[1]);
  max_epoch = static_cast<int>(chief[2]);
}

}  // namespace spire
