// The built-in callbacks (tensorpack's names and semantics), one family per
// header under train/callbacks/, and default_callbacks(). Include this
// umbrella to get all of them:
//   saver.h     ModelSaver, MinSaver, MaxSaver
//   inference.h InferenceRunner, Inferencer, ScalarStats, ClassificationError
//   param.h     HyperParam, GraphVarParam, HyperParamSetter,
//               ScheduledHyperParamSetter, HyperParamSetterWithFunc
//   lr_schedule.h CosineWarmupSchedule (nanoGPT's get_lr),
//               HyperParamSetterWithStepFunc
//   summary.h   add_moving_summary, MovingAverageSummary, MergeAllSummaries
//   prog_bar.h  ProgressBar
//   misc.h      PeriodicTrigger, ProxyCallback, RunOp, RunUpdateOps,
//               EstimatedTimeLeft, ThroughputTracker
//   prof.h      GraphProfiler, Timeline (Chrome traces of chosen steps)
#pragma once

#include <vector>

#include "train/callback.h"
#include "train/callbacks/inference.h"
#include "train/callbacks/lr_schedule.h"
#include "train/callbacks/misc.h"
#include "train/callbacks/param.h"
#include "train/callbacks/prof.h"
#include "train/callbacks/prog_bar.h"
#include "train/callbacks/saver.h"
#include "train/callbacks/summary.h"

namespace spire {

/// tensorpack's DEFAULT_CALLBACKS(): MovingAverageSummary, ProgressBar,
/// MergeAllSummaries, RunUpdateOps (fresh instances on each call).
std::vector<CallbackPtr> default_callbacks();

}  // namespace spire
