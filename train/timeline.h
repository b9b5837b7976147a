// Chrome trace JSON (the "Trace Event Format" that Perfetto and chrome://tracing open) from
// traced runs (core/step_stats.h): one process per file (a rank), one thread row per lane
// device (lanes of different runs on the same device share a row, whatever their index in
// each run's plan), one complete event ("ph": "X") per executed node or kernel
// event, with the op type as category and the node's extra key/values as args. Steps share one
// time axis (the wall clock at each run's start plus its steady-clock offsets), so a window of
// steps, or the files of several ranks, line up.
#pragma once

#include <string>
#include <vector>

#include "core/step_stats.h"

namespace spire {

/// The JSON text of `steps` as process `pid` named `process_name`.
std::string chrome_trace_json(const std::vector<StepStats>& steps, int pid,
                              const std::string& process_name);

/// Writes chrome_trace_json(...) to `path` (temp file + rename: never a partial file).
void write_chrome_trace(const std::string& path, const std::vector<StepStats>& steps, int pid,
                        const std::string& process_name);

/// Where the steps' time went, per op type: a text table with, per category of the executed
/// steps (depth 0), the milliseconds per run summed over lanes, the share of all lanes' busy
/// time, and the nodes per run; `top` rows, largest first, then the rest as one row. Ends
/// with each lane's busy and total time per run. For benchmarks and debugging.
std::string op_time_summary(const std::vector<StepStats>& steps, int top = 20);

}  // namespace spire
