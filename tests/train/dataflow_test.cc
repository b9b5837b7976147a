// Tests of the DataFlow pipeline (train/dataflow.h): protocol checks, list,
// batch, repeat and map stages, deterministic shuffling, and the threaded
// PrefetchData / MultiThreadMapData (exactly-once epochs, bounded buffer,
// error propagation and clean shutdown with no thread left behind).
#include "train/dataflow.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <set>
#include <thread>

#include "tests/support/op_test_util.h"

namespace spire::testing {
namespace {

using namespace std::chrono_literals;

// Yields {i64 scalar i} for i = 0..n-1 (forever when n < 0); optionally
// sleeps per item and throws at item `throw_at`. Counts produced items.
class CountingFlow : public DataFlow {
 public:
  explicit CountingFlow(int64_t n, int64_t throw_at = -1, int sleep_ms = 0)
      : n_(n), throw_at_(throw_at), sleep_ms_(sleep_ms) {}
  bool has_size() const override { return n_ >= 0; }
  int64_t size() const override { return n_ >= 0 ? n_ : DataFlow::size(); }
  std::string name() const override { return "CountingFlow"; }
  std::atomic<int64_t> produced{0};
  std::atomic<int64_t> epochs{0};

 protected:
  void begin_epoch_impl() override {
    i_ = 0;
    ++epochs;
  }
  bool next_impl(Datapoint& dp) override {
    if (n_ >= 0 && i_ >= n_) return false;
    if (sleep_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms_));
    if (i_ == throw_at_) throw_error("CountingFlow: boom at item ", i_);
    dp = {Tensor::scalar<int64_t>(i_++)};
    ++produced;
    return true;
  }

 private:
  int64_t n_, throw_at_;
  int sleep_ms_;
  int64_t i_ = 0;
};

std::vector<Datapoint> int_list(int64_t n) {
  std::vector<Datapoint> out;
  for (int64_t i = 0; i < n; ++i) out.push_back({Tensor::scalar<int64_t>(i)});
  return out;
}

// Component 0 (an i64 scalar) of each datapoint of one epoch.
std::vector<int64_t> one_epoch(DataFlow& df) {
  std::vector<int64_t> out;
  for (Datapoint& dp : df.epoch()) out.push_back(dp.at(0).item<int64_t>());
  return out;
}

std::vector<int64_t> iota_vec(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i;
  return v;
}

std::vector<int64_t> sorted(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

// Waits (up to 5 s) until pred() holds.
template <typename Pred>
bool eventually(Pred pred) {
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// The process is back to `before` threads (a joined thread can linger in
// /proc/self/task for a moment, hence the wait).
#define EXPECT_THREADS_BACK_TO(before)                                       \
  EXPECT_TRUE(eventually([&] { return os_thread_count() <= (before); }))     \
      << os_thread_count() << " threads, expected " << (before)

// ---- protocol -----------------------------------------------------------------

TEST(DataFlow, ProtocolChecks) {
  DataFromList df(int_list(3), false);
  Datapoint dp;
  expect_error([&] { df.begin_epoch(); }, {"DataFromList", "reset_state() must be called"});
  expect_error([&] { df.next(dp); }, {"DataFromList", "reset_state() must be called"});
  df.reset_state();
  expect_error([&] { df.next(dp); }, {"next() called before begin_epoch()"});
  expect_error([&] { df.reset_state(); }, {"reset_state() was called twice", "DataFromList"});
  df.begin_epoch();
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(df.next(dp));
  EXPECT_FALSE(df.next(dp));
  EXPECT_FALSE(df.next(dp));  // stays exhausted until the next begin_epoch()
  EXPECT_EQ(one_epoch(df), iota_vec(3));

  CountingFlow inf(-1);
  EXPECT_FALSE(inf.has_size());
  expect_error([&] { inf.size(); }, {"size() is not available for CountingFlow"});
  MapData m(std::make_shared<CountingFlow>(-1), [](Datapoint d) { return std::optional(d); });
  expect_error([&] { m.size(); }, {"size() is not available for MapData"});
}

// ---- DataFromList / shuffle ------------------------------------------------------

TEST(DataFlow, DataFromListInOrder) {
  DataFromList df(int_list(7), /*shuffle=*/false);
  EXPECT_TRUE(df.has_size());
  EXPECT_EQ(df.size(), 7);
  df.reset_state();
  EXPECT_EQ(one_epoch(df), iota_vec(7));
  EXPECT_EQ(one_epoch(df), iota_vec(7));
}

TEST(DataFlow, ShuffleIsDeterministicPerSeedAndEpoch) {
  auto run = [](uint64_t seed, int epochs) {
    DataFromList df(int_list(50), true, seed);
    df.reset_state();
    std::vector<std::vector<int64_t>> out;
    for (int e = 0; e < epochs; ++e) out.push_back(one_epoch(df));
    return out;
  };
  auto a = run(7, 3), b = run(7, 3), c = run(8, 3);
  EXPECT_EQ(a, b);                 // same seed: same sequence of epochs
  EXPECT_NE(a[0], c[0]);           // another seed: another order
  EXPECT_NE(a[0], a[1]);           // epochs differ
  EXPECT_NE(a[1], a[2]);
  EXPECT_NE(a[0], iota_vec(50));   // actually shuffled
  for (const auto& e : a) EXPECT_EQ(sorted(e), iota_vec(50));  // permutations
  for (int e = 0; e < 3; ++e) EXPECT_EQ(a[static_cast<size_t>(e)], shuffled_indices(50, 7, e));

  // Resume at epoch 2 without replaying epochs 0 and 1.
  DataFromList resumed(int_list(50), true, 7);
  resumed.set_next_epoch(2);
  resumed.reset_state();
  EXPECT_EQ(resumed.next_epoch(), 2);
  EXPECT_EQ(one_epoch(resumed), a[2]);
  EXPECT_EQ(resumed.next_epoch(), 3);
  expect_error([&] { resumed.set_next_epoch(-1); }, {"must be >= 0"});
}

TEST(DataFlow, ShuffledIndicesArePinned) {
  // The documented sequence is part of the resume contract: it must not change
  // between versions or platforms.
  EXPECT_EQ(shuffled_indices(10, 42, 0),
            (std::vector<int64_t>{1, 6, 9, 4, 2, 3, 5, 0, 8, 7}));
  EXPECT_EQ(shuffled_indices(0, 1, 0), std::vector<int64_t>{});
  EXPECT_EQ(shuffled_indices(1, 1, 5), std::vector<int64_t>{0});
}

// ---- BatchData -----------------------------------------------------------------------

TEST(DataFlow, BatchDataDropsRemainder) {
  auto src = std::make_shared<DataFromList>(int_list(10), false);
  BatchData b(src, 3);
  EXPECT_EQ(b.size(), 3);
  b.reset_state();
  for (int e = 0; e < 2; ++e) {
    std::vector<Datapoint> batches;
    for (Datapoint& dp : b.epoch()) batches.push_back(dp);
    ASSERT_EQ(batches.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      ASSERT_EQ(batches[i].size(), 1u);
      EXPECT_EQ(batches[i][0].type_string(), "i64[3]");
      int64_t s = static_cast<int64_t>(3 * i);
      EXPECT_EQ(batches[i][0].to_vector<int64_t>(), (std::vector<int64_t>{s, s + 1, s + 2}));
    }
  }
}

TEST(DataFlow, BatchDataKeepsRemainder) {
  BatchData b(std::make_shared<DataFromList>(int_list(10), false), 3, /*remainder=*/true);
  EXPECT_EQ(b.size(), 4);
  b.reset_state();
  std::vector<Datapoint> batches;
  for (Datapoint& dp : b.epoch()) batches.push_back(dp);
  ASSERT_EQ(batches.size(), 4u);
  EXPECT_EQ(batches[3][0].type_string(), "i64[1]");
  EXPECT_EQ(batches[3][0].to_vector<int64_t>(), std::vector<int64_t>{9});
  BatchData exact(std::make_shared<DataFromList>(int_list(9), false), 3, true);
  EXPECT_EQ(exact.size(), 3);
}

TEST(DataFlow, BatchDataStacksComponents) {
  std::vector<Datapoint> list;
  for (int i = 0; i < 4; ++i)
    list.push_back({Tensor::from_vector<float>({2, 2}, {1.f * i, 2.f * i, 3.f * i, 4.f * i}),
                    Tensor::scalar<int64_t>(i)});
  BatchData b(std::make_shared<DataFromList>(list, false), 2);
  b.reset_state();
  b.begin_epoch();
  Datapoint dp;
  ASSERT_TRUE(b.next(dp));
  ASSERT_TRUE(b.next(dp));
  ASSERT_EQ(dp.size(), 2u);
  EXPECT_EQ(dp[0].type_string(), "f32[2, 2, 2]");
  EXPECT_EQ(dp[0].to_vector<float>(), (std::vector<float>{2, 4, 6, 8, 3, 6, 9, 12}));
  EXPECT_EQ(dp[1].to_vector<int64_t>(), (std::vector<int64_t>{2, 3}));
  EXPECT_FALSE(b.next(dp));
}

TEST(DataFlow, BatchDataRejectsMismatchedComponents) {
  std::vector<Datapoint> list = {
      {Tensor::scalar<int64_t>(0), Tensor::from_vector<float>({2}, {1, 2})},
      {Tensor::scalar<int64_t>(1), Tensor::from_vector<float>({3}, {1, 2, 3})}};
  BatchData b(std::make_shared<DataFromList>(list, false), 2);
  b.reset_state();
  b.begin_epoch();
  Datapoint dp;
  expect_error([&] { b.next(dp); }, {"BatchData", "component 1", "f32[2]", "f32[3]", "datapoint 1"});
  std::vector<Datapoint> dtypes = {{Tensor::scalar<int64_t>(0)}, {Tensor::scalar<float>(1)}};
  expect_error([&] { BatchData::aggregate_batch(dtypes); }, {"component 0", "i64[]", "f32[]"});
  std::vector<Datapoint> ncomp = {{Tensor::scalar<int64_t>(0)}, {}};
  expect_error([&] { BatchData::aggregate_batch(ncomp); }, {"0 components", "has 1"});
  expect_error([&] { BatchData(std::make_shared<DataFromList>(int_list(3)), 4); },
               {"batch_size 4", "larger than the size 3"});
  expect_error([&] { BatchData(std::make_shared<DataFromList>(int_list(3)), 0); },
               {"batch_size must be positive"});
}

// ---- FixedSizeData / RepeatedData / MapData ----------------------------------------------------------------

TEST(DataFlow, FixedSizeDataKeepsOrRestartsTheUpstream) {
  // keep_state: epochs continue the upstream (0 1 2 | 3 4 0 | 1 2 3).
  FixedSizeData keep(std::make_shared<DataFromList>(int_list(5), false), 3);
  EXPECT_EQ(keep.size(), 3);
  keep.reset_state();
  EXPECT_EQ(one_epoch(keep), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(one_epoch(keep), (std::vector<int64_t>{3, 4, 0}));
  EXPECT_EQ(one_epoch(keep), (std::vector<int64_t>{1, 2, 3}));
  // Without: the same first datapoints every epoch; a size past the upstream's wraps.
  FixedSizeData fresh(std::make_shared<DataFromList>(int_list(5), false), 7, false);
  fresh.reset_state();
  EXPECT_EQ(one_epoch(fresh), (std::vector<int64_t>{0, 1, 2, 3, 4, 0, 1}));
  EXPECT_EQ(one_epoch(fresh), (std::vector<int64_t>{0, 1, 2, 3, 4, 0, 1}));
  FixedSizeData empty(std::make_shared<DataFromList>(std::vector<Datapoint>{}), 2);
  empty.reset_state();
  empty.begin_epoch();
  Datapoint dp;
  expect_error([&] { empty.next(dp); }, {"FixedSizeData", "empty epoch"});
  expect_error([&] { FixedSizeData(std::make_shared<DataFromList>(int_list(2)), -1); },
               {"FixedSizeData", "size must be >= 0"});
}

TEST(DataFlow, RepeatedDataFiniteAndInfinite) {
  RepeatedData r(std::make_shared<DataFromList>(int_list(4), false), 3);
  EXPECT_EQ(r.size(), 12);
  r.reset_state();
  std::vector<int64_t> want;
  for (int k = 0; k < 3; ++k)
    for (int64_t i = 0; i < 4; ++i) want.push_back(i);
  EXPECT_EQ(one_epoch(r), want);
  EXPECT_EQ(one_epoch(r), want);

  RepeatedData inf(std::make_shared<DataFromList>(int_list(4), false), -1);
  EXPECT_FALSE(inf.has_size());
  expect_error([&] { inf.size(); }, {"size() is not available for RepeatedData"});
  inf.reset_state();
  inf.begin_epoch();
  Datapoint dp;
  for (int i = 0; i < 25; ++i) {
    ASSERT_TRUE(inf.next(dp));
    EXPECT_EQ(dp[0].item<int64_t>(), i % 4);
  }

  RepeatedData empty(std::make_shared<DataFromList>(std::vector<Datapoint>{}), -1);
  empty.reset_state();
  empty.begin_epoch();
  expect_error([&] { empty.next(dp); }, {"RepeatedData", "empty epoch"});
  RepeatedData zero(std::make_shared<DataFromList>(int_list(4)), 0);
  EXPECT_EQ(zero.size(), 0);
  zero.reset_state();
  EXPECT_TRUE(one_epoch(zero).empty());
  expect_error([&] { RepeatedData(std::make_shared<DataFromList>(int_list(4)), -2); },
               {"num must be -1"});
}

TEST(DataFlow, ShardDataSplitsEveryEpochIntoDisjointShards) {
  // 11 shuffled datapoints, 3 shards: with drop_remainder each shard takes 3
  // (positions 0..8); without, the shards cover all 11 once.
  for (bool drop : {true, false}) {
    std::vector<std::vector<int64_t>> shards;
    std::vector<std::unique_ptr<ShardData>> dfs;
    for (int k = 0; k < 3; ++k) {
      dfs.push_back(std::make_unique<ShardData>(std::make_shared<DataFromList>(int_list(11), true, 5), k, 3, drop));
      EXPECT_EQ(dfs.back()->size(), drop ? 3 : (k < 2 ? 4 : 3));
      dfs.back()->reset_state();
    }
    for (int epoch = 0; epoch < 2; ++epoch) {
      std::vector<int64_t> all;
      for (auto& df : dfs) {
        std::vector<int64_t> got = one_epoch(*df);
        EXPECT_EQ(static_cast<int64_t>(got.size()), df->size());
        all.insert(all.end(), got.begin(), got.end());
      }
      // Disjoint shards of the same shuffled order.
      std::vector<int64_t> order = shuffled_indices(11, 5, epoch);
      std::vector<int64_t> want;
      for (int k = 0; k < 3; ++k)
        for (int64_t p = k; p < (drop ? 9 : 11); p += 3) want.push_back(order[static_cast<size_t>(p)]);
      EXPECT_EQ(all, want) << "epoch " << epoch << (drop ? " drop" : "");
    }
  }
  expect_error([&] { ShardData(std::make_shared<DataFromList>(int_list(4)), 3, 3); }, {"shard 3 of 3"});
}

TEST(DataFlow, MapDataSkipsAndTransforms) {
  MapData m(std::make_shared<DataFromList>(int_list(10), false),
            [](Datapoint dp) -> std::optional<Datapoint> {
              int64_t v = dp[0].item<int64_t>();
              if (v % 2) return std::nullopt;
              return Datapoint{Tensor::scalar<int64_t>(v * 10)};
            });
  EXPECT_EQ(m.size(), 10);  // upstream's size, as tensorpack
  m.reset_state();
  EXPECT_EQ(one_epoch(m), (std::vector<int64_t>{0, 20, 40, 60, 80}));
  EXPECT_EQ(one_epoch(m), (std::vector<int64_t>{0, 20, 40, 60, 80}));
  expect_error([&] { MapData(std::make_shared<DataFromList>(int_list(1)), nullptr); },
               {"MapData", "map function is empty"});
}

TEST(DataFlow, MapDataComponent) {
  std::vector<Datapoint> list;
  for (int i = 0; i < 5; ++i)
    list.push_back({Tensor::scalar<float>(static_cast<float>(i)), Tensor::scalar<int64_t>(i)});
  MapDataComponent m(std::make_shared<DataFromList>(list, false),
                     [](Tensor t) -> std::optional<Tensor> {
                       int64_t v = t.item<int64_t>();
                       if (v == 2) return std::nullopt;
                       return Tensor::scalar<int64_t>(v + 100);
                     },
                     -1);
  m.reset_state();
  std::vector<int64_t> labels;
  std::vector<float> firsts;
  for (Datapoint& dp : m.epoch()) {
    firsts.push_back(dp[0].item<float>());
    labels.push_back(dp[1].item<int64_t>());
  }
  EXPECT_EQ(labels, (std::vector<int64_t>{100, 101, 103, 104}));
  EXPECT_EQ(firsts, (std::vector<float>{0, 1, 3, 4}));

  MapDataComponent bad(std::make_shared<DataFromList>(list, false),
                       [](Tensor t) { return std::optional(t); }, 2);
  bad.reset_state();
  bad.begin_epoch();
  Datapoint dp;
  expect_error([&] { bad.next(dp); }, {"MapDataComponent", "index 2", "2 components"});
}

// ---- PrefetchData / MultiThreadMapData ------------------------------------------------------------

TEST(DataFlowPrefetch, DeliversEachItemOncePerEpochInOrder) {
  const int64_t before = os_thread_count();
  {
    auto src = std::make_shared<CountingFlow>(100);
    PrefetchData pf(src, 8);
    EXPECT_EQ(pf.size(), 100);
    expect_error([&] { pf.begin_epoch(); }, {"PrefetchData", "reset_state() must be called"});
    pf.reset_state();
    EXPECT_EQ(pf.running_threads(), 1);
    EXPECT_GE(os_thread_count(), before + 1);
    for (int e = 0; e < 3; ++e) EXPECT_EQ(one_epoch(pf), iota_vec(100)) << "epoch " << e;
  }
  EXPECT_THREADS_BACK_TO(before);
}

TEST(DataFlowPrefetch, SeveralThreadsDeliverEachItemOncePerEpoch) {
  const int64_t before = os_thread_count();
  {
    auto src = std::make_shared<DataFromList>(int_list(200), true, 3);
    PrefetchData pf(src, 5, 3);
    pf.reset_state();
    EXPECT_GE(os_thread_count(), before + 3);
    EXPECT_EQ(pf.running_threads(), 3);
    for (int e = 0; e < 4; ++e) EXPECT_EQ(sorted(one_epoch(pf)), iota_vec(200)) << "epoch " << e;
    // Skipping maps upstream: epochs still end exactly at the upstream's end.
    auto skip = std::make_shared<MapData>(std::make_shared<DataFromList>(int_list(30), false),
                                          [](Datapoint dp) -> std::optional<Datapoint> {
                                            if (dp[0].item<int64_t>() % 3 == 0) return std::nullopt;
                                            return dp;
                                          });
    PrefetchData pf2(skip, 4, 2);
    pf2.reset_state();
    for (int e = 0; e < 3; ++e) EXPECT_EQ(one_epoch(pf2).size(), 20u);
  }
  EXPECT_THREADS_BACK_TO(before);
}

TEST(DataFlowPrefetch, BufferIsBounded) {
  for (int threads : {1, 3}) {
    const int64_t queue = 4;
    auto src = std::make_shared<CountingFlow>(-1);
    PrefetchData pf(src, queue, threads);
    pf.reset_state();
    // The workers fill the buffer, then block.
    ASSERT_TRUE(eventually([&] { return src->produced.load() >= queue; }));
    std::this_thread::sleep_for(50ms);
    EXPECT_LE(src->produced.load(), queue + threads);
    pf.begin_epoch();
    Datapoint dp;
    for (int64_t consumed = 1; consumed <= 30; ++consumed) {
      ASSERT_TRUE(pf.next(dp));
      if (consumed % 5 == 0) std::this_thread::sleep_for(5ms);
      EXPECT_LE(src->produced.load() - consumed, queue + threads) << "threads " << threads;
    }
  }
}

TEST(DataFlowPrefetch, ConsumerStopsEarly) {
  const int64_t before = os_thread_count();
  auto src = std::make_shared<CountingFlow>(1000000);
  {
    PrefetchData pf(src, 16, 2);
    pf.reset_state();
    pf.begin_epoch();
    Datapoint dp;
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(pf.next(dp));
  }  // destroyed mid-epoch with the workers blocked on a full buffer
  EXPECT_THREADS_BACK_TO(before);
  EXPECT_LE(src->produced.load(), 3 + 16 + 2);

  PrefetchData pf(std::make_shared<CountingFlow>(-1), 4);
  pf.reset_state();
  pf.begin_epoch();
  Datapoint dp;
  ASSERT_TRUE(pf.next(dp));
  pf.stop();
  EXPECT_EQ(pf.running_threads(), 0);
  EXPECT_THREADS_BACK_TO(before);
  expect_error([&] { pf.next(dp); }, {"PrefetchData", "after stop()"});
  pf.stop();  // idempotent
}

TEST(DataFlowPrefetch, UpstreamErrorPropagates) {
  const int64_t before = os_thread_count();
  {
    PrefetchData pf(std::make_shared<CountingFlow>(100, /*throw_at=*/5), 8);
    pf.reset_state();
    pf.begin_epoch();
    Datapoint dp;
    for (int64_t i = 0; i < 5; ++i) {
      ASSERT_TRUE(pf.next(dp));
      EXPECT_EQ(dp[0].item<int64_t>(), i);
    }
    expect_error([&] { pf.next(dp); }, {"CountingFlow: boom at item 5"});
    expect_error([&] { pf.next(dp); }, {"boom at item 5"});  // stays failed
    EXPECT_TRUE(eventually([&] { return pf.running_threads() == 0; }));  // the worker exited
  }
  EXPECT_THREADS_BACK_TO(before);
}

TEST(DataFlowPrefetch, DestructorWhileProducerBlocked) {
  const int64_t before = os_thread_count();
  auto src = std::make_shared<CountingFlow>(-1);
  auto t0 = std::chrono::steady_clock::now();
  {
    PrefetchData pf(src, 2, 4);
    pf.reset_state();  // no consumer at all
    ASSERT_TRUE(eventually([&] { return src->produced.load() >= 2; }));
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  EXPECT_THREADS_BACK_TO(before);
}

TEST(DataFlowPrefetch, StopWakesBlockedConsumer) {
  const int64_t before = os_thread_count();
  {
    // Each item takes 300 ms, so the consumer is blocked in next().
    PrefetchData pf(std::make_shared<CountingFlow>(-1, -1, 300), 2);
    pf.reset_state();
    pf.begin_epoch();
    std::string message;
    std::thread consumer([&] {
      Datapoint dp;
      try {
        pf.next(dp);
        pf.next(dp);
        pf.next(dp);
      } catch (const Error& e) {
        message = e.what();
      }
    });
    std::this_thread::sleep_for(100ms);
    pf.stop();
    consumer.join();
    EXPECT_NE(message.find("stopped"), std::string::npos) << message;
  }
  EXPECT_THREADS_BACK_TO(before);
}

TEST(DataFlowPrefetch, UnfinishedEpochContinues) {
  PrefetchData pf(std::make_shared<DataFromList>(int_list(10), false), 3);
  pf.reset_state();
  pf.begin_epoch();
  Datapoint dp;
  for (int64_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(pf.next(dp));
    EXPECT_EQ(dp[0].item<int64_t>(), i);
  }
  EXPECT_EQ(one_epoch(pf), (std::vector<int64_t>{3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(one_epoch(pf), iota_vec(10));
}

TEST(DataFlowPrefetch, RunsAtMostOneEpochAhead) {
  auto src = std::make_shared<CountingFlow>(3);
  PrefetchData pf(src, 100);
  pf.reset_state();
  ASSERT_TRUE(eventually([&] { return src->produced.load() >= 6; }));
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(src->produced.load(), 6);  // epochs 0 and 1, not more
  EXPECT_EQ(one_epoch(pf), iota_vec(3));
  ASSERT_TRUE(eventually([&] { return src->produced.load() >= 9; }));
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(src->produced.load(), 9);

  // An empty upstream does not make the workers spin through epochs.
  auto empty = std::make_shared<CountingFlow>(0);
  PrefetchData pe(empty, 4);
  pe.reset_state();
  std::this_thread::sleep_for(30ms);
  EXPECT_LE(empty->epochs.load(), 2);
  EXPECT_TRUE(one_epoch(pe).empty());
  EXPECT_TRUE(one_epoch(pe).empty());
  std::this_thread::sleep_for(30ms);
  EXPECT_LE(empty->epochs.load(), 4);
}

TEST(DataFlowPrefetch, ShuffledUpstreamKeepsEpochOrder) {
  // With one thread, the prefetched stream is exactly the upstream's.
  DataFromList ref(int_list(40), true, 11);
  ref.reset_state();
  PrefetchData pf(std::make_shared<DataFromList>(int_list(40), true, 11), 7);
  pf.reset_state();
  for (int e = 0; e < 3; ++e) EXPECT_EQ(one_epoch(pf), one_epoch(ref));
}

TEST(DataFlowPrefetch, MultiThreadMapDataRunsInParallel) {
  const int64_t before = os_thread_count();
  {
    std::atomic<int> active{0}, max_active{0};
    auto func = [&](Datapoint dp) -> std::optional<Datapoint> {
      int now = ++active;
      int prev = max_active.load();
      while (now > prev && !max_active.compare_exchange_weak(prev, now)) {
      }
      std::this_thread::sleep_for(5ms);
      --active;
      int64_t v = dp[0].item<int64_t>();
      if (v % 5 == 0) return std::nullopt;
      return Datapoint{Tensor::scalar<int64_t>(v * v)};
    };
    MultiThreadMapData m(std::make_shared<DataFromList>(int_list(40), true, 1), 4, func, 16);
    EXPECT_EQ(m.size(), 40);
    m.reset_state();
    std::vector<int64_t> want;
    for (int64_t v = 0; v < 40; ++v)
      if (v % 5) want.push_back(v * v);
    for (int e = 0; e < 3; ++e) EXPECT_EQ(sorted(one_epoch(m)), want) << "epoch " << e;
    EXPECT_GE(max_active.load(), 2);
    EXPECT_LE(max_active.load(), 4);
  }
  EXPECT_THREADS_BACK_TO(before);
}

TEST(DataFlowPrefetch, MultiThreadMapDataErrorPropagates) {
  const int64_t before = os_thread_count();
  {
    MultiThreadMapData m(std::make_shared<CountingFlow>(50), 3,
                         [](Datapoint dp) -> std::optional<Datapoint> {
                           if (dp[0].item<int64_t>() == 17) throw_error("map failed on 17");
                           return dp;
                         });
    m.reset_state();
    m.begin_epoch();
    Datapoint dp;
    expect_error([&] {
      while (m.next(dp)) {
      }
    }, {"map failed on 17"});
  }
  EXPECT_THREADS_BACK_TO(before);
  expect_error([&] { MultiThreadMapData(std::make_shared<CountingFlow>(5), 0, [](Datapoint d) {
                   return std::optional(d);
                 }); },
               {"num_threads must be >= 1"});
  expect_error([&] { PrefetchData(std::make_shared<CountingFlow>(5), 0); },
               {"buffer size must be >= 1"});
}

}  // namespace
}  // namespace spire::testing
