// The built-in callbacks (tensorpack's names and semantics) and
// default_callbacks(). Each family has its own header under train/callbacks/.
#pragma once

#include <vector>

#include "train/callback.h"

namespace spire {

/// tensorpack's DEFAULT_CALLBACKS(): MovingAverageSummary, ProgressBar,
/// MergeAllSummaries, RunUpdateOps.
std::vector<CallbackPtr> default_callbacks();

}  // namespace spire
