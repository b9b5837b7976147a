// DataFlow: tensorpack's input pipeline in C++. A DataFlow produces
// datapoints (a list of Tensors, its "components") epoch after epoch; the
// trainers pull from one (usually through PrefetchData, which runs the
// upstream in background threads) and feed the graph's placeholders.
//
// Protocol (as tensorpack): call reset_state() once, then for each epoch call
// begin_epoch() and next(dp) until it returns false. A range-for does both:
//
//   auto df = std::make_shared<BatchData>(std::make_shared<Mnist>("train", dir), 128);
//   auto pf = std::make_shared<PrefetchData>(df, /*num_prefetch=*/8);
//   pf->reset_state();
//   for (int epoch = 0; epoch < 3; ++epoch)
//     for (Datapoint& dp : pf->epoch()) { ... dp[0], dp[1] ... }
//
// A DataFlow is driven by one thread at a time (the consumer, or the worker
// thread of a PrefetchData that owns it); it is not itself thread-safe.
// Wrappers hold their upstream by std::shared_ptr.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <deque>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/tensor.h"

namespace spire {

/// One datapoint: its components, e.g. {image, label}.
using Datapoint = std::vector<Tensor>;

/// The abstract input pipeline stage (tensorpack's DataFlow).
class DataFlow {
 public:
  virtual ~DataFlow() = default;
  DataFlow() = default;
  DataFlow(const DataFlow&) = delete;
  DataFlow& operator=(const DataFlow&) = delete;

  /// Prepares the DataFlow (and its upstream) for iteration: seeds RNGs,
  /// starts worker threads. Must be called exactly once, before the first
  /// begin_epoch(); a second call throws.
  void reset_state();
  bool is_reset() const { return reset_done_; }

  /// Starts a new epoch (the next pass over the data). Throws when
  /// reset_state() was not called.
  void begin_epoch();
  /// Writes the next datapoint of the current epoch into `dp` and returns
  /// true, or returns false at the end of the epoch (and keeps returning
  /// false until the next begin_epoch()). Throws when begin_epoch() was not
  /// called.
  bool next(Datapoint& dp);

  /// True when size() is known.
  virtual bool has_size() const { return false; }
  /// Number of datapoints per epoch; throws "size() is not available for
  /// <name>" when unknown (tensorpack's NotImplementedError).
  virtual int64_t size() const;
  /// Class name used in messages ("BatchData", ...).
  virtual std::string name() const = 0;

  /// A range over one epoch: begin() calls begin_epoch(); see the file comment.
  class EpochRange;
  EpochRange epoch();

  /// Resuming (see set_next_epoch): true when this DataFlow can start a
  /// later pass without reading the earlier ones. False by default.
  virtual bool can_set_next_epoch() const { return false; }
  /// Makes the pass the next begin_epoch() starts pass `e` (0-based, counted
  /// from reset_state()), as if `e` passes had been read: a resumed run
  /// continues the order of the interrupted one (PyTorch's
  /// DistributedSampler.set_epoch). Shuffling sources (DataFromList,
  /// ILSVRC12Files, TextWindowData) set their order's epoch; wrappers whose
  /// pass is one upstream pass (BatchData, ShardData, MapData,
  /// MapDataComponent; PrefetchData and MultiThreadMapData before
  /// reset_state()) pass it on. Throws spire::Error when
  /// can_set_next_epoch() is false, or for e < 0.
  virtual void set_next_epoch(int64_t e);

 protected:
  virtual void reset_state_impl() {}
  virtual void begin_epoch_impl() = 0;
  virtual bool next_impl(Datapoint& dp) = 0;

 private:
  bool reset_done_ = false;
  bool epoch_started_ = false;
  bool epoch_exhausted_ = false;
};

class DataFlow::EpochRange {
 public:
  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Datapoint;
    using difference_type = std::ptrdiff_t;
    using pointer = Datapoint*;
    using reference = Datapoint&;
    Datapoint& operator*() { return dp_; }
    Datapoint* operator->() { return &dp_; }
    Iterator& operator++() {
      if (!df_->next(dp_)) df_ = nullptr;
      return *this;
    }
    bool operator==(const Iterator& o) const { return df_ == o.df_; }
    bool operator!=(const Iterator& o) const { return df_ != o.df_; }

   private:
    friend class EpochRange;
    explicit Iterator(DataFlow* df) : df_(df) {}
    DataFlow* df_;
    Datapoint dp_;
  };
  explicit EpochRange(DataFlow* df) : df_(df) {}
  /// Calls begin_epoch() and fetches the first datapoint.
  Iterator begin() {
    df_->begin_epoch();
    Iterator it(df_);
    ++it;
    return it;
  }
  Iterator end() { return Iterator(nullptr); }

 private:
  DataFlow* df_;
};

/// A DataFlow that wraps one upstream; forwards reset_state(), size().
class ProxyDataFlow : public DataFlow {
 public:
  explicit ProxyDataFlow(std::shared_ptr<DataFlow> ds);
  bool has_size() const override { return ds_->has_size(); }
  int64_t size() const override;
  const std::shared_ptr<DataFlow>& upstream() const { return ds_; }
  /// When one pass of this DataFlow is one pass of the upstream
  /// (passes_through_epochs()), the upstream's.
  bool can_set_next_epoch() const override {
    return passes_through_epochs() && ds_->can_set_next_epoch();
  }
  void set_next_epoch(int64_t e) override;

 protected:
  /// True when each pass of this DataFlow is exactly one pass of the
  /// upstream (so set_next_epoch may be passed on). False by default.
  virtual bool passes_through_epochs() const { return false; }
  void reset_state_impl() override { ds_->reset_state(); }
  void begin_epoch_impl() override { ds_->begin_epoch(); }
  bool next_impl(Datapoint& dp) override { return ds_->next(dp); }
  std::shared_ptr<DataFlow> ds_;
};

/// The portable random stream of the data pipeline: SplitMix64 (Steele,
/// Lea, Flood 2014), the same numbers on every platform and compiler.
/// for_epoch(seed, e) is the stream of epoch e under `seed` (seed mixed
/// once, xor e * 0xD1B54A32D192ED03, mixed again), so a resumed run
/// reproduces epoch e without replaying earlier epochs.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t state) : state_(state) {}
  static SplitMix64 for_epoch(uint64_t seed, int64_t epoch);
  /// The next 64 random bits.
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, bound) (bound >= 1) without modulo bias: draws below
  /// 2^64 mod bound are rejected, the rest taken mod bound.
  uint64_t uniform_below(uint64_t bound) {
    const uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
    for (;;) {
      const uint64_t r = next();
      if (r >= threshold) return r % bound;
    }
  }

 private:
  uint64_t state_;
};

/// The permutation of [0, n) used by shuffling DataFlows for epoch `epoch`
/// (0-based) under `seed`. It depends only on (n, seed, epoch): a SplitMix64
/// stream keyed by mix(seed, epoch) drives a Fisher-Yates shuffle with
/// rejection sampling, so it is the same on every platform and compiler, and
/// a resumed run reproduces epoch e's order without replaying earlier epochs.
std::vector<int64_t> shuffled_indices(int64_t n, uint64_t seed, int64_t epoch);

/// The visiting order of a shuffling DataFlow's items, epoch by epoch: with
/// shuffle, epoch e visits shuffled_indices(n, seed, e), else 0..n-1. Shared by
/// DataFromList and the file-list readers (ILSVRC12Files).
class EpochOrder {
 public:
  EpochOrder(bool shuffle, uint64_t seed) : shuffle_(shuffle), seed_(seed) {}
  /// Starts the next epoch over n items.
  void begin(int64_t n);
  /// The next item's index, or -1 at the end of the epoch.
  int64_t next() { return pos_ < order_.size() ? order_[pos_++] : -1; }
  /// The epoch the next begin() starts; set it to resume (e >= 0; `who` names
  /// the DataFlow in the error).
  int64_t next_epoch() const { return next_epoch_; }
  void set_next_epoch(int64_t e, const std::string& who);
  bool shuffle() const { return shuffle_; }

 private:
  bool shuffle_;
  uint64_t seed_;
  int64_t next_epoch_ = 0;
  std::vector<int64_t> order_;
  size_t pos_ = 0;
};

/// Yields the datapoints of a list (tensorpack's DataFromList). With shuffle,
/// epoch e (counted from 0, one per begin_epoch(); see set_next_epoch())
/// visits them in the order shuffled_indices(n, seed, e); without, in list
/// order. Yielded datapoints share their buffers with the list: downstream
/// code must not modify tensors in place (clone() first).
class DataFromList : public DataFlow {
 public:
  explicit DataFromList(std::vector<Datapoint> list, bool shuffle = true, uint64_t seed = 0);
  bool has_size() const override { return true; }
  int64_t size() const override { return static_cast<int64_t>(list_.size()); }
  std::string name() const override { return "DataFromList"; }
  /// The index of the epoch the next begin_epoch() starts (0 after
  /// reset_state()); set it to resume a run at epoch `e` with the order it
  /// would have had.
  int64_t next_epoch() const { return order_.next_epoch(); }
  bool can_set_next_epoch() const override { return true; }
  void set_next_epoch(int64_t e) override { order_.set_next_epoch(e, name()); }

 protected:
  void begin_epoch_impl() override { order_.begin(static_cast<int64_t>(list_.size())); }
  bool next_impl(Datapoint& dp) override;

 private:
  std::vector<Datapoint> list_;
  EpochOrder order_;
};

/// Stacks batch_size consecutive datapoints into one whose component k has
/// shape [batch_size, ...shape of component k...] (tensorpack's BatchData).
/// Every datapoint of a batch must have the same number of components and,
/// per component, the same dtype and shape. With remainder=false the last
/// partial batch of an epoch is dropped (size() = n / batch_size), with
/// remainder=true it is yielded with a smaller first dimension (size() =
/// ceil(n / batch_size)).
class BatchData : public ProxyDataFlow {
 public:
  BatchData(std::shared_ptr<DataFlow> ds, int64_t batch_size, bool remainder = false);
  int64_t size() const override;
  std::string name() const override { return "BatchData"; }
  int64_t batch_size() const { return batch_size_; }

  /// Stacks the datapoints along a new first axis (the batching step alone).
  static Datapoint aggregate_batch(const std::vector<Datapoint>& dps);

 protected:
  bool passes_through_epochs() const override { return true; }
  bool next_impl(Datapoint& dp) override;

 private:
  int64_t batch_size_;
  bool remainder_;
  std::vector<Datapoint> buf_;
};

/// Repeats the upstream `num` times per epoch (num = -1: forever; size() is
/// then unavailable). An infinite repeat of an upstream whose epoch is empty
/// throws instead of spinning.
class RepeatedData : public ProxyDataFlow {
 public:
  RepeatedData(std::shared_ptr<DataFlow> ds, int64_t num);
  bool has_size() const override { return num_ >= 0 && ds_->has_size(); }
  int64_t size() const override;
  std::string name() const override { return "RepeatedData"; }

 protected:
  void begin_epoch_impl() override;
  bool next_impl(Datapoint& dp) override;

 private:
  int64_t num_;
  int64_t rep_ = 0;
  bool got_any_ = false;
};

/// Shard `index` of `count` of the upstream (distributed training: each
/// process reads its own part): the datapoints at positions p of each
/// epoch with p % count == index. With drop_remainder (training) only the
/// first (n / count) * count positions count, so every shard yields
/// n / count datapoints and the processes run the same number of steps;
/// without (inference) the shards together cover every datapoint once.
/// Every process must see the upstream in the same order (the same shuffle
/// seed), so the shards are disjoint in every epoch; each reads (and
/// skips) the whole upstream. drop_remainder needs the upstream's size.
class ShardData : public ProxyDataFlow {
 public:
  ShardData(std::shared_ptr<DataFlow> ds, int index, int count, bool drop_remainder = true);
  int64_t size() const override;
  std::string name() const override { return "ShardData"; }

 protected:
  bool passes_through_epochs() const override { return true; }
  void begin_epoch_impl() override;
  bool next_impl(Datapoint& dp) override;

 private:
  int index_, count_;
  bool drop_remainder_;
  int64_t pos_ = 0, limit_ = -1;
};

/// Exactly `size` datapoints per epoch from the upstream (tensorpack's
/// FixedSizeData): when the upstream's epoch ends first, its next epoch
/// continues. With keep_state (tensorpack's default) an epoch continues the
/// upstream where the previous one stopped; without, every epoch starts a new
/// upstream epoch (e.g. the same first `size` test images each time). An
/// upstream that yields an empty epoch is an error, not an endless wait.
class FixedSizeData : public ProxyDataFlow {
 public:
  FixedSizeData(std::shared_ptr<DataFlow> ds, int64_t size, bool keep_state = true);
  bool has_size() const override { return true; }
  int64_t size() const override { return size_; }
  std::string name() const override { return "FixedSizeData"; }

 protected:
  void begin_epoch_impl() override;
  bool next_impl(Datapoint& dp) override;

 private:
  int64_t size_;
  bool keep_state_;
  bool upstream_started_ = false;
  int64_t pos_ = 0;
};

/// Applies `func` to each datapoint; when func returns std::nullopt the
/// datapoint is skipped. size() is the upstream's (an upper bound when func
/// skips, as in tensorpack). A resume skips whole passes through it
/// (set_next_epoch): exact for a func without state of its own; one with a
/// generator (augment_component_func) draws differently after a resume.
class MapData : public ProxyDataFlow {
 public:
  using Func = std::function<std::optional<Datapoint>(Datapoint)>;
  MapData(std::shared_ptr<DataFlow> ds, Func func);
  std::string name() const override { return "MapData"; }

 protected:
  bool passes_through_epochs() const override { return true; }
  bool next_impl(Datapoint& dp) override;

 private:
  Func func_;
};

/// Applies `func` to component `index` of each datapoint (negative index
/// counts from the end); std::nullopt skips the datapoint.
class MapDataComponent : public ProxyDataFlow {
 public:
  using Func = std::function<std::optional<Tensor>(Tensor)>;
  MapDataComponent(std::shared_ptr<DataFlow> ds, Func func, int index = 0);
  std::string name() const override { return "MapDataComponent"; }

 protected:
  bool passes_through_epochs() const override { return true; }
  bool next_impl(Datapoint& dp) override;

 private:
  Func func_;
  int index_;
};

/// Shared engine of PrefetchData and MultiThreadMapData: `num_threads`
/// worker threads pull from the upstream (one at a time, under a mutex),
/// apply the optional map function (in parallel) and hand the results to the
/// consumer through a bounded buffer.
///
/// - Bounded: a worker pulls from the upstream only while (results waiting)
///   + (datapoints being pulled or mapped) < buffer_size, so the upstream is
///   never more than buffer_size datapoints ahead of the consumer.
/// - Epochs: consumer epochs are exactly upstream epochs (every datapoint of
///   an upstream epoch once, even with several threads and skipping maps).
///   Workers start upstream epoch 0 at reset_state() and run at most one
///   epoch ahead of the consumer's current (or, once finished, next) epoch. As in tensorpack, when the consumer calls
///   begin_epoch() before finishing an epoch, the new epoch continues with
///   the remaining datapoints of the unfinished one (nothing is discarded).
/// - Order: with one thread, upstream order; with several, any order.
/// - Errors: the first exception thrown by the upstream or the map function
///   stops the workers; the consumer gets the datapoints already finished,
///   then next() rethrows that exception (same type and message).
/// - Shutdown: stop() (also run by the destructor) wakes and joins every
///   worker, whether blocked on the buffer or waiting for the consumer; a
///   worker inside a slow upstream call is joined when that call returns. A
///   consumer blocked in next() in another thread is woken and gets an error.
class ParallelDataFlowBase : public ProxyDataFlow {
 public:
  ~ParallelDataFlowBase() override;
  /// Stops and joins all worker threads; idempotent. next() throws afterwards.
  void stop();
  /// Number of worker threads that have started and not yet exited.
  int64_t running_threads() const { return running_.load(); }
  int num_threads() const { return num_threads_; }
  int64_t buffer_size() const { return capacity_; }

 protected:
  /// Before reset_state() only (the workers start the upstream's first pass there).
  bool passes_through_epochs() const override { return !is_reset(); }
  ParallelDataFlowBase(std::shared_ptr<DataFlow> ds, int num_threads, int64_t buffer_size,
                       MapData::Func func, const char* what);
  void reset_state_impl() override;
  void begin_epoch_impl() override;
  bool next_impl(Datapoint& dp) override;

 private:
  struct EpochState {
    std::deque<Datapoint> ready;  // finished, not yet consumed
    int64_t in_flight = 0;   // pulled, not yet finished
    bool pull_done = false;  // the upstream epoch has ended
  };
  void worker_main();
  void join_all();

  MapData::Func func_;
  int num_threads_;
  int64_t capacity_;
  const char* what_;

  std::mutex join_mu_;  // serializes starting and joining threads_
  std::mutex pull_mu_;  // serializes upstream access (held while pulling)
  mutable std::mutex mu_;  // guards everything below
  std::condition_variable cv_producer_;
  std::condition_variable cv_consumer_;
  bool stop_ = false;
  bool started_ = false;
  std::exception_ptr error_;
  std::map<int64_t, EpochState> epochs_;
  int64_t pending_ = 0;        // total ready (unconsumed) + in flight
  int64_t prod_epoch_ = 0;     // upstream epoch the workers pull from
  bool prod_open_ = false;     // begin_epoch() called on the upstream for prod_epoch_
  int64_t cons_epoch_ = 0;     // upstream epoch the consumer reads
  bool cons_finished_ = false; // next() returned false for cons_epoch_
  std::vector<std::thread> threads_;
  std::atomic<int64_t> running_{0};
};

/// Runs the upstream in `num_threads` background threads that fill a buffer
/// of `num_prefetch` datapoints (tensorpack's PrefetchData /
/// MultiProcessRunner, with threads). Threads start at reset_state(). The
/// upstream is pulled by one thread at a time, so several threads only help
/// when handing over is the bottleneck; for parallel work use
/// MultiThreadMapData. See ParallelDataFlowBase for the guarantees.
class PrefetchData : public ParallelDataFlowBase {
 public:
  PrefetchData(std::shared_ptr<DataFlow> ds, int64_t num_prefetch, int num_threads = 1);
  std::string name() const override { return "PrefetchData"; }
};

/// Applies `func` to the upstream's datapoints in `num_threads` threads in
/// parallel (tensorpack's MultiThreadMapData, strict epochs, order not
/// preserved with more than one thread); std::nullopt skips a datapoint.
/// `func` must be safe to call concurrently. At most `buffer_size`
/// datapoints are pulled ahead of the consumer. See ParallelDataFlowBase.
class MultiThreadMapData : public ParallelDataFlowBase {
 public:
  MultiThreadMapData(std::shared_ptr<DataFlow> ds, int num_threads, MapData::Func func,
                     int64_t buffer_size = 200);
  std::string name() const override { return "MultiThreadMapData"; }
};

}  // namespace spire
