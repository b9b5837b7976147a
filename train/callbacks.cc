// default_callbacks(): the extra callbacks Trainer::train_with_defaults adds.
#include "train/callbacks.h"

namespace spire {

std::vector<CallbackPtr> default_callbacks() {
  return {std::make_shared<MovingAverageSummary>(), std::make_shared<ProgressBar>(),
          std::make_shared<MergeAllSummaries>(), std::make_shared<RunUpdateOps>()};
}

}  // namespace spire
