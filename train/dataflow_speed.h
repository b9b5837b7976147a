// TestDataSpeed: tensorpack's dataflow.TestDataSpeed, the speed of a DataFlow
// alone (no training): it pulls `warmup` datapoints untimed, then `size`
// datapoints timed, and reports datapoints/s, and images/s when the
// datapoints are batches (BatchData, train/dataflow.h). bench/image_pipeline.cc
// measures the ResNet example's input pipelines with it.
//
//   auto df = std::make_shared<BatchData>(images, 32);
//   DataSpeed s = TestDataSpeed(df, /*size=*/50, /*warmup=*/2).start();
//   std::printf("%.1f images/s\n", s.images_per_s());
//
// As in tensorpack, start() resets the upstream itself unless reset_state()
// was called, and used as a DataFlow (reset_state(), then epochs) it runs the
// test at the start of every epoch and then yields the upstream's datapoints.
// Unlike tensorpack's, whose test ends where the upstream's iterator does, the
// test continues into the upstream's next epoch when one ends before `size`
// datapoints (Spire's DataFlows end every epoch; an empty epoch is an error).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "train/dataflow.h"

namespace spire {

/// What one TestDataSpeed::start() measured (the timed part, after the warm-up).
struct DataSpeed {
  int64_t datapoints = 0;  // datapoints timed (= the test's size)
  /// Images in them: with batched datapoints the batches' first dimensions
  /// (of component 0) summed, else the number of datapoints.
  int64_t images = 0;
  bool batched = false;     // the datapoints were batches
  double seconds = 0;       // wall-clock time of the timed datapoints
  /// CPU time of the whole process (every thread, std::clock) over the timed
  /// datapoints: on a shared machine, the work they took, whatever share of
  /// the cores the process got.
  double cpu_seconds = 0;
  int64_t upstream_epochs = 0;  // upstream epochs begun by the test (warm-up included)

  double datapoints_per_s() const { return seconds > 0 ? static_cast<double>(datapoints) / seconds : 0.0; }
  double images_per_s() const { return seconds > 0 ? static_cast<double>(images) / seconds : 0.0; }
};

/// True when `ds` is a BatchData or wraps one through ProxyDataFlows
/// (PrefetchData, MapData, ...): its datapoints are then batches.
bool yields_batches(const DataFlow& ds);

/// Measures the speed of a DataFlow (tensorpack's TestDataSpeed; see the file
/// comment). size >= 1, warmup >= 0.
class TestDataSpeed : public ProxyDataFlow {
 public:
  explicit TestDataSpeed(std::shared_ptr<DataFlow> ds, int64_t size = 5000, int64_t warmup = 0);
  std::string name() const override { return "TestDataSpeed"; }

  /// Runs the test: resets the upstream unless it was reset, fetches `warmup`
  /// datapoints, then times `size` more (starting new upstream epochs as the
  /// old ones end), logs "TestDataSpeed: ... datapoints/s (... images/s)" and
  /// returns the figures. Each call starts a new upstream epoch first.
  DataSpeed start();
  /// The figures of the last start(), if any.
  const std::optional<DataSpeed>& last() const { return last_; }

  int64_t test_size() const { return size_; }
  int64_t warmup() const { return warmup_; }

 protected:
  /// Resets the upstream unless start() already has.
  void reset_state_impl() override;
  /// Runs start(), then begins the upstream's epoch that this one yields.
  void begin_epoch_impl() override;

 private:
  int64_t size_, warmup_;
  std::optional<DataSpeed> last_;
};

}  // namespace spire
