// Implementation of train/dataflow_speed.h.
#include "train/dataflow_speed.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <utility>

#include "core/logger.h"

namespace spire {

bool yields_batches(const DataFlow& ds) {
  for (const DataFlow* d = &ds; d != nullptr;) {
    if (dynamic_cast<const BatchData*>(d) != nullptr) return true;
    const auto* proxy = dynamic_cast<const ProxyDataFlow*>(d);
    d = proxy != nullptr ? proxy->upstream().get() : nullptr;
  }
  return false;
}

TestDataSpeed::TestDataSpeed(std::shared_ptr<DataFlow> ds, int64_t size, int64_t warmup)
    : ProxyDataFlow(std::move(ds)), size_(size), warmup_(warmup) {
  if (size < 1) throw_error("TestDataSpeed: size must be >= 1, got ", size);
  if (warmup < 0) throw_error("TestDataSpeed: warmup must be >= 0, got ", warmup);
}

void TestDataSpeed::reset_state_impl() {
  if (!ds_->is_reset()) ds_->reset_state();
}

void TestDataSpeed::begin_epoch_impl() {
  start();
  ds_->begin_epoch();
}

DataSpeed TestDataSpeed::start() {
  if (!ds_->is_reset()) ds_->reset_state();
  DataSpeed s;
  s.batched = yields_batches(*ds_);
  ds_->begin_epoch();
  s.upstream_epochs = 1;
  bool epoch_empty = true;
  Datapoint dp;
  // The next datapoint, starting the upstream's next epoch when one ends.
  auto fetch = [&] {
    while (!ds_->next(dp)) {
      if (epoch_empty)
        throw_error("TestDataSpeed: ", ds_->name(), " yielded an empty epoch (upstream epoch ",
                    s.upstream_epochs, " of the test)");
      ds_->begin_epoch();
      ++s.upstream_epochs;
      epoch_empty = true;
    }
    epoch_empty = false;
  };
  for (int64_t i = 0; i < warmup_; ++i) fetch();
  const auto t0 = std::chrono::steady_clock::now();
  const std::clock_t cpu0 = std::clock();
  for (int64_t i = 0; i < size_; ++i) {
    fetch();
    if (!s.batched) {
      ++s.images;
    } else {
      if (dp.empty() || dp[0].shape().rank() < 1)
        throw_error("TestDataSpeed: ", ds_->name(), " yields batches, but a datapoint's component 0 has shape ",
                    dp.empty() ? std::string("(no components)") : dp[0].shape().to_string());
      s.images += dp[0].shape()[0];
    }
  }
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  s.cpu_seconds = static_cast<double>(std::clock() - cpu0) / CLOCKS_PER_SEC;
  s.datapoints = size_;
  char rate[96];
  std::snprintf(rate, sizeof(rate), "%.1f datapoints/s", s.datapoints_per_s());
  std::string line = str_cat("TestDataSpeed: ", s.datapoints, " datapoints of ", ds_->name(), " in ", s.seconds,
                             " s after ", warmup_, " warm-up datapoints: ", rate);
  if (s.batched) {
    std::snprintf(rate, sizeof(rate), "%.1f images/s", s.images_per_s());
    line += str_cat(", ", s.images, " images, ", rate);
  }
  logger::info(line);
  last_ = s;
  return s;
}

}  // namespace spire
