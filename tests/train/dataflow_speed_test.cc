// Tests of TestDataSpeed (train/dataflow_speed.h): how many datapoints and
// images it counts (plain datapoints, batches with a remainder, batches behind
// a PrefetchData), warm-up and timed datapoints pulled across upstream epochs,
// resetting the upstream once whichever of start() and reset_state() comes
// first, and iterating it as a DataFlow. No timing is asserted.
#include "train/dataflow_speed.h"

#include <atomic>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"

namespace spire::testing {
namespace {

// Yields {i64 scalar i} for i = 0..n-1 each epoch; counts datapoints, epochs and resets.
class CountingFlow : public DataFlow {
 public:
  explicit CountingFlow(int64_t n) : n_(n) {}
  bool has_size() const override { return true; }
  int64_t size() const override { return n_; }
  std::string name() const override { return "CountingFlow"; }
  std::atomic<int64_t> produced{0}, epochs{0}, resets{0};

 protected:
  void reset_state_impl() override { ++resets; }
  void begin_epoch_impl() override {
    i_ = 0;
    ++epochs;
  }
  bool next_impl(Datapoint& dp) override {
    if (i_ >= n_) return false;
    dp = {Tensor::scalar<int64_t>(i_++)};
    ++produced;
    return true;
  }

 private:
  int64_t n_;
  int64_t i_ = 0;
};

TEST(TestDataSpeed, CountsWarmupAndTimedDatapointsAcrossEpochs) {
  auto flow = std::make_shared<CountingFlow>(10);
  TestDataSpeed test(flow, /*size=*/25, /*warmup=*/3);
  const DataSpeed s = test.start();
  EXPECT_EQ(s.datapoints, 25);
  EXPECT_EQ(s.images, 25);
  EXPECT_FALSE(s.batched);
  // 3 + 25 datapoints of 10 per epoch: three upstream epochs, nothing more pulled.
  EXPECT_EQ(flow->produced, 28);
  EXPECT_EQ(flow->epochs, 3);
  EXPECT_EQ(s.upstream_epochs, 3);
  EXPECT_GE(s.seconds, 0.0);
  ASSERT_TRUE(test.last().has_value());
  EXPECT_EQ(test.last()->datapoints, 25);
  // Each start() begins a new upstream epoch.
  const DataSpeed again = TestDataSpeed(flow, 4).start();
  EXPECT_EQ(again.upstream_epochs, 1);
  EXPECT_EQ(flow->epochs, 4);
  EXPECT_EQ(flow->produced, 32);
}

TEST(TestDataSpeed, CountsTheImagesOfBatchesWithTheirRemainders) {
  // Batches of 4, 4, 2 per epoch; warm-up takes the first 4, the test then
  // 4, 2 | 4, 4, 2 = 16 images in 5 batches.
  auto flow = std::make_shared<CountingFlow>(10);
  auto batches = std::make_shared<BatchData>(flow, 4, /*remainder=*/true);
  const DataSpeed s = TestDataSpeed(batches, 5, 1).start();
  EXPECT_TRUE(s.batched);
  EXPECT_EQ(s.datapoints, 5);
  EXPECT_EQ(s.images, 16);
  EXPECT_EQ(s.upstream_epochs, 2);
  if (s.seconds > 0) EXPECT_DOUBLE_EQ(s.images_per_s() / s.datapoints_per_s(), 16.0 / 5.0);
}

TEST(TestDataSpeed, SeesBatchesBehindAPrefetchData) {
  auto flow = std::make_shared<CountingFlow>(12);
  auto batches = std::make_shared<BatchData>(flow, 3);
  auto prefetch = std::make_shared<PrefetchData>(batches, 2);
  EXPECT_TRUE(yields_batches(*prefetch));
  EXPECT_FALSE(yields_batches(*flow));
  EXPECT_FALSE(yields_batches(*std::make_shared<PrefetchData>(flow, 2)));
  const DataSpeed s = TestDataSpeed(prefetch, 6, 2).start();
  EXPECT_TRUE(s.batched);
  EXPECT_EQ(s.images, 18);
  prefetch->stop();
}

TEST(TestDataSpeed, ResetsTheUpstreamOnceWhicheverComesFirst) {
  // start() first resets the upstream; reset_state() afterwards does not again.
  auto a = std::make_shared<CountingFlow>(5);
  TestDataSpeed ta(a, 2);
  ta.start();
  EXPECT_TRUE(a->is_reset());
  EXPECT_NO_THROW(ta.reset_state());
  EXPECT_EQ(a->resets, 1);
  EXPECT_THROW(ta.reset_state(), Error);  // the protocol's one reset per DataFlow
  // reset_state() first: start() uses the reset upstream.
  auto b = std::make_shared<CountingFlow>(5);
  TestDataSpeed tb(b, 2);
  tb.reset_state();
  EXPECT_EQ(b->resets, 1);
  EXPECT_EQ(tb.start().datapoints, 2);
  EXPECT_EQ(b->resets, 1);
}

TEST(TestDataSpeed, AsADataFlowTestsThenYieldsEveryEpochOfTheUpstream) {
  auto flow = std::make_shared<CountingFlow>(5);
  TestDataSpeed test(flow, /*size=*/3);
  EXPECT_EQ(test.size(), 5);
  test.reset_state();
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<int64_t> seen;
    for (Datapoint& dp : test.epoch()) seen.push_back(dp[0].data<int64_t>()[0]);
    EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2, 3, 4})) << "epoch " << epoch;
    ASSERT_TRUE(test.last().has_value());
    EXPECT_EQ(test.last()->datapoints, 3);
  }
  // Per epoch: the test's upstream epoch (3 datapoints), then the one yielded (5).
  EXPECT_EQ(flow->epochs, 4);
  EXPECT_EQ(flow->produced, 16);
}

TEST(TestDataSpeed, RejectsBadArgumentsAndEmptyEpochs) {
  auto flow = std::make_shared<CountingFlow>(0);
  EXPECT_THROW(TestDataSpeed(flow, 0), Error);
  EXPECT_THROW(TestDataSpeed(flow, 1, -1), Error);
  try {
    TestDataSpeed(flow, 1).start();
    FAIL() << "an empty upstream epoch must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CountingFlow yielded an empty epoch"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace spire::testing
