// StepStats: what one traced Session::run did (TensorFlow's RunMetadata.step_stats). The
// executor records, for every step it runs, the node, op, device, lane and start/end times;
// a kernel may add events of its own (a collective's wait and transfer phases, with bytes and
// algorithm) through KernelContext::trace_event. The trainer's timeline (train/timeline.h)
// writes StepStats as Chrome trace JSON for Perfetto and chrome://tracing.
//
// Times are nanoseconds on the host's steady clock since the run started; start_unix_us is the
// wall clock at that moment, so steps (and ranks' files) line up on one axis. A GPU step's
// times are those of its host thread (enqueue), not of the device's queue, unless the backend
// synchronizes after every kernel.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace spire {

/// One interval on one lane.
struct TraceEvent {
  std::string name;      // the node's name, or a kernel's own label ("allreduce.wait")
  std::string category;  // the op type, or a kernel's category ("collective")
  std::string device;    // "cpu:0", "gpu:1"
  int lane = 0;          // the executor lane (one per device; 0 in sequential mode)
  int64_t start_ns = 0;  // since the run started
  int64_t end_ns = 0;
  /// 0: an executed step (added by the executor); 1: a kernel's own event inside its step.
  int depth = 0;
  /// Extra key/value pairs shown with the event (bytes, algorithm, ...).
  std::vector<std::pair<std::string, std::string>> args;
};

/// The trace of one run.
struct StepStats {
  uint64_t run_id = 0;
  int64_t start_unix_us = 0;  // wall clock when the run started
  /// The device of each lane, in lane order ("cpu:0", ...).
  std::vector<std::string> lane_devices;
  /// Every event, ordered by (lane, start).
  std::vector<TraceEvent> events;
};

/// Collects a run's events while it runs: one buffer per lane, behind one mutex.
class StepTrace {
 public:
  StepTrace(uint64_t run_id, std::vector<std::string> lane_devices)
      : lanes_(lane_devices.size()), start_(std::chrono::steady_clock::now()) {
    stats_.run_id = run_id;
    stats_.start_unix_us = std::chrono::duration_cast<std::chrono::microseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
    stats_.lane_devices = std::move(lane_devices);
  }

  /// Nanoseconds since the run started.
  int64_t now_ns() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                                start_)
        .count();
  }
  /// Adds an event to its lane's buffer. Safe from any thread (a kernel's event may come
  /// from one of its pool's workers); traced runs only, so the lock costs nothing otherwise.
  void add(TraceEvent e) {
    const size_t lane = static_cast<size_t>(e.lane);
    std::lock_guard<std::mutex> lock(mu_);
    if (lane < lanes_.size()) lanes_[lane].push_back(std::move(e));
  }
  /// The finished trace (after every lane has returned).
  StepStats finish() {
    for (auto& lane : lanes_) {
      std::stable_sort(lane.begin(), lane.end(), [](const TraceEvent& a, const TraceEvent& b) {
        return a.start_ns < b.start_ns;
      });
      for (auto& e : lane) stats_.events.push_back(std::move(e));
      lane.clear();
    }
    return std::move(stats_);
  }

 private:
  std::mutex mu_;
  std::vector<std::vector<TraceEvent>> lanes_;
  std::chrono::steady_clock::time_point start_;
  StepStats stats_;
};

}  // namespace spire
